package controller

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
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
	bad := phase == rolloutv1alpha1.PhaseFailed || phase == rolloutv1alpha1.PhaseErrorCannotManage || phase == rolloutv1alpha1.PhaseErrorSTSNotFound
	set(rolloutv1alpha1.ConditionReady, !bad && pr.Status.LastError == "", reason, msg)
	set(rolloutv1alpha1.ConditionUpdated, phase == rolloutv1alpha1.PhaseUpdated, reason, msg)
	set(rolloutv1alpha1.ConditionProgressing, phase == rolloutv1alpha1.PhaseRolling || phase == rolloutv1alpha1.PhaseVerifying, reason, msg)
	set(rolloutv1alpha1.ConditionDegraded, bad, reason, msg)
}
