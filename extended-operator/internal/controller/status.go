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

// applyStatus computes the status from the scope. Conditions change their lastTransitionTime only when
// their status changes.
func (r *Reconciler) applyStatus(s *scope) {
	ests := s.ests
	set := func(t string, status bool, reason, msg string) {
		c := metav1.ConditionFalse
		if status {
			c = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&ests.Status.Conditions, metav1.Condition{Type: t, Status: c, Reason: reason, Message: msg, ObservedGeneration: ests.Generation})
	}
	if s.perZone == nil {
		// The reconcile failed before it read the versions (newScope): what it did not observe keeps
		// what the last observation said, rather than no versions, no pods, no missing reference; Ready
		// says why it is not fresh.
		ests.Status.ObservedGeneration = ests.Generation
		set(extendedv1alpha1.ConditionReady, false, s.errReason(), s.errMessage)
		applyKstatus(ests, false, set)
		return
	}
	applyVersionStatus(s)
	r.applyZonesAvailable(ests, s, set)
	applyJobConditions(ests, s, set)
	if len(s.missing) > 0 {
		set(extendedv1alpha1.ConditionMissingReference, true, extendedv1alpha1.ReasonReferenceNotFound, missingMessage(s.missing))
	} else {
		set(extendedv1alpha1.ConditionMissingReference, false, extendedv1alpha1.ReasonReconciled, "every referenced ConfigMap and Secret exists")
	}
	applyRestartPending(ests, s, set)
	applyClaimsResized(ests, s, set)
	stale := s.newest != nil && s.newest.stale() && s.newest.sts.DeletionTimestamp.IsZero()
	if stale {
		reason, msg, _ := strings.Cut(s.newest.annotation(extendedv1alpha1.StaleReasonAnnotation), ": ")
		if reason == "" {
			reason = extendedv1alpha1.ReasonCanaryFailed
		}
		set(extendedv1alpha1.ConditionStale, true, reason, s.prefix+msg)
	} else {
		set(extendedv1alpha1.ConditionStale, false, extendedv1alpha1.ReasonReconciled, "no version is stale")
	}
	progressReason, progressMsg := s.progress(stale)
	if progressReason != "" && progressReason != s.errReason() {
		set(extendedv1alpha1.ConditionProgressing, true, progressReason, progressMsg)
	} else if progressReason == "" {
		set(extendedv1alpha1.ConditionProgressing, false, extendedv1alpha1.ReasonReconciled, "no upgrade or restart under way")
	}
	ready, reason, msg := s.readiness(stale, progressReason, progressMsg)
	set(extendedv1alpha1.ConditionReady, ready, reason, msg)
	applyKstatus(ests, stale, set)
}

// applyKstatus sets the kstatus conditions from the Ready condition just decided, so that the three
// cannot disagree: Stalled while only a change by the user lets the operator go on (the newest version is
// stale, a referenced ConfigMap or Secret is missing and nothing else is under way, the API server
// refuses a StatefulSet or Job built from the spec, an in-place StatefulSet cannot take the template or a
// PhasedRollout manages it while restartVia is not PhasedRollout),
// else Reconciling while Ready is False (the operator is working towards it or retrying an API error).
// Both are always present, with the Ready reason and message when True. Every condition, also one this
// reconcile left as it was (Progressing after an error, ZonesAvailable without a node count), was
// confirmed by a reconcile that observed this generation, so each carries it: after a spec change none
// claims an older one, as kstatus expects.
func applyKstatus(ests *extendedv1alpha1.ExtendedStatefulSet, stale bool, set func(string, bool, string, string)) {
	ready := meta.FindStatusCondition(ests.Status.Conditions, extendedv1alpha1.ConditionReady)
	waiting := ready.Status == metav1.ConditionFalse
	stalled := waiting && (stale || ready.Reason == extendedv1alpha1.ReasonReferenceNotFound ||
		ready.Reason == extendedv1alpha1.ReasonInvalidTemplate || ready.Reason == extendedv1alpha1.ReasonInvalidRestartWindow ||
		ready.Reason == extendedv1alpha1.ReasonImmutableInPlace || ready.Reason == extendedv1alpha1.ReasonPartitionConflict)
	if stalled {
		set(extendedv1alpha1.ConditionStalled, true, ready.Reason, ready.Message)
	} else {
		set(extendedv1alpha1.ConditionStalled, false, extendedv1alpha1.ReasonReconciled, "nothing waits for a change by the user")
	}
	if waiting && !stalled {
		set(extendedv1alpha1.ConditionReconciling, true, ready.Reason, ready.Message)
	} else {
		set(extendedv1alpha1.ConditionReconciling, false, extendedv1alpha1.ReasonReconciled, "no work under way")
	}
	for i := range ests.Status.Conditions {
		ests.Status.Conditions[i].ObservedGeneration = ests.Generation
	}
}

// applyVersionStatus writes the observed generation, the selector, the versions with their replica
// counts, the config hash, the zones and the upgrade Jobs.
func applyVersionStatus(s *scope) {
	st := &s.ests.Status
	st.ObservedGeneration = s.ests.Generation
	if sel := s.ests.Spec.Template.Spec.Selector; sel != nil {
		if ls, err := metav1.LabelSelectorAsSelector(sel); err == nil {
			st.Selector = ls.String()
		}
	}
	st.Versions, st.Replicas, st.ReadyReplicas = s.versionCounts()
	st.UpdatedReplicas, st.CanaryRetries = 0, 0
	if s.current != nil {
		st.CurrentVersion = int32(s.current.servedNumber())
	}
	if n := s.newest; n != nil {
		st.UpdateVersion = int32(n.number)
		st.UpdatedReplicas = n.updatedReplicas()
		st.CanaryRetries = n.intAnnotation(extendedv1alpha1.CanaryRetriesAnnotation)
		if h := n.configHash(); h != "" {
			st.ConfigHash = h
		}
	}
	if len(s.zones) > 0 {
		applyZoneStatus(st, s)
	} else {
		st.ZoneCount, st.Zones = 0, nil
	}
	st.UpgradeJobs = jobStatus(s.jobs)
}

// versionCounts are the live versions (number: running, nil when there is none) and their pods and
// Ready pods, as the status reports them for the whole object and for each zone.
func (zs *zoneScope) versionCounts() (versions map[string]bool, replicas, ready int32) {
	for _, v := range zs.live() {
		if versions == nil {
			versions = map[string]bool{}
		}
		versions[strconv.Itoa(v.number)] = v.running()
		replicas += v.sts.Status.Replicas
		ready += v.sts.Status.ReadyReplicas
	}
	return versions, replicas, ready
}

// progress is the reason and message of Progressing=True, the first that applies: the error that ended
// the reconcile (errReason, which leaves Progressing as it was), a wait, a phase of the newest
// version, the post Job, the cleanup of lower versions, a configuration roll. "" when nothing is under
// way.
func (s *scope) progress(stale bool) (reason, msg string) {
	n := s.newest
	switch {
	case s.errMessage != "":
		return s.errReason(), s.errMessage
	case s.waiting != "":
		reason = extendedv1alpha1.ReasonPodsNotReady
		if s.waitReason != "" {
			reason = s.waitReason
		}
		if len(s.missing) > 0 {
			reason = extendedv1alpha1.ReasonReferenceNotFound
		}
		return reason, s.waiting
	case n != nil && !stale && n.inPlace() && inPlaceRolling(n) && viaRollout(s.ests):
		msg = fmt.Sprintf("%sversion %d in place, rolled by PhasedRollout %s: partition %d, ", s.prefix, n.number, managingRollout(n.sts), partition(n.sts))
		if n.sts.Status.ObservedGeneration < n.sts.Generation {
			return extendedv1alpha1.ReasonRollout, msg + "the StatefulSet controller has not observed the update yet"
		}
		return extendedv1alpha1.ReasonRollout, msg + fmt.Sprintf("%d of %d pods updated, %d Ready",
			n.sts.Status.UpdatedReplicas, n.specReplicas(), n.sts.Status.ReadyReplicas)
	case n != nil && !stale && n.inPlace() && inPlaceRolling(n):
		reason = extendedv1alpha1.ReasonRollout
		if n.phase() == extendedv1alpha1.PhaseCanary {
			reason = extendedv1alpha1.ReasonCanaryRollout
		}
		return reason, fmt.Sprintf("%sversion %d in place: ordinals %d and up updating (partition %d), %d of %d pods updated, %d Ready",
			s.prefix, n.number, partition(n.sts), partition(n.sts), n.sts.Status.UpdatedReplicas, n.specReplicas(), n.sts.Status.ReadyReplicas)
	case n != nil && !stale && n.phase() == extendedv1alpha1.PhasePreJob:
		return extendedv1alpha1.ReasonPreUpgradeJobRunning,
			fmt.Sprintf("%sversion %d waits for pre upgrade Job %s", s.prefix, n.number, n.annotation(extendedv1alpha1.PreJobAnnotation))
	case n != nil && !stale && n.phase() == extendedv1alpha1.PhaseCanary:
		return extendedv1alpha1.ReasonCanaryRollout,
			fmt.Sprintf("%sversion %d: %d of %d canaries Ready", s.prefix, n.number, n.ready(), n.specReplicas())
	case n != nil && !stale && n.phase() == extendedv1alpha1.PhaseRollout:
		return extendedv1alpha1.ReasonRollout,
			fmt.Sprintf("%sversion %d: %d of %d pods Ready", s.prefix, n.number, n.ready(), n.specReplicas())
	case s.postJob != "" && !stale:
		return extendedv1alpha1.ReasonPostUpgradeJobRunning,
			fmt.Sprintf("version %d runs; post upgrade Job %s runs", s.current.number, s.postJob)
	case s.postJobPending() && !stale:
		return extendedv1alpha1.ReasonPostUpgradeJobRunning, "the post upgrade Job runs once every zone runs the new version"
	case s.cleaningUp() && !stale:
		return extendedv1alpha1.ReasonCleanup, "lower versions are being deleted"
	case s.configPending || s.configRolled || s.configRolling():
		return extendedv1alpha1.ReasonConfigChanged, "referenced configuration changed: pods are rolling"
	}
	return "", ""
}

// missingMessage names the missing ConfigMaps and Secrets (MissingReference, and Ready and Stalled when
// nothing else is under way).
func missingMessage(missing []string) string {
	return "referenced but missing: " + strings.Join(missing, ", ") + "; pods are not rolled until it exists"
}

// errReason is the condition reason of the error that ended the reconcile: InvalidTemplate when the API
// server refused a StatefulSet or Job built from the spec (only a spec change helps), else ReconcileError
// (retried).
func (s *scope) errReason() string {
	if s.invalidSpec {
		return extendedv1alpha1.ReasonInvalidTemplate
	}
	return extendedv1alpha1.ReasonReconcileError
}

// readiness is the Ready condition: False for an error, a stale version, anything under way (the
// progress reason), a missing reference or pods not Ready; else True.
func (s *scope) readiness(stale bool, progressReason, progressMsg string) (ready bool, reason, msg string) {
	switch {
	case s.errMessage != "":
		return false, s.errReason(), s.errMessage
	case stale:
		// The stale-reason annotation says what failed (the canaries, a Job by name), so that Ready and
		// Stalled name it too.
		reason, why, _ := strings.Cut(s.newest.annotation(extendedv1alpha1.StaleReasonAnnotation), ": ")
		if reason == "" {
			reason = extendedv1alpha1.ReasonCanaryFailed
		}
		msg := fmt.Sprintf("%sversion %d is stale", s.prefix, s.newest.number)
		if why != "" {
			msg += " (" + why + ")"
		}
		switch {
		case s.newest.inPlace():
			// The message of the stale mark names the frozen partition and what runs below it.
		case s.current != nil:
			msg += fmt.Sprintf("; version %d serves", s.current.number)
		}
		return false, reason, msg + "; change the template to try again"
	case progressReason != "":
		return false, progressReason, progressMsg
	case len(s.missing) > 0:
		return false, extendedv1alpha1.ReasonReferenceNotFound, missingMessage(s.missing)
	case s.windowErr != "":
		// Configuration restarts cannot happen until the spec is fixed: Stalled, at once, not only when
		// a change comes.
		return false, extendedv1alpha1.ReasonInvalidRestartWindow, s.windowErr + "; configuration restarts wait until it is fixed"
	case !s.allRolledOut():
		return false, extendedv1alpha1.ReasonPodsNotReady, s.prefix + "not every pod is Ready"
	case len(s.zones) > 0:
		return true, extendedv1alpha1.ReasonReconciled,
			fmt.Sprintf("%d zones run with all %d pods Ready", len(s.zones), s.ests.Status.ReadyReplicas)
	default:
		return true, extendedv1alpha1.ReasonReconciled,
			fmt.Sprintf("version %d runs with all %d pods Ready", s.current.number, s.current.specReplicas())
	}
}

// applyRestartPending sets RestartPending (only with spec.updateStrategy.restartWindows): True while a
// configuration change waits for a window, naming when the next one opens (a time, not a countdown, so
// the condition is not rewritten while it waits), or that the windows cannot be read.
func applyRestartPending(ests *extendedv1alpha1.ExtendedStatefulSet, s *scope, set func(string, bool, string, string)) {
	switch {
	case len(ests.Spec.UpdateStrategy.RestartWindows) == 0:
		meta.RemoveStatusCondition(&ests.Status.Conditions, extendedv1alpha1.ConditionRestartPending)
	case s.restartPending && s.windowErr != "":
		set(extendedv1alpha1.ConditionRestartPending, true, extendedv1alpha1.ReasonInvalidRestartWindow,
			"referenced configuration changed; the pods restart once spec.updateStrategy.restartWindows is fixed: "+s.windowErr)
	case s.restartPending:
		set(extendedv1alpha1.ConditionRestartPending, true, extendedv1alpha1.ReasonOutsideRestartWindow,
			fmt.Sprintf("referenced configuration changed; the pods restart when the next restart window opens at %s (%s)",
				s.windowOpens.UTC().Format(time.RFC3339), s.nextWindow.spec))
	default:
		set(extendedv1alpha1.ConditionRestartPending, false, extendedv1alpha1.ReasonReconciled, "no configuration restart waits for a restart window")
	}
}

// applyJobConditions sets UpgradeBlocked (the newest version's pre Job failed) and PostUpgradeFailed
// (the post Job of the highest version failed), both only with spec.upgradeJobs.
func applyJobConditions(ests *extendedv1alpha1.ExtendedStatefulSet, s *scope, set func(string, bool, string, string)) {
	if ests.Spec.UpgradeJobs == nil && len(s.jobs) == 0 {
		meta.RemoveStatusCondition(&ests.Status.Conditions, extendedv1alpha1.ConditionUpgradeBlocked)
		meta.RemoveStatusCondition(&ests.Status.Conditions, extendedv1alpha1.ConditionPostUpgradeFailed)
		return
	}
	if n := s.newest; n != nil && n.stale() && n.sts.DeletionTimestamp.IsZero() && n.phase() == extendedv1alpha1.PhasePreJob {
		_, msg, _ := strings.Cut(n.annotation(extendedv1alpha1.StaleReasonAnnotation), ": ")
		set(extendedv1alpha1.ConditionUpgradeBlocked, true, extendedv1alpha1.ReasonJobFailed, s.prefix+msg)
	} else {
		set(extendedv1alpha1.ConditionUpgradeBlocked, false, extendedv1alpha1.ReasonReconciled, "no pre upgrade Job failed")
	}
	j := latestPostJob(s.jobs)
	if jobState(j) != extendedv1alpha1.JobFailed {
		set(extendedv1alpha1.ConditionPostUpgradeFailed, false, extendedv1alpha1.ReasonReconciled, "no post upgrade Job failed")
		return
	}
	n := jobVersion(j)
	rolled := slices.ContainsFunc(s.versions, func(v *version) bool { return v.number == n && v.stale() && rolledBack(v) })
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
func applyZoneStatus(st *extendedv1alpha1.ExtendedStatefulSetStatus, s *scope) {
	st.ZoneCount = int32(len(s.zones))
	readyNodes := s.readyNodes
	if readyNodes == nil {
		// Not counted (the reconcile failed before): keep the last counts.
		readyNodes = map[string]int32{}
		for _, zs := range st.Zones {
			readyNodes[zs.Name] = zs.ReadyNodes
		}
	}
	st.Zones = make([]extendedv1alpha1.ZoneStatus, 0, len(s.zones))
	st.CurrentVersion, st.UpdateVersion, st.UpdatedReplicas = 0, 0, 0
	for i, z := range s.zones {
		zs := extendedv1alpha1.ZoneStatus{Name: z.zone.name, Index: int32(z.zone.index)}
		zs.Versions, zs.Replicas, zs.ReadyReplicas = z.versionCounts()
		if c := z.current; c != nil {
			zs.CurrentVersion = int32(c.servedNumber())
		}
		if n := z.newest; n != nil {
			zs.UpdateVersion = int32(n.number)
		}
		zs.ReadyNodes = readyNodes[z.zone.name]
		if i == 0 || zs.CurrentVersion < st.CurrentVersion {
			st.CurrentVersion = zs.CurrentVersion
		}
		st.UpdateVersion = max(st.UpdateVersion, zs.UpdateVersion)
		st.Zones = append(st.Zones, zs)
	}
	for _, z := range s.zones {
		if n := z.newest; n != nil && int32(n.number) == st.UpdateVersion {
			st.UpdatedReplicas += n.updatedReplicas()
		}
	}
}

// event records an Event about the ExtendedStatefulSet, related to one of its StatefulSets.
func (r *Reconciler) event(ests *extendedv1alpha1.ExtendedStatefulSet, related runtime.Object, eventType, reason, action, format string, args ...any) {
	r.Recorder.Eventf(ests, related, eventType, reason, action, format, args...)
}

// waitingEvents records, once the status is written, an Event when the ExtendedStatefulSet enters a
// waiting state, once per entry (opsutil.EventOnTransition), so kubectl describe says why it waits:
//   - Stalled turning True, or naming another problem (a Warning: only a change by the user unblocks it:
//     a missing ConfigMap or Secret, a stale version, a StatefulSet or Job the API server refuses);
//   - else Ready turning False or changing its reason (pods not Ready yet, a canary not Ready, an
//     upgrade Job running, a configuration roll, a zone waiting its turn: Normal; an API error the
//     operator retries, ReconcileError: Warning);
//   - RestartPending turning True or naming another window (Normal; Warning when the windows cannot be
//     read): Ready stays True while a configuration change waits for a restart window;
//   - MissingReference turning True while Ready waits for something else (an upgrade under way), since
//     the missing object then names neither Stalled nor Ready.
func (r *Reconciler) waitingEvents(ests, orig *extendedv1alpha1.ExtendedStatefulSet) {
	before, after := orig.Status.Conditions, ests.Status.Conditions
	// A Stalled message holds no counters (names, the API server's answer), so a new one is a new problem.
	if opsutil.EventOnTransition(r.Recorder, ests, nil, before, after, opsutil.Transition{
		Type: extendedv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, EventType: corev1.EventTypeWarning, Action: "Wait", CompareMessage: true,
	}) || meta.IsStatusConditionTrue(after, extendedv1alpha1.ConditionStalled) {
		return
	}
	eventType := corev1.EventTypeNormal
	if c := meta.FindStatusCondition(after, extendedv1alpha1.ConditionReady); c != nil &&
		(c.Reason == extendedv1alpha1.ReasonReconcileError || c.Reason == extendedv1alpha1.ReasonNoPhasedRollout) {
		eventType = corev1.EventTypeWarning
	}
	opsutil.EventOnTransition(r.Recorder, ests, nil, before, after, opsutil.Transition{
		Type: extendedv1alpha1.ConditionReady, Status: metav1.ConditionFalse, EventType: eventType, Action: "Wait",
	})
	// The message names when the next window opens, not how long is left: a new one is a new wait.
	restartEvent := corev1.EventTypeNormal
	if c := meta.FindStatusCondition(after, extendedv1alpha1.ConditionRestartPending); c != nil && c.Reason == extendedv1alpha1.ReasonInvalidRestartWindow {
		restartEvent = corev1.EventTypeWarning
	}
	opsutil.EventOnTransition(r.Recorder, ests, nil, before, after, opsutil.Transition{
		Type: extendedv1alpha1.ConditionRestartPending, Status: metav1.ConditionTrue, EventType: restartEvent, Action: "Wait", CompareMessage: true,
	})
	opsutil.EventOnTransition(r.Recorder, ests, nil, before, after, opsutil.Transition{
		Type: extendedv1alpha1.ConditionMissingReference, Status: metav1.ConditionTrue, EventType: corev1.EventTypeWarning, Action: "Wait", CompareMessage: true,
	})
}
