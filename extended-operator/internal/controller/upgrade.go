package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// reconcileNormal makes the versions of every zone agree with the spec (reconcileZones), then does what
// spans the zones: the post upgrade Job, the pruning of finished Jobs and the removal of the zones no
// longer listed.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) error {
	if err := r.reconcileZones(ctx, s); err != nil {
		return err
	}
	if err := r.reconcilePost(ctx, s); err != nil {
		return err
	}
	if err := r.pruneJobs(ctx, s.ests, s.all, s.jobs); err != nil {
		return err
	}
	s.merge()
	var err error
	if s.readyNodes, err = r.zoneNodes(ctx, s.layout); err != nil {
		return err
	}
	if err := r.removeUnlistedZones(ctx, s); err != nil {
		return err
	}
	// After merge: its poll while claims grow goes into the summary's requeue.
	return r.reconcileClaims(ctx, s)
}

// reconcileZones reconciles each zone (reconcileZone), one zone at a time where pods are replaced: a
// zone may start an upgrade only when no other zone is upgrading or rolling and every zone before it
// runs the new template; a configuration roll waits likewise (zoneGate).
func (r *Reconciler) reconcileZones(ctx context.Context, s *scope) error {
	// First, for every zone: a later zone's gate looks at the others' newest versions.
	for _, zs := range s.perZone {
		if err := r.restampStorageOnly(ctx, s.ests, zs); err != nil {
			return err
		}
	}
	waiting := 0
	for i := range s.layout {
		g, err := r.zoneGate(ctx, s, i)
		if err != nil {
			return err
		}
		zs := s.perZone[i]
		reconcile := r.reconcileZone
		if inPlace(s.ests) {
			reconcile = r.reconcileZoneInPlace
		}
		if err := reconcile(ctx, s, zs, g); err != nil {
			return err
		}
		if zs.waitReason == extendedv1alpha1.ReasonZoneUpgrade {
			waiting++
		}
	}
	zoneUpgradesWaiting.WithLabelValues(s.ests.Namespace, s.ests.Name).Set(float64(waiting))
	return nil
}

// zoneGate is what zone i may do in this reconcile, given what the zones before it decided.
func (r *Reconciler) zoneGate(ctx context.Context, s *scope, i int) (gate, error) {
	z, zs := s.layout[i], s.perZone[i]
	otherBusy := ""
	for j := range s.layout {
		if j != i && busy(s.perZone[j]) {
			otherBusy = s.layout[j].name
			break
		}
	}
	behind := ""
	for j := range i {
		if n := s.perZone[j].newest; n != nil && (n.templateHash() != s.layout[j].hash || n != s.perZone[j].current ||
			(n.inPlace() && (n.stale() || n.phase() != extendedv1alpha1.PhaseDone))) {
			behind = s.layout[j].name
			break
		}
	}
	// A zone replacing its own version in flight (the template changed again) may go on: it is the one
	// zone busy, and holding it would leave it half upgraded.
	g := gate{upgrade: otherBusy == "" && (behind == "" || upgrading(zs)), roll: otherBusy == "", all: s.all}
	switch {
	case otherBusy != "":
		g.why = fmt.Sprintf("zone %q waits: zone %q is upgrading or rolling its pods (zones go one at a time)", z.name, otherBusy)
	case behind != "":
		g.why = fmt.Sprintf("zone %q waits: zone %q does not run the new template yet (zones go in spec.az.zones order)", z.name, behind)
	}
	if zs.newest != nil {
		g.next = freeNumber(s.ests, s.all, z, zs.newest.number+1)
		return g, nil
	}
	var err error
	g.next, err = r.firstNumber(ctx, s.ests, s.all, z)
	return g, err
}

// removeUnlistedZones deletes the StatefulSets of zones no longer listed once the listed ones serve
// fully, so a move between zone layouts (or from no zones to zones) never leaves fewer Ready pods than
// before.
func (r *Reconciler) removeUnlistedZones(ctx context.Context, s *scope) error {
	for name, vs := range s.byZone {
		if slices.ContainsFunc(s.layout, func(z zone) bool { return z.name == name }) {
			continue
		}
		if !s.allRolledOut() {
			s.waiting = fmt.Sprintf("zone %q was removed; its StatefulSets go once every listed zone has all its pods Ready", name)
			s.requeueAfter = minPositive(s.requeueAfter, pollWhileWaiting)
			continue
		}
		if err := r.removeZone(ctx, s.ests, name, vs); err != nil {
			return err
		}
	}
	return nil
}

// gate is what zoneGate allows a zone to do in this reconcile.
type gate struct {
	// upgrade: the zone may start a new version; roll: it may apply a configuration change.
	upgrade, roll bool
	// why says why not.
	why string
	// next is the number of the zone's next version.
	next int
	// all are the versions of every zone (to find a pre Job another zone ran for the same template).
	all []*version
}

// freeNumber is the lowest version number >= from whose StatefulSet name no other version uses: after
// the zone list changed, a zone index can name StatefulSets of a removed zone still being deleted.
func freeNumber(ests *extendedv1alpha1.ExtendedStatefulSet, all []*version, z zone, from int) int {
	n := from
	if inPlace(ests) {
		return n // the name has no number: nothing to skip
	}
	for slices.ContainsFunc(all, func(v *version) bool { return v.sts.Name == statefulSetName(ests, z, n) && zoneOf(v) != z.name }) {
		n++
	}
	return n
}

// classify records a zone's versions, its newest and the serving one (the highest not stale and Done).
func (zs *zoneScope) classify(versions []*version) {
	zs.versions = versions
	if len(versions) == 0 {
		return
	}
	zs.newest = versions[len(versions)-1]
	if zs.newest.inPlace() {
		// One StatefulSet serves and updates: the pods below its partition run the previous template.
		zs.current = zs.newest
		return
	}
	for _, v := range versions {
		if p := v.phase(); !v.stale() && (p == extendedv1alpha1.PhaseDone || p == extendedv1alpha1.PhasePostJob) {
			zs.previous, zs.current = zs.current, v
		}
	}
	if zs.current == nil || zs.current != zs.newest || zs.current.phase() != extendedv1alpha1.PhasePostJob {
		// Only a version whose post Job runs keeps a previous one (for a rollback).
		zs.previous = nil
	}
}

// reconcileZone makes one zone's versions agree with the spec: it creates a version for a new template
// (when the gate allows), drives the newest version through Canary, Rollout and Done (or marks it stale),
// deletes versions that are neither serving nor newest, keeps replica counts and rolls pods on a
// configuration change (when the gate allows).
func (r *Reconciler) reconcileZone(ctx context.Context, s *scope, zs *zoneScope, g gate) error {
	ests, z, wantCfg, now := s.ests, zs.zone, s.wantCfg, s.now
	versions := zs.versions
	hash := z.hash
	desired := z.replicas

	if len(versions) == 0 {
		if len(zs.missing) > 0 {
			return nil // never start pods that cannot start: MissingReference says why
		}
		// Nothing serves yet, so the first version needs no canaries (and starting a zone is no upgrade).
		v, err := r.createVersion(ctx, ests, z, g.next, wantCfg, extendedv1alpha1.PhaseDone, desired, now, "")
		if v != nil {
			zs.versions = []*version{v}
			zs.newest, zs.current = v, v
		}
		return err
	}

	newest, current := zs.newest, zs.current
	if done, err := r.deleteSuperseded(ctx, ests, zs, desired); err != nil || !done {
		return err
	}
	if current != nil && current != newest && !handingOver(newest, current) {
		if err := r.ensureReplicas(ctx, ests, current, desired); err != nil {
			return err
		}
	}

	if newest.templateHash() != hash {
		if !g.upgrade {
			zs.waiting, zs.waitReason = g.why, extendedv1alpha1.ReasonZoneUpgrade
			zs.requeueAfter = minPositive(zs.requeueAfter, pollWhileWaiting)
		} else if err := r.startVersion(ctx, ests, zs, z, g, newest, current, wantCfg, now); err != nil || zs.newest != newest {
			return err
		}
		// The new version waits: the existing ones keep being driven and restarted on config changes.
	}

	if err := r.driveNewest(ctx, ests, zs, newest, desired, now); err != nil {
		return err
	}
	if len(ests.Spec.Template.Spec.VolumeClaimTemplates) > 0 || usesHandover(newest.sts) {
		// The last step of each volume move: its reclaim policy back once its new claim is bound.
		if err := r.restoreHeldVolumes(ctx, zs, ests.Namespace); err != nil {
			return err
		}
	}
	for _, v := range zs.versions {
		if err := r.recreateStuckPod(ctx, ests, zs, v); err != nil {
			return err
		}
	}
	if r.holdForWindow(s, zs) {
		return nil
	}
	if !g.roll {
		holdConfig(zs, wantCfg)
		return nil
	}
	return r.rollConfig(ctx, ests, zs, z, wantCfg, now)
}

// holdForWindow reports whether the zone's configuration change waits for a restart window
// (spec.updateStrategy.restartWindows): a version's config hash is behind and no window is open, or the
// windows cannot be read. It notes the wait (RestartPending) and comes back exactly when the next window
// opens; nothing else is written meanwhile. The debounce starts afresh inside the window, so a burst of
// edits at its opening still rolls once.
func (r *Reconciler) holdForWindow(s *scope, zs *zoneScope) bool {
	if len(s.ests.Spec.UpdateStrategy.RestartWindows) == 0 || !configBehind(zs, s.wantCfg) {
		return false
	}
	if s.windowErr == "" && s.windows.open(s.now) {
		return false
	}
	zs.restartPending = true
	if s.windowErr == "" {
		// parseRestartWindows refused a schedule that never opens, so there is a next opening.
		zs.requeueAfter = minPositive(zs.requeueAfter, s.windowOpens.Sub(s.now))
	}
	r.debounce.forget(debounceKey(s.ests, zs.zone))
	return true
}

// configBehind reports whether a version of the zone that is neither stale nor being deleted carries
// another config hash than wantCfg, while rolling it is possible (updateOnEnvChange, nothing missing).
func configBehind(zs *zoneScope, wantCfg string) bool {
	if wantCfg == "" || len(zs.missing) > 0 {
		return false
	}
	return slices.ContainsFunc(zs.versions, func(v *version) bool {
		return !v.stale() && v.configHash() != wantCfg && v.sts.DeletionTimestamp.IsZero()
	})
}

// holdConfig notes a configuration change the zone may not roll yet (another zone is busy): it is
// pending, and the reconcile comes back for it.
func holdConfig(zs *zoneScope, wantCfg string) {
	if wantCfg != "" && len(zs.missing) == 0 && slices.ContainsFunc(zs.versions, func(v *version) bool { return !v.stale() && v.configHash() != wantCfg }) {
		zs.configPending = true
		zs.requeueAfter = minPositive(zs.requeueAfter, pollWhileWaiting)
	}
}

// deleteSuperseded deletes the versions that neither serve nor are the newest: they were superseded (a
// lower version once a higher one is rolled out, or an unfinished or stale version replaced by a newer
// template). The previous version kept for a rollback stays, without pods. It returns false while a
// superseded version still runs ordinals on volumes of the serving version: they move back first.
func (r *Reconciler) deleteSuperseded(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, zs *zoneScope, desired int32) (bool, error) {
	newest, current := zs.newest, zs.current
	for _, v := range zs.versions {
		if v == zs.previous && keepPrevious(ests) && v.sts.DeletionTimestamp.IsZero() {
			// Kept for a rollback while the post Job runs, without pods (with volumes it runs no ordinal).
			if !usesHandover(v.sts) {
				if err := r.ensureReplicas(ctx, ests, v, 0); err != nil {
					return false, err
				}
			}
			continue
		}
		if v == newest || v == current {
			continue
		}
		if handingOver(v, current) {
			// It runs ordinals on volumes moved from the serving version: they go back first, or their
			// data would stay behind on its claims.
			done, err := r.handBack(ctx, ests, zs, v, current, desired)
			if err != nil || !done {
				zs.waiting = fmt.Sprintf("moving the volumes of superseded version %d back to version %d", v.number, current.number)
				return false, err
			}
		}
		if err := r.deleteVersion(ctx, ests, v, "superseded by version "+strconv.Itoa(newest.number)); err != nil {
			return false, err
		}
	}
	return true, nil
}

// startVersion creates the StatefulSet of the next version, unless the serving version must first be
// Ready (updateNotReady false) or a referenced object is missing. With a pre upgrade Job the version
// starts in phase PreJob at 0 replicas, unless the Job already completed for this template in another
// zone.
func (r *Reconciler) startVersion(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, zs *zoneScope, z zone,
	g gate, newest, current *version, wantCfg string, now time.Time) error {
	desired, number := z.replicas, g.next
	if len(zs.missing) > 0 {
		zs.waiting = "the template changed, but the new version would not start: " + strings.Join(zs.missing, ", ") + " missing"
		return nil
	}
	// The gate applies to an upgrade from a settled version; a template change during an upgrade replaces
	// the version in flight (whose ordinals go back first, see deleteSuperseded).
	if current != nil && current == newest && !ests.Spec.UpdateStrategy.UpdateNotReady && !current.rolledOut() {
		zs.waiting = fmt.Sprintf("the template changed; version %d is not Ready, so the upgrade waits (set spec.updateStrategy.updateNotReady to upgrade anyway)", current.number)
		zs.requeueAfter = pollWhileWaiting
		return nil
	}
	phase, replicas := firstPhase(ests, current, desired)
	preJob := ""
	if jobTemplate(ests, extendedv1alpha1.UpgradeJobPre) != nil {
		done := false
		if preJob, done = preJobFor(ests, zs.jobs, g.all, number); !done {
			phase, replicas = extendedv1alpha1.PhasePreJob, 0
		}
	}
	v, err := r.createVersion(ctx, ests, z, number, wantCfg, phase, replicas, now, preJob)
	if v != nil {
		zs.versions = append(zs.versions, v)
		zs.newest = v
		zs.requeueAfter = watchTime(ests, phase)
	}
	return err
}

// createVersion creates a version's StatefulSet. An existing one of that name (created by an earlier
// reconcile whose result the cache had not seen) is not an error: the next reconcile reads it.
func (r *Reconciler) createVersion(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, z zone, number int,
	cfgHash, phase string, replicas int32, now time.Time, preJob string) (*version, error) {
	sts := buildStatefulSet(ests, z, number, cfgHash, phase, replicas, now)
	sts.Annotations[replicasAnnotation] = strconv.Itoa(int(replicas))
	if preJob != "" {
		sts.Annotations[extendedv1alpha1.PreJobAnnotation] = preJob
	}
	if err := r.setOwner(ests, sts); err != nil {
		return nil, err
	}
	if err := r.Client.Create(ctx, sts); err != nil {
		if apierrors.IsAlreadyExists(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			// Made by an earlier reconcile the cache has not shown yet; or the namespace is going away,
			// and the ExtendedStatefulSet with it.
			return nil, nil
		}
		return nil, fmt.Errorf("creating StatefulSet %s: %w", sts.Name, err)
	}
	versionsCreated.WithLabelValues(ests.Namespace, ests.Name).Inc()
	ctrl.LoggerFrom(ctx).Info("created a version", "statefulSet", sts.Name, "version", number, "phase", phase, "replicas", replicas)
	r.event(ests, sts, corev1.EventTypeNormal, extendedv1alpha1.EventVersionCreated, "Create",
		"Created StatefulSet %s for version %d (%s, %d replicas)", sts.Name, number, phase, replicas)
	return &version{number: number, sts: sts}, nil
}

// driveNewest moves the newest version through its phases.
func (r *Reconciler) driveNewest(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, zs *zoneScope,
	v *version, desired int32, now time.Time) error {
	if v.phase() == extendedv1alpha1.PhasePreJob && !v.stale() {
		return r.drivePre(ctx, ests, zs, v, desired)
	}
	if handingOver(v, zs.current) {
		return r.driveHandover(ctx, ests, zs, v, desired, now)
	}
	if v.stale() {
		if rolledBack(v) && zs.current != nil && !zs.current.rolledOut() {
			// Rolled back: the failed version serves until the previous one runs all its pods again.
			zs.requeueAfter = minPositive(zs.requeueAfter, pollWhileWaiting)
			return nil
		}
		return r.ensureReplicas(ctx, ests, v, 0)
	}
	switch v.phase() {
	case extendedv1alpha1.PhaseCanary:
		canaries := min(ptr.Deref(ests.Spec.UpdateStrategy.Canaries, 1), desired)
		if err := r.ensureReplicas(ctx, ests, v, canaries); err != nil {
			return err
		}
		if v.specReplicas() == canaries && v.ready() >= canaries {
			return r.setPhase(ctx, ests, v, extendedv1alpha1.PhaseRollout, desired, now,
				"Version %d: %d canaries Ready, starting the remaining pods", v.number, canaries)
		}
		return r.checkWatch(ctx, ests, zs, v, now, true)
	case extendedv1alpha1.PhaseRollout:
		if err := r.ensureReplicas(ctx, ests, v, desired); err != nil {
			return err
		}
		if v.rolledOut() {
			return r.finishRollout(ctx, ests, zs, v, desired, now)
		}
		return r.checkWatch(ctx, ests, zs, v, now, false)
	default: // Done, or an unknown phase written by hand: keep it as the serving version.
		return r.ensureReplicas(ctx, ests, v, desired)
	}
}

// finishRollout makes a fully rolled out version the serving one and deletes the lower versions. With a
// post upgrade Job the version goes to phase PostJob instead of Done (reconcilePost runs the Job once
// every zone runs it), and with rollbackOnPostFailure the serving version is kept, without pods, until
// the Job succeeded.
func (r *Reconciler) finishRollout(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, zs *zoneScope,
	v *version, desired int32, now time.Time) error {
	if start := v.creationTime(); !start.IsZero() && zs.current != nil {
		upgradeDuration.Observe(now.Sub(start).Seconds())
	}
	phase, format := extendedv1alpha1.PhaseDone, "Version %d rolled out: all %d pods Ready"
	post := zs.current != nil && jobTemplate(ests, extendedv1alpha1.UpgradeJobPost) != nil
	if post {
		phase, format = extendedv1alpha1.PhasePostJob, "Version %d rolled out: all %d pods Ready; the post upgrade Job follows"
	}
	if err := r.setPhase(ctx, ests, v, phase, desired, now, format, v.number, desired); err != nil {
		return err
	}
	keep := (*version)(nil)
	if post && keepPrevious(ests) {
		keep = zs.current
	}
	// The lower versions go in this same reconcile, now that this one serves.
	for _, old := range zs.versions {
		if old.number < v.number && old != keep {
			if err := r.deleteVersion(ctx, ests, old, "version "+strconv.Itoa(v.number)+" rolled out"); err != nil {
				return err
			}
		}
	}
	if keep != nil && !usesHandover(keep.sts) {
		if err := r.ensureReplicas(ctx, ests, keep, 0); err != nil {
			return err
		}
	}
	zs.previous, zs.current = keep, v
	return nil
}

// handingOver reports whether newest moves its ordinals over from (or, failed, back to) current.
func handingOver(newest, current *version) bool {
	return current != nil && newest != current && usesHandover(newest.sts) &&
		(!newest.stale() || newest.specReplicas() > 0 || ordinalStart(current.sts) > 0)
}

// checkWatch enforces the watch time of a version's phase: each newly Ready pod restarts it; when it
// runs out, canaries are restarted (up to retryCount times) and then the version is marked stale.
func (r *Reconciler) checkWatch(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, zs *zoneScope,
	v *version, now time.Time, canary bool) error {
	phase := v.phase()
	limit := watchTime(ests, phase)
	start := v.phaseStart()
	if start.IsZero() || v.ready() > v.intAnnotation(extendedv1alpha1.ProgressAnnotation) {
		// Progress (or no recorded start): the watch restarts for the next pod.
		return r.patchVersion(ctx, v, func(sts *appsv1.StatefulSet) {
			sts.Annotations[extendedv1alpha1.PhaseStartAnnotation] = now.UTC().Format(time.RFC3339Nano)
			sts.Annotations[extendedv1alpha1.ProgressAnnotation] = strconv.Itoa(int(v.ready()))
		})
	}
	if left := start.Add(limit).Sub(now); left > 0 {
		zs.requeueAfter = left + 10*time.Millisecond
		return nil
	}
	retries := v.intAnnotation(extendedv1alpha1.CanaryRetriesAnnotation)
	if canary && retries < ests.Spec.UpdateStrategy.RetryCount {
		if err := r.restartNotReadyPods(ctx, v); err != nil {
			return err
		}
		canaryRetries.WithLabelValues(ests.Namespace, ests.Name).Inc()
		r.event(ests, v.sts, corev1.EventTypeWarning, extendedv1alpha1.EventCanaryRetry, "Restart",
			"Version %d: canaries not Ready within %s; restarted them (retry %d of %d)", v.number, limit, retries+1, ests.Spec.UpdateStrategy.RetryCount)
		zs.requeueAfter = limit
		return r.patchVersion(ctx, v, func(sts *appsv1.StatefulSet) {
			sts.Annotations[extendedv1alpha1.CanaryRetriesAnnotation] = strconv.Itoa(int(retries + 1))
			sts.Annotations[extendedv1alpha1.PhaseStartAnnotation] = now.UTC().Format(time.RFC3339Nano)
			sts.Annotations[extendedv1alpha1.ProgressAnnotation] = "0"
		})
	}
	reason, what := extendedv1alpha1.ReasonCanaryFailed, "canaries"
	if !canary {
		reason, what = extendedv1alpha1.ReasonUpdateFailed, "pods"
	}
	msg := fmt.Sprintf("version %d: %s not Ready within %s after %d retries; marked stale", v.number, what, limit, retries)
	if zs.current != nil {
		msg += fmt.Sprintf(", version %d keeps serving", zs.current.number)
	}
	return r.markStale(ctx, ests, v, reason, msg)
}

// markStale annotates a failed version stale and scales it to zero; the serving version is untouched.
func (r *Reconciler) markStale(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, v *version, reason, msg string) error {
	return r.markStaleKeeping(ctx, ests, v, reason, msg, false)
}

// markStaleKeeping is markStale; with keepPods the version keeps its pods for now (a rollback scales it
// to zero once the previous version runs again).
func (r *Reconciler) markStaleKeeping(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, v *version,
	reason, msg string, keepPods bool) error {
	handBack := usesHandover(v.sts)
	if err := r.patchVersion(ctx, v, func(sts *appsv1.StatefulSet) {
		sts.Annotations[extendedv1alpha1.StaleAnnotation] = "true"
		sts.Annotations[extendedv1alpha1.StaleReasonAnnotation] = reason + ": " + msg
		if !handBack && !keepPods {
			// With volumes, the ordinals go back one at a time instead (handBack).
			sts.Annotations[replicasAnnotation] = "0"
			sts.Spec.Replicas = ptr.To[int32](0)
		}
	}); err != nil {
		return err
	}
	staleVersions.WithLabelValues(ests.Namespace, ests.Name, reason).Inc()
	ctrl.LoggerFrom(ctx).Info("marked a version stale", "version", v.number, "reason", reason)
	r.event(ests, v.sts, corev1.EventTypeWarning, extendedv1alpha1.EventVersionStale, "MarkStale", "%s", msg)
	return nil
}

// versionPods lists the pods of a version, read live (pods are not cached).
func (r *Reconciler) versionPods(ctx context.Context, v *version) ([]corev1.Pod, error) {
	var pods corev1.PodList
	sel := client.MatchingLabels{extendedv1alpha1.NameLabel: v.sts.Labels[extendedv1alpha1.NameLabel]}
	if !v.inPlace() {
		// In place, the pods of the previous and the updated template are the same StatefulSet's.
		sel[extendedv1alpha1.VersionLabel] = strconv.Itoa(v.number)
	}
	if zone := zoneOf(v); zone != "" {
		sel[extendedv1alpha1.ZoneLabel] = zone // version numbers repeat across zones
	}
	if err := r.APIReader.List(ctx, &pods, client.InNamespace(v.sts.Namespace), sel); err != nil {
		return nil, fmt.Errorf("listing the pods of version %d: %w", v.number, err)
	}
	return pods.Items, nil
}

// restartNotReadyPods deletes the version's pods that are not Ready; its StatefulSet recreates them.
func (r *Reconciler) restartNotReadyPods(ctx context.Context, v *version) error {
	pods, err := r.versionPods(ctx, v)
	if err != nil {
		return err
	}
	for i := range pods {
		p := &pods[i]
		if !p.DeletionTimestamp.IsZero() || opsutil.PodReady(p) {
			continue
		}
		if err := r.Client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("restarting canary %s: %w", p.Name, err)
		}
	}
	return nil
}

// setPhase moves a version to the next phase, with its replica count, and restarts the watch.
func (r *Reconciler) setPhase(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, v *version, phase string,
	replicas int32, now time.Time, format string, args ...any) error {
	if err := r.patchVersion(ctx, v, func(sts *appsv1.StatefulSet) {
		sts.Annotations[extendedv1alpha1.PhaseAnnotation] = phase
		sts.Annotations[extendedv1alpha1.PhaseStartAnnotation] = now.UTC().Format(time.RFC3339Nano)
		sts.Annotations[extendedv1alpha1.ProgressAnnotation] = strconv.Itoa(int(v.ready()))
		sts.Annotations[replicasAnnotation] = strconv.Itoa(int(replicas))
		sts.Spec.Replicas = ptr.To(replicas)
	}); err != nil {
		return err
	}
	reason := extendedv1alpha1.ReasonRollout
	if phase == extendedv1alpha1.PhaseDone {
		reason = extendedv1alpha1.EventRolledOut
	}
	ctrl.LoggerFrom(ctx).Info("version phase", "version", v.number, "phase", phase)
	r.event(ests, v.sts, corev1.EventTypeNormal, reason, "Upgrade", format, args...)
	return nil
}

// replicasAnnotation is the replica count the operator last wrote on a StatefulSet: a different
// spec.replicas means someone else edited it, and it is put back.
const replicasAnnotation = "fissile.cloudfoundry.org/replicas"

// ensureReplicas sets the version's replicas to want. A count that differs from the one the operator
// wrote last was edited by someone else: it is put back, with an Event.
func (r *Reconciler) ensureReplicas(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, v *version, want int32) error {
	have := v.specReplicas()
	if have == want && v.annotation(replicasAnnotation) == strconv.Itoa(int(want)) {
		return nil
	}
	if wrote := v.annotation(replicasAnnotation); wrote != "" && wrote != strconv.Itoa(int(have)) {
		replicasRestored.WithLabelValues(ests.Namespace, ests.Name).Inc()
		r.event(ests, v.sts, corev1.EventTypeWarning, extendedv1alpha1.EventReplicasRestored, "Scale",
			"StatefulSet %s was scaled to %d outside the ExtendedStatefulSet; put back to %d (scale the ExtendedStatefulSet instead)", v.sts.Name, have, want)
	}
	return r.patchVersion(ctx, v, func(sts *appsv1.StatefulSet) {
		sts.Spec.Replicas = ptr.To(want)
		sts.Annotations[replicasAnnotation] = strconv.Itoa(int(want))
	})
}

// rollConfig puts the wanted config hash into the pod template of every version that is not stale, once
// the debounce allows: the StatefulSet controller then rolls the pods one at a time.
func (r *Reconciler) rollConfig(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, zs *zoneScope, z zone, wantCfg string, now time.Time) error {
	key := debounceKey(ests, z)
	if wantCfg == "" || len(zs.missing) > 0 {
		// Off, or a referenced object is missing: rolling now would start pods that cannot start.
		r.debounce.forget(key)
		return nil
	}
	var stale []*version
	for _, v := range zs.versions {
		if !v.stale() && v.configHash() != wantCfg && v.sts.DeletionTimestamp.IsZero() {
			stale = append(stale, v)
		}
	}
	if len(stale) == 0 {
		r.debounce.forget(key)
		return nil
	}
	wait, first := r.debounce.wait(key, wantCfg, now, quietPeriod(ests))
	if wait > 0 {
		zs.configPending = true
		zs.requeueAfter = minPositive(zs.requeueAfter, wait)
		return nil
	}
	for _, v := range stale {
		if err := r.patchVersion(ctx, v, func(sts *appsv1.StatefulSet) {
			if sts.Spec.Template.Annotations == nil {
				sts.Spec.Template.Annotations = map[string]string{}
			}
			sts.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation] = wantCfg
		}); err != nil {
			return err
		}
		configRestarts.WithLabelValues(ests.Namespace, ests.Name).Inc()
		ctrl.LoggerFrom(ctx).Info("referenced configuration changed: rolling the pods", "statefulSet", v.sts.Name)
		r.event(ests, v.sts, corev1.EventTypeNormal, extendedv1alpha1.EventConfigRestart, "Restart",
			"Referenced ConfigMap/Secret data changed: rolling the pods of StatefulSet %s", v.sts.Name)
	}
	configDelay.Observe(now.Sub(first).Seconds())
	r.debounce.forget(key)
	zs.configRolled = true
	return nil
}

// deleteVersion deletes a version's StatefulSet (its pods go with it; its claims stay, as for any
// StatefulSet).
func (r *Reconciler) deleteVersion(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, v *version, why string) error {
	if !v.sts.DeletionTimestamp.IsZero() {
		return nil
	}
	if err := r.Client.Delete(ctx, v.sts, client.Preconditions{UID: &v.sts.UID},
		client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting StatefulSet %s: %w", v.sts.Name, err)
	}
	v.sts.DeletionTimestamp = ptr.To(metav1.Now()) // for the rest of this reconcile: gone
	versionsDeleted.WithLabelValues(ests.Namespace, ests.Name).Inc()
	ctrl.LoggerFrom(ctx).Info("deleted a version", "statefulSet", v.sts.Name, "why", why)
	r.event(ests, v.sts, corev1.EventTypeNormal, extendedv1alpha1.EventVersionDeleted, "Delete",
		"Deleted StatefulSet %s of version %d: %s", v.sts.Name, v.number, why)
	return nil
}

// patchVersion applies mutate to the version's StatefulSet and writes it with a resourceVersion
// precondition: a decision taken on an outdated read fails with a conflict and is taken again.
func (r *Reconciler) patchVersion(ctx context.Context, v *version, mutate func(*appsv1.StatefulSet)) error {
	orig := v.sts.DeepCopy()
	sts := v.sts.DeepCopy()
	if sts.Annotations == nil {
		sts.Annotations = map[string]string{}
	}
	mutate(sts)
	if err := r.Client.Patch(ctx, sts, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("updating StatefulSet %s: %w", sts.Name, err)
	}
	v.sts = sts
	return nil
}

// watchTime is the watch of a phase: canaryWatchTime for canaries, updateWatchTime for the rest.
func watchTime(ests *extendedv1alpha1.ExtendedStatefulSet, phase string) time.Duration {
	d := ests.Spec.UpdateStrategy.UpdateWatchTime
	if phase == extendedv1alpha1.PhaseCanary {
		d = ests.Spec.UpdateStrategy.CanaryWatchTime
	}
	if d == nil || d.Duration <= 0 {
		return defaultWatchTime
	}
	return d.Duration
}

func (v *version) creationTime() time.Time { return v.sts.CreationTimestamp.Time }

func minPositive(a, b time.Duration) time.Duration {
	if a <= 0 {
		return b
	}
	return min(a, b)
}
