package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// setConditions derives the conditions from the phase.
func setConditions(pr *rolloutv1alpha1.PhasedRollout) {
	gen := pr.Generation
	set := func(t string, ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&pr.Status.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	phase := pr.Status.Phase
	reason := string(phase)
	if reason == "" {
		reason = "Unknown"
	}
	msg := pr.Status.Message
	bad := phase == rolloutv1alpha1.PhaseFailed || phase == rolloutv1alpha1.PhaseErrorCannotManage || phase == rolloutv1alpha1.PhaseErrorSTSNotFound ||
		phase == rolloutv1alpha1.PhaseAborted
	set(rolloutv1alpha1.ConditionReady, !bad && pr.Status.LastError == "", reason, msg)
	set(rolloutv1alpha1.ConditionUpdated, phase == rolloutv1alpha1.PhaseUpdated, reason, msg)
	set(rolloutv1alpha1.ConditionProgressing, phase == rolloutv1alpha1.PhaseRolling || phase == rolloutv1alpha1.PhaseVerifying, reason, msg)
	set(rolloutv1alpha1.ConditionDegraded, bad, reason, msg)
	// kstatus: Stalled when only a change by the user lets the rollout progress, Reconciling while it
	// progresses; at most one of them is True, so status.Compute reads Failed, InProgress or Current.
	set(rolloutv1alpha1.ConditionStalled, bad, reason, msg)
	set(rolloutv1alpha1.ConditionReconciling, !bad && (phase == rolloutv1alpha1.PhaseRolling || phase == rolloutv1alpha1.PhaseVerifying), reason, msg)
}

// setInvalidSpec overrides the conditions derived from the phase when the spec holds something the
// operator can never act on (checkSpec): Ready False, Degraded and Stalled True with the problem's
// reason and message (the parser's), Reconciling False. The phase stays as it was: the operator did
// nothing, and its values are the original project's.
func setInvalidSpec(pr *rolloutv1alpha1.PhasedRollout, p *specProblem) {
	if p == nil {
		return
	}
	for _, c := range []struct {
		t      string
		status metav1.ConditionStatus
	}{
		{rolloutv1alpha1.ConditionReady, metav1.ConditionFalse},
		{rolloutv1alpha1.ConditionProgressing, metav1.ConditionFalse},
		{rolloutv1alpha1.ConditionDegraded, metav1.ConditionTrue},
		{rolloutv1alpha1.ConditionStalled, metav1.ConditionTrue},
		{rolloutv1alpha1.ConditionReconciling, metav1.ConditionFalse},
	} {
		meta.SetStatusCondition(&pr.Status.Conditions, metav1.Condition{Type: c.t, Status: c.status, Reason: p.reason, Message: p.message, ObservedGeneration: pr.Generation})
	}
}

// waitingEvents records, once the status is written, an Event when the rollout enters a waiting state,
// once per entry, so kubectl describe says why it waits: a spec it can never act on (Stalled with the
// parser's message, checkSpec), Ready turning False (StatefulSet missing, cannot manage it, failed)
// unless this reconcile already announced the change, and each step that waits on a pod (to be
// updated and Ready, every pod available, the initial delay, the checks, a check that could not be
// evaluated).
func (r *Reconciler) waitingEvents(s *scope) {
	pr, orig := s.pr, s.orig
	if s.invalid != nil {
		// One Event per problem: another invalid query is another message under the same reason (the
		// parser's messages hold no counters).
		opsutil.EventOnTransition(r.Recorder, pr, nil, orig.Status.Conditions, pr.Status.Conditions, opsutil.Transition{
			Type: rolloutv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, EventType: corev1.EventTypeWarning, Action: "Wait", CompareMessage: true,
		})
		return
	}
	if r.stepEvent(pr, orig) || len(s.events) > 0 {
		return
	}
	opsutil.EventOnTransition(r.Recorder, pr, nil, orig.Status.Conditions, pr.Status.Conditions, opsutil.Transition{
		Type: rolloutv1alpha1.ConditionReady, Status: metav1.ConditionFalse, EventType: corev1.EventTypeWarning, Action: "Wait",
	})
}

// stepEvent records the Event of a step that starts waiting (another state or another pod) and reports
// whether it did.
func (r *Reconciler) stepEvent(pr, orig *rolloutv1alpha1.PhasedRollout) bool {
	step := pr.Status.RollingPodStatus
	if step == nil || step.Status == "" {
		return false
	}
	if was := orig.Status.RollingPodStatus; was != nil && was.Status == step.Status && was.Pod == step.Pod {
		return false
	}
	eventType, note := corev1.EventTypeNormal, ""
	switch step.Status {
	case rolloutv1alpha1.StepWaitForPodToBeUpdated:
		note = fmt.Sprintf("Waiting for pod %s to run revision %s and be Ready (partition %d)", step.Pod, pr.Status.UpdateRevision, ptr.Deref(step.Partition, 0))
	case rolloutv1alpha1.StepWaitForAllPodsToBeAvailable:
		note = fmt.Sprintf("Waiting for every pod of StatefulSet %s to be available before checking pod %s", activeTarget(pr), step.Pod)
	case rolloutv1alpha1.StepWaitForInitialDelay:
		note = fmt.Sprintf("Waiting check.initialDelaySeconds before the first check of pod %s", step.Pod)
	case rolloutv1alpha1.StepWaitForChecks:
		note = fmt.Sprintf("Waiting for the checks of pod %s to pass check.successThreshold times in a row", step.Pod)
	case rolloutv1alpha1.StepWaitForSwitchover:
		note = fmt.Sprintf("The checks of pod %s passed; %s", step.Pod, switchoverMessage(pr.Status.Switchover))
	case rolloutv1alpha1.StepPrometheusError:
		eventType = corev1.EventTypeWarning
		note = fmt.Sprintf("The check of pod %s could not be evaluated (it does not count as a pass): %s", step.Pod, pr.Status.LastError)
	default:
		return r.checkStateEvent(pr, step)
	}
	r.Recorder.Eventf(pr, nil, eventType, string(step.Status), "Wait", "%s", note)
	return true
}
