package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// scope is one reconcile of an ExtendedStatefulSet: what it read (newScope), what it decided for each
// zone (perZone) and the summary of those decisions (merge), from which applyStatus computes the status.
type scope struct {
	ests *extendedv1alpha1.ExtendedStatefulSet
	// orig is the object as read: the status patch and the waiting Event compare against it.
	orig *extendedv1alpha1.ExtendedStatefulSet
	now  time.Time
	// wantCfg is the config hash the pods should carry ("" without spec.updateOnEnvChange).
	wantCfg string
	// all are the versions of every zone, removed zones included, lowest first; byZone groups them by
	// zone name.
	all    []*version
	byZone map[string][]*version
	// layout are the zones of the spec in order (one unnamed zone without spec.az.zones); perZone are
	// their scopes, in the same order.
	layout  []zone
	perZone []*zoneScope
	// merged says the summary was computed from perZone.
	merged bool

	// zoneScope is the summary. Without zones it is the single zone's scope; with zones, newest and
	// current are those of the zone in focus (the one upgrading, else the first with trouble) and the
	// other fields summarise every zone. Before merge it holds what newScope read (missing, jobs).
	zoneScope
	// zones are the zones' scopes once merged with spec.az.zones (nil without zones).
	zones []*zoneScope
	// prefix names the zone in focus in condition messages ("" without zones).
	prefix string
	// readyNodes counts the Ready nodes of each zone (with zones).
	readyNodes map[string]int32
	// windows are spec.updateStrategy.restartWindows, parsed; windowErr says why they cannot be read
	// (configuration restarts then wait). windowOpens is when the next window opens after now, and
	// nextWindow that window (zero when none is set or none opens).
	windows     restartWindows
	windowErr   string
	windowOpens time.Time
	nextWindow  restartWindow
	// errMessage is the error that ended the reconcile, for the conditions; invalidSpec says the API
	// server refused an object built from the spec (apierrors.IsInvalid), which only a spec change fixes.
	errMessage  string
	invalidSpec bool
	// claims is what reconcileClaims found (nil: it did not look, or there are no claim templates).
	claims *claimReport
}

// zoneScope is what one reconcile found and decided for one zone's versions (reconcileZone).
type zoneScope struct {
	zone            zone
	versions        []*version
	newest, current *version
	// previous is the version kept for a rollback while the post Job of current runs (nil otherwise).
	previous *version
	// missing are the non-optional referenced ConfigMaps and Secrets that do not exist ("Kind/name").
	missing []string
	// waiting says why a new template does not start a version yet; waitReason is the condition reason
	// (default PodsNotReady).
	waiting, waitReason string
	// configPending: a configuration change waits for its debounce; configRolled: it was applied now;
	// restartPending: it waits for a restart window (holdForWindow).
	configPending, configRolled, restartPending bool
	requeueAfter                                time.Duration
	// jobs are the upgrade Jobs (shared by every zone); postJob names the post Job that runs for the
	// newest version, once every zone runs it.
	jobs    jobs
	postJob string
}

// newScope reads what the reconcile decides on: the config hash of the referenced data, the versions
// and the upgrade Jobs, and classifies each zone's versions. After an error the scope holds what was read
// until then, so the status still reports it.
func (r *Reconciler) newScope(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet) (*scope, error) {
	s := &scope{ests: ests, orig: ests.DeepCopy(), now: r.Clock.Now()}
	if w := ests.Spec.UpdateStrategy.RestartWindows; len(w) > 0 {
		var err error
		if s.windows, err = parseRestartWindows(w, s.now); err != nil {
			s.windowErr = err.Error()
		} else {
			s.windowOpens, s.nextWindow = s.windows.next(s.now)
		}
	}
	if r.secretAccess != nil && len(referencedNames(ests, "Secret")) > 0 {
		// The first read must not wait for the grant's own controller.
		if err := r.secretAccess.Ensure(ctx, ests.Namespace); err != nil {
			return s, err
		}
	}
	cfg, err := computeConfigHash(ctx, r.APIReader, r.HashKey, ests)
	if err != nil {
		return s, err
	}
	s.missing = cfg.missing
	if len(cfg.unused) > 0 {
		// Not an error (the entry narrows nothing), but a typo would restart more than the user meant.
		r.event(ests, nil, corev1.EventTypeWarning, extendedv1alpha1.ReasonReloadKeysUnused, "Reconcile",
			"spec.reloadKeys names %s, which the pod template does not reference: the entry has no effect", strings.Join(cfg.unused, ", "))
	}
	if ests.Spec.EffectiveUpdateOnEnvChange() {
		s.wantCfg = cfg.hash
	}
	if s.all, err = r.listVersions(ctx, ests); err != nil {
		return s, err
	}
	if s.jobs, err = r.listJobs(ctx, ests); err != nil {
		return s, err
	}
	s.layout = desiredZones(ests)
	s.byZone = map[string][]*version{}
	for _, v := range s.all {
		s.byZone[zoneOf(v)] = append(s.byZone[zoneOf(v)], v)
	}
	s.perZone = make([]*zoneScope, len(s.layout))
	for i, z := range s.layout {
		s.perZone[i] = &zoneScope{zone: z, missing: s.missing, jobs: s.jobs}
		s.perZone[i].classify(s.byZone[z.name])
	}
	return s, nil
}

// merge summarises the zones' scopes, once: reconcileNormal merges before it removes the zones no
// longer listed, the status write merges when the reconcile ended earlier. Before the zones were
// classified there is nothing to merge.
func (s *scope) merge() {
	if s.merged || s.perZone == nil {
		return
	}
	s.merged = true
	if len(s.layout) == 1 && !s.layout[0].zoned() {
		s.zoneScope = *s.perZone[0]
		return
	}
	sum := zoneScope{missing: s.perZone[0].missing, jobs: s.perZone[0].jobs}
	zoneWait := ""
	for i, zs := range s.perZone {
		if sum.postJob == "" {
			sum.postJob = zs.postJob
		}
		sum.versions = append(sum.versions, zs.versions...)
		sum.configPending = sum.configPending || zs.configPending
		sum.configRolled = sum.configRolled || zs.configRolled
		sum.restartPending = sum.restartPending || zs.restartPending
		if zs.requeueAfter > 0 {
			sum.requeueAfter = minPositive(sum.requeueAfter, zs.requeueAfter)
		}
		switch {
		case zs.waitReason == extendedv1alpha1.ReasonZoneUpgrade:
			if zoneWait == "" {
				zoneWait = zs.waiting
			}
		case zs.waiting != "" && sum.waiting == "":
			sum.waiting, sum.waitReason = fmt.Sprintf("zone %q: %s", s.layout[i].name, zs.waiting), zs.waitReason
		}
	}
	focus := s.focus()
	if sum.waiting == "" && zoneWait != "" && !upgrading(s.perZone[focus]) {
		sum.waiting, sum.waitReason = zoneWait, extendedv1alpha1.ReasonZoneUpgrade
	}
	sum.newest, sum.current = s.perZone[focus].newest, s.perZone[focus].current
	s.zoneScope, s.zones = sum, s.perZone
	s.prefix = fmt.Sprintf("zone %q: ", s.layout[focus].name)
}

// focus is the index of the zone the summary speaks of: the first upgrading, else the first whose newest
// version is stale, else the first not rolled out, else the first.
func (s *scope) focus() int {
	for _, trouble := range []func(*zoneScope) bool{
		upgrading,
		func(zs *zoneScope) bool {
			return zs.newest != nil && zs.newest.stale() && zs.newest.sts.DeletionTimestamp.IsZero()
		},
		func(zs *zoneScope) bool { return zs.current == nil || !zs.current.rolledOut() },
	} {
		if i := slices.IndexFunc(s.perZone, trouble); i >= 0 {
			return i
		}
	}
	return 0
}

// zoneScopes are the zones' scopes, or the summary itself without zones.
func (s *scope) zoneScopes() []*zoneScope {
	if len(s.zones) == 0 {
		return []*zoneScope{&s.zoneScope}
	}
	return s.zones
}

// allRolledOut reports whether every zone serves a version with all its pods Ready.
func (s *scope) allRolledOut() bool {
	for _, zs := range s.zoneScopes() {
		if zs.current == nil || !zs.current.rolledOut() {
			return false
		}
	}
	return true
}

// cleaningUp reports whether a zone still has a lower version next to a newer one that is not stale.
func (s *scope) cleaningUp() bool {
	for _, zs := range s.zoneScopes() {
		if len(zs.live()) > 1 && (zs.newest == nil || !zs.newest.stale()) {
			return true
		}
	}
	return false
}

// configRolling reports whether a zone's serving version is rolling its pods for a configuration change.
func (s *scope) configRolling() bool {
	for _, zs := range s.zoneScopes() {
		if c := zs.current; c != nil && !c.stale() && !c.rolledOut() && c.sts.Status.UpdatedReplicas < c.specReplicas() {
			return true
		}
	}
	return false
}

// postJobPending reports whether a zone's newest version serves in phase PostJob (its post Job waits
// for the other zones).
func (s *scope) postJobPending() bool {
	for _, zs := range s.zoneScopes() {
		if n := zs.newest; n != nil && n == zs.current && n.phase() == extendedv1alpha1.PhasePostJob {
			return true
		}
	}
	return false
}

// live are the versions not being deleted.
func (zs *zoneScope) live() []*version {
	var out []*version
	for _, v := range zs.versions {
		if v.sts.DeletionTimestamp.IsZero() {
			out = append(out, v)
		}
	}
	return out
}
