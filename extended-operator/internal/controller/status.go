package controller

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// outcome is what one reconcile found and did, from which the status is computed.
type outcome struct {
	versions        []*version
	newest, current *version
	// missing are the non-optional referenced ConfigMaps and Secrets that do not exist ("Kind/name").
	missing []string
	// waiting says why a new template does not start a version yet; waitReason is the condition reason
	// (default PodsNotReady).
	waiting, waitReason string
	// configPending: a configuration change waits for its debounce; configRolled: it was applied now.
	configPending, configRolled bool
	errMessage                  string
	requeueAfter                time.Duration
	// zones are the outcomes per zone (with spec.az.zones); the fields above then summarise them, newest
	// and current being those of the zone in focus (the one upgrading, else the first with trouble).
	zones []zoneOutcome
	// prefix names the zone in focus in condition messages ("" without zones).
	prefix string
	// jobs are the upgrade Jobs (shared by the zones' outcomes); postJob names the post Job that runs for
	// the newest version, once every zone runs it.
	jobs    jobs
	postJob string
	// previous is the version kept for a rollback while the post Job of current runs (nil otherwise).
	previous *version
	// readyNodes counts the Ready nodes of each zone (with zones).
	readyNodes map[string]int32
}

// zoneOutcome is one zone's outcome.
type zoneOutcome struct {
	zone zone
	o    *outcome
}

// merge summarises the zones' outcomes. Without zones the single outcome is the summary, unchanged.
func merge(zones []zone, zos []*outcome) *outcome {
	if len(zones) == 1 && !zones[0].zoned() {
		return zos[0]
	}
	o := &outcome{missing: zos[0].missing, jobs: zos[0].jobs}
	focus, zoneWait := -1, ""
	for i, zo := range zos {
		o.zones = append(o.zones, zoneOutcome{zone: zones[i], o: zo})
		if o.postJob == "" {
			o.postJob = zo.postJob
		}
		o.versions = append(o.versions, zo.versions...)
		o.configPending = o.configPending || zo.configPending
		o.configRolled = o.configRolled || zo.configRolled
		if zo.requeueAfter > 0 {
			o.requeueAfter = minPositive(o.requeueAfter, zo.requeueAfter)
		}
		switch {
		case zo.waitReason == extendedv1alpha1.ReasonZoneUpgrade:
			if zoneWait == "" {
				zoneWait = zo.waiting
			}
		case zo.waiting != "" && o.waiting == "":
			o.waiting, o.waitReason = fmt.Sprintf("zone %q: %s", zones[i].name, zo.waiting), zo.waitReason
		}
	}
	for _, trouble := range []func(*outcome) bool{
		upgrading,
		func(zo *outcome) bool {
			return zo.newest != nil && zo.newest.stale() && zo.newest.sts.DeletionTimestamp.IsZero()
		},
		func(zo *outcome) bool { return zo.current == nil || !zo.current.rolledOut() },
	} {
		if focus < 0 {
			focus = slices.IndexFunc(zos, trouble)
		}
	}
	if focus < 0 {
		focus = 0
	}
	if o.waiting == "" && zoneWait != "" && !upgrading(zos[focus]) {
		o.waiting, o.waitReason = zoneWait, extendedv1alpha1.ReasonZoneUpgrade
	}
	o.newest, o.current = zos[focus].newest, zos[focus].current
	o.prefix = fmt.Sprintf("zone %q: ", zones[focus].name)
	return o
}

// outcomes are the per-zone outcomes, or the outcome itself without zones.
func (o *outcome) outcomes() []*outcome {
	if len(o.zones) == 0 {
		return []*outcome{o}
	}
	out := make([]*outcome, len(o.zones))
	for i, z := range o.zones {
		out[i] = z.o
	}
	return out
}

// allRolledOut reports whether every zone serves a version with all its pods Ready.
func (o *outcome) allRolledOut() bool {
	for _, zo := range o.outcomes() {
		if zo.current == nil || !zo.current.rolledOut() {
			return false
		}
	}
	return true
}

// cleaningUp reports whether a zone still has a lower version next to a newer one that is not stale.
func (o *outcome) cleaningUp() bool {
	for _, zo := range o.outcomes() {
		if len(zo.live()) > 1 && (zo.newest == nil || !zo.newest.stale()) {
			return true
		}
	}
	return false
}

// configRolling reports whether a zone's serving version is rolling its pods for a configuration change.
func (o *outcome) configRolling() bool {
	for _, zo := range o.outcomes() {
		if c := zo.current; c != nil && !c.rolledOut() && c.sts.Status.UpdatedReplicas < c.specReplicas() {
			return true
		}
	}
	return false
}

// live are the versions not being deleted.
func (o *outcome) live() []*version {
	var out []*version
	for _, v := range o.versions {
		if v.sts.DeletionTimestamp.IsZero() {
			out = append(out, v)
		}
	}
	return out
}

// applyStatus computes the status from the outcome. Conditions change their lastTransitionTime only when
// their status changes.
func (r *Reconciler) applyStatus(ests *extendedv1alpha1.ExtendedStatefulSet, o *outcome) {
	st := &ests.Status
	st.ObservedGeneration = ests.Generation
	if sel := ests.Spec.Template.Spec.Selector; sel != nil {
		if s, err := metav1.LabelSelectorAsSelector(sel); err == nil {
			st.Selector = s.String()
		}
	}
	live := o.live()
	st.Versions = map[string]bool{}
	st.Replicas, st.ReadyReplicas, st.UpdatedReplicas, st.CanaryRetries = 0, 0, 0, 0
	for _, v := range live {
		st.Versions[strconv.Itoa(v.number)] = v.running()
		st.Replicas += v.sts.Status.Replicas
		st.ReadyReplicas += v.sts.Status.ReadyReplicas
	}
	if len(st.Versions) == 0 {
		st.Versions = nil
	}
	if o.current != nil {
		st.CurrentVersion = int32(o.current.number)
	}
	if o.newest != nil {
		st.UpdateVersion = int32(o.newest.number)
		st.UpdatedReplicas = o.newest.sts.Status.Replicas
		st.CanaryRetries = o.newest.intAnnotation(extendedv1alpha1.CanaryRetriesAnnotation)
		if h := o.newest.configHash(); h != "" {
			st.ConfigHash = h
		}
	}

	if len(o.zones) > 0 {
		applyZoneStatus(st, o)
	} else {
		st.ZoneCount, st.Zones = 0, nil
	}
	st.UpgradeJobs = jobStatus(o.jobs)

	set := func(t string, status bool, reason, msg string) {
		s := metav1.ConditionFalse
		if status {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: ests.Generation})
	}

	r.applyZonesAvailable(ests, o, set)
	applyJobConditions(ests, o, set)

	// MissingReference.
	if len(o.missing) > 0 {
		set(extendedv1alpha1.ConditionMissingReference, true, extendedv1alpha1.ReasonReferenceNotFound,
			"referenced but missing: "+strings.Join(o.missing, ", ")+"; pods are not rolled until it exists")
	} else {
		set(extendedv1alpha1.ConditionMissingReference, false, extendedv1alpha1.ReasonReconciled, "every referenced ConfigMap and Secret exists")
	}

	// Stale.
	stale := o.newest != nil && o.newest.stale() && o.newest.sts.DeletionTimestamp.IsZero()
	if stale {
		reason, msg, _ := strings.Cut(o.newest.annotation(extendedv1alpha1.StaleReasonAnnotation), ": ")
		if reason == "" {
			reason = extendedv1alpha1.ReasonCanaryFailed
		}
		set(extendedv1alpha1.ConditionStale, true, reason, o.prefix+msg)
	} else {
		set(extendedv1alpha1.ConditionStale, false, extendedv1alpha1.ReasonReconciled, "no version is stale")
	}

	// Progressing and Ready.
	progressReason, progressMsg := "", ""
	switch {
	case o.errMessage != "":
		progressReason, progressMsg = "ReconcileError", o.errMessage
	case o.waiting != "":
		progressReason, progressMsg = extendedv1alpha1.ReasonPodsNotReady, o.waiting
		if o.waitReason != "" {
			progressReason = o.waitReason
		}
		if len(o.missing) > 0 {
			progressReason = extendedv1alpha1.ReasonReferenceNotFound
		}
	case o.newest != nil && !stale && o.newest.phase() == extendedv1alpha1.PhasePreJob:
		progressReason, progressMsg = extendedv1alpha1.ReasonPreUpgradeJobRunning,
			fmt.Sprintf("%sversion %d waits for pre upgrade Job %s", o.prefix, o.newest.number, o.newest.annotation(extendedv1alpha1.PreJobAnnotation))
	case o.newest != nil && !stale && o.newest.phase() == extendedv1alpha1.PhaseCanary:
		progressReason, progressMsg = extendedv1alpha1.ReasonCanaryRollout,
			fmt.Sprintf("%sversion %d: %d of %d canaries Ready", o.prefix, o.newest.number, o.newest.ready(), o.newest.specReplicas())
	case o.newest != nil && !stale && o.newest.phase() == extendedv1alpha1.PhaseRollout:
		progressReason, progressMsg = extendedv1alpha1.ReasonRollout,
			fmt.Sprintf("%sversion %d: %d of %d pods Ready", o.prefix, o.newest.number, o.newest.ready(), o.newest.specReplicas())
	case o.postJob != "" && !stale:
		progressReason, progressMsg = extendedv1alpha1.ReasonPostUpgradeJobRunning,
			fmt.Sprintf("version %d runs; post upgrade Job %s runs", o.current.number, o.postJob)
	case o.postJobPending() && !stale:
		progressReason, progressMsg = extendedv1alpha1.ReasonPostUpgradeJobRunning,
			"the post upgrade Job runs once every zone runs the new version"
	case o.cleaningUp() && !stale:
		progressReason, progressMsg = extendedv1alpha1.ReasonCleanup, "lower versions are being deleted"
	case o.configPending || o.configRolled || o.configRolling():
		progressReason, progressMsg = extendedv1alpha1.ReasonConfigChanged, "referenced configuration changed: pods are rolling"
	}
	if progressReason != "" && progressReason != "ReconcileError" {
		set(extendedv1alpha1.ConditionProgressing, true, progressReason, progressMsg)
	} else if progressReason == "" {
		set(extendedv1alpha1.ConditionProgressing, false, extendedv1alpha1.ReasonReconciled, "no upgrade or restart under way")
	}

	switch {
	case o.errMessage != "":
		set(extendedv1alpha1.ConditionReady, false, "ReconcileError", o.errMessage)
	case stale:
		msg := fmt.Sprintf("%sversion %d is stale", o.prefix, o.newest.number)
		if o.current != nil {
			msg += fmt.Sprintf("; version %d serves", o.current.number)
		}
		reason, _, _ := strings.Cut(o.newest.annotation(extendedv1alpha1.StaleReasonAnnotation), ": ")
		if reason == "" {
			reason = extendedv1alpha1.ReasonCanaryFailed
		}
		set(extendedv1alpha1.ConditionReady, false, reason, msg+"; change the template to try again")
	case progressReason != "":
		set(extendedv1alpha1.ConditionReady, false, progressReason, progressMsg)
	case len(o.missing) > 0:
		set(extendedv1alpha1.ConditionReady, false, extendedv1alpha1.ReasonReferenceNotFound, "a referenced ConfigMap or Secret is missing")
	case !o.allRolledOut():
		set(extendedv1alpha1.ConditionReady, false, extendedv1alpha1.ReasonPodsNotReady, o.prefix+"not every pod is Ready")
	case len(o.zones) > 0:
		set(extendedv1alpha1.ConditionReady, true, extendedv1alpha1.ReasonReconciled,
			fmt.Sprintf("%d zones run with all %d pods Ready", len(o.zones), st.ReadyReplicas))
	default:
		set(extendedv1alpha1.ConditionReady, true, extendedv1alpha1.ReasonReconciled,
			fmt.Sprintf("version %d runs with all %d pods Ready", o.current.number, o.current.specReplicas()))
	}
}

// postJobPending reports whether a zone's newest version serves in phase PostJob (its post Job waits
// for the other zones).
func (o *outcome) postJobPending() bool {
	for _, zo := range o.outcomes() {
		if n := zo.newest; n != nil && n == zo.current && n.phase() == extendedv1alpha1.PhasePostJob {
			return true
		}
	}
	return false
}

// applyJobConditions sets UpgradeBlocked (the newest version's pre Job failed) and PostUpgradeFailed
// (the post Job of the highest version failed), both only with spec.upgradeJobs.
func applyJobConditions(ests *extendedv1alpha1.ExtendedStatefulSet, o *outcome, set func(string, bool, string, string)) {
	if ests.Spec.UpgradeJobs == nil && len(o.jobs) == 0 {
		meta.RemoveStatusCondition(&ests.Status.Conditions, extendedv1alpha1.ConditionUpgradeBlocked)
		meta.RemoveStatusCondition(&ests.Status.Conditions, extendedv1alpha1.ConditionPostUpgradeFailed)
		return
	}
	if n := o.newest; n != nil && n.stale() && n.sts.DeletionTimestamp.IsZero() && n.phase() == extendedv1alpha1.PhasePreJob {
		_, msg, _ := strings.Cut(n.annotation(extendedv1alpha1.StaleReasonAnnotation), ": ")
		set(extendedv1alpha1.ConditionUpgradeBlocked, true, extendedv1alpha1.ReasonJobFailed, o.prefix+msg)
	} else {
		set(extendedv1alpha1.ConditionUpgradeBlocked, false, extendedv1alpha1.ReasonReconciled, "no pre upgrade Job failed")
	}
	j := latestPostJob(o.jobs)
	if jobState(j) != extendedv1alpha1.JobFailed {
		set(extendedv1alpha1.ConditionPostUpgradeFailed, false, extendedv1alpha1.ReasonReconciled, "no post upgrade Job failed")
		return
	}
	n := jobVersion(j)
	rolled := slices.ContainsFunc(o.versions, func(v *version) bool { return v.number == n && v.stale() && rolledBack(v) })
	if rolled {
		set(extendedv1alpha1.ConditionPostUpgradeFailed, true, extendedv1alpha1.ReasonRolledBack,
			fmt.Sprintf("post upgrade Job %s of version %d failed; rolled back to the previous version", j.Name, n))
		return
	}
	set(extendedv1alpha1.ConditionPostUpgradeFailed, true, extendedv1alpha1.ReasonJobFailed,
		fmt.Sprintf("post upgrade Job %s of version %d failed; version %d keeps running (spec.upgradeJobs.rollbackOnPostFailure is off)", j.Name, n, n))
}

// applyZoneStatus writes the per-zone status and the version summary across zones: currentVersion is
// the lowest version serving in any zone (the one every zone runs at least), updateVersion the highest.
func applyZoneStatus(st *extendedv1alpha1.ExtendedStatefulSetStatus, o *outcome) {
	st.ZoneCount = int32(len(o.zones))
	readyNodes := o.readyNodes
	if readyNodes == nil {
		// Not counted (the reconcile failed before): keep the last counts.
		readyNodes = map[string]int32{}
		for _, zs := range st.Zones {
			readyNodes[zs.Name] = zs.ReadyNodes
		}
	}
	st.Zones = make([]extendedv1alpha1.ZoneStatus, 0, len(o.zones))
	st.CurrentVersion, st.UpdateVersion, st.UpdatedReplicas = 0, 0, 0
	for i, zo := range o.zones {
		zs := extendedv1alpha1.ZoneStatus{Name: zo.zone.name, Index: int32(zo.zone.index), Versions: map[string]bool{}}
		for _, v := range zo.o.live() {
			zs.Versions[strconv.Itoa(v.number)] = v.running()
			zs.Replicas += v.sts.Status.Replicas
			zs.ReadyReplicas += v.sts.Status.ReadyReplicas
		}
		if len(zs.Versions) == 0 {
			zs.Versions = nil
		}
		if c := zo.o.current; c != nil {
			zs.CurrentVersion = int32(c.number)
		}
		if n := zo.o.newest; n != nil {
			zs.UpdateVersion = int32(n.number)
		}
		zs.ReadyNodes = readyNodes[zo.zone.name]
		if i == 0 || zs.CurrentVersion < st.CurrentVersion {
			st.CurrentVersion = zs.CurrentVersion
		}
		st.UpdateVersion = max(st.UpdateVersion, zs.UpdateVersion)
		st.Zones = append(st.Zones, zs)
	}
	for _, zo := range o.zones {
		if n := zo.o.newest; n != nil && int32(n.number) == st.UpdateVersion {
			st.UpdatedReplicas += n.sts.Status.Replicas
		}
	}
}

// event records an Event about the ExtendedStatefulSet, related to one of its StatefulSets.
func (r *Reconciler) event(ests *extendedv1alpha1.ExtendedStatefulSet, related runtime.Object, eventType, reason, action, format string, args ...any) {
	r.Recorder.Eventf(ests, related, eventType, reason, action, format, args...)
}

// waitingEvent records an Event when the ExtendedStatefulSet enters a waiting state (Ready turns False
// or changes its reason: pods not Ready yet, a canary not Ready, an upgrade Job running, a missing
// ConfigMap or Secret, a stale version, ...), once per entry, so kubectl describe says why it waits.
// A Warning when only a change can unblock it (an error, a missing reference, a stale version).
func (r *Reconciler) waitingEvent(ests, orig *extendedv1alpha1.ExtendedStatefulSet) {
	eventType := corev1.EventTypeNormal
	if c := meta.FindStatusCondition(ests.Status.Conditions, extendedv1alpha1.ConditionReady); c != nil &&
		(c.Reason == "ReconcileError" || c.Reason == extendedv1alpha1.ReasonReferenceNotFound ||
			meta.IsStatusConditionTrue(ests.Status.Conditions, extendedv1alpha1.ConditionStale)) {
		eventType = corev1.EventTypeWarning
	}
	opsutil.EventOnTransition(r.Recorder, ests, nil, orig.Status.Conditions, ests.Status.Conditions, opsutil.Transition{
		Type: extendedv1alpha1.ConditionReady, Status: metav1.ConditionFalse, EventType: eventType, Action: "Wait",
	})
}
