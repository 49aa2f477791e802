package controller

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// reportSteady reports a singleton without a held candidate: its active pod, or why none runs.
func reportSteady(s *scope) {
	status, pods := s.status, s.pods
	meta.RemoveStatusCondition(&status.Conditions, singletonv1.ConditionTransitionTimedOut)
	meta.RemoveStatusCondition(&status.Conditions, singletonv1.ConditionFencingRequired)
	status.Phase = singletonv1.PhaseRunning
	if len(pods.active) > 0 {
		status.Message = "pod " + pods.active[0].Name + " is active"
		if pods.active[0].Annotations[singletonv1.AnnotationAdopted] == "true" {
			status.Message += " (adopted: it was running without a start hold)"
		}
		setCondition(status, s.ss, singletonv1.ConditionReady, metav1.ConditionTrue, singletonv1.ReasonActive, status.Message)
	} else if c := meta.FindStatusCondition(status.Conditions, singletonv1.ConditionUngatedPod); c != nil {
		status.Message = c.Message
		setCondition(status, s.ss, singletonv1.ConditionReady, metav1.ConditionFalse, c.Reason, c.Message)
	} else {
		status.Message = "no pod to run"
		setCondition(status, s.ss, singletonv1.ConditionReady, metav1.ConditionFalse, singletonv1.ReasonNoPods, "no pod of the singleton is active or held")
	}
}

// recordActive records pod, just released or adopted, as the singleton's active pod: phase Running,
// Ready=True with msg, and no waiting condition of a transition left.
func recordActive(s *scope, pod *corev1.Pod, msg string) {
	status := s.status
	status.ActivePod, status.ActivePodUID, status.ActivePodNode = pod.Name, string(pod.UID), pod.Spec.NodeName
	status.Phase = singletonv1.PhaseRunning
	status.Message = msg
	meta.RemoveStatusCondition(&status.Conditions, singletonv1.ConditionTransitionTimedOut)
	meta.RemoveStatusCondition(&status.Conditions, singletonv1.ConditionFencingRequired)
	setCondition(status, s.ss, singletonv1.ConditionReady, metav1.ConditionTrue, singletonv1.ReasonActive, msg)
}

// writeStatus writes the status if it changed, stamped with the time of the write. Under an optimistic
// lock: the status carries decisions that depend on what was read (the epoch high-water mark, the
// active pod and its node that fencing relies on), so a write based on a stale copy must fail.
func (r *Reconciler) writeStatus(ctx context.Context, ss *singletonv1.StatefulSingleton, status *singletonv1.StatefulSingletonStatus) error {
	status.StatusTimestamp = ss.Status.StatusTimestamp
	if equality.Semantic.DeepEqual(&ss.Status, status) {
		return nil // unchanged but for the timestamp, which is only refreshed by a write
	}
	status.StatusTimestamp = &metav1.Time{Time: r.Clock.Now()}
	updated := ss.DeepCopy()
	updated.Status = *status
	if _, err := opsutil.PatchStatus(ctx, r.Client, updated, ss, opsutil.WithOptimisticLock()); err != nil {
		return ignoreConflict(err)
	}
	r.reportWaiting(ss, &ss.Status, status)
	return nil
}

// reportWaiting records an Event when the singleton starts waiting, or waits for another reason: the
// Ready condition turned False or changed its reason. So `kubectl describe` shows why it waits, once per
// change, not once per reconcile. Reasons whose Events are recorded where they arise
// (TransitionTimeout, NodeNotReady) are left out.
func (r *Reconciler) reportWaiting(ss *singletonv1.StatefulSingleton, before, after *singletonv1.StatefulSingletonStatus) {
	opsutil.EventOnTransition(r.Recorder, ss, nil, before.Conditions, after.Conditions, opsutil.Transition{
		Type: singletonv1.ConditionSpecWarning, Status: metav1.ConditionTrue, EventType: corev1.EventTypeWarning, Action: "Validate",
	})
	opsutil.EventOnTransition(r.Recorder, ss, nil, before.Conditions, after.Conditions, opsutil.Transition{
		Type: singletonv1.ConditionStrategyAdvice, Status: metav1.ConditionTrue, EventType: corev1.EventTypeNormal, Action: "Audit",
	})
	eventType := corev1.EventTypeNormal
	if now := meta.FindStatusCondition(after.Conditions, singletonv1.ConditionReady); now != nil {
		switch now.Reason {
		case singletonv1.ReasonTransitionTimeout, singletonv1.ReasonNodeNotReady:
			return
		case singletonv1.ReasonSelectorOverlap, singletonv1.ReasonSeveralPodsWithoutHold, singletonv1.ReasonInvalidSelector:
			eventType = corev1.EventTypeWarning
		}
	}
	opsutil.EventOnTransition(r.Recorder, ss, nil, before.Conditions, after.Conditions, opsutil.Transition{
		Type: singletonv1.ConditionReady, Status: metav1.ConditionFalse, EventType: eventType, Action: "Wait",
	})
}

// ignoreConflict drops a conflict of a StatefulSingleton write. A conflict means the cache is behind the
// API server (typically our own previous status write): the newer version's watch event queues another
// reconcile anyway, right away, whereas an error would add the rate limiter's growing back-off to the
// next handover.
func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

func setCondition(status *singletonv1.StatefulSingletonStatus, ss *singletonv1.StatefulSingleton, typ string, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: ss.Generation})
}

func podNames(pods []*corev1.Pod) string {
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}
