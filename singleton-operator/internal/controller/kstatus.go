package controller

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// stalledReasons are the Ready reasons that need a change by the user: the operator waits for it and
// does nothing else.
var stalledReasons = map[string]bool{
	singletonv1.ReasonInvalidSelector:        true,
	singletonv1.ReasonSelectorOverlap:        true,
	singletonv1.ReasonSeveralPodsWithoutHold: true,
}

// reportInvalidSelector reports a selector that does not parse: Stalled and Ready False with the
// parser's message, phase Failed. The CRD refuses such selectors at apply; an object created before the
// CRD had that rule gets here.
func reportInvalidSelector(s *scope) {
	msg := fmt.Sprintf("spec.selector is invalid: %v; the operator does nothing until the StatefulSingleton is re-created with a valid selector", s.invalidSelector)
	s.status.Phase = singletonv1.PhaseFailed
	s.status.Message = msg
	setCondition(s.status, s.ss, singletonv1.ConditionReady, metav1.ConditionFalse, singletonv1.ReasonInvalidSelector, msg)
}

// reportSpecConcerns reports (singletonv1.ConditionSpecWarning) a spec that the original project accepted and that
// is acted on as written, but is probably a mistake. terminationGracePeriod > maxTransitionTime: the
// new pod stays held until the old one is gone whatever the deadline (maxTransitionTime only reports),
// so it is safe, but every old pod that uses more than maxTransitionTime of its grace period makes the
// handover report TransitionTimedOut (phase Failed) although nothing is wrong.
func reportSpecConcerns(s *scope) {
	spec := s.ss.Spec
	if spec.TerminationGracePeriod <= spec.MaxTransitionTime || spec.MaxTransitionTime <= 0 {
		meta.RemoveStatusCondition(&s.status.Conditions, singletonv1.ConditionSpecWarning)
		return
	}
	setCondition(s.status, s.ss, singletonv1.ConditionSpecWarning, metav1.ConditionTrue, singletonv1.ReasonGracePeriodExceedsTransitionTime,
		fmt.Sprintf("spec.terminationGracePeriod (%ds) is greater than spec.maxTransitionTime (%ds): the new pod is still held until the old one is gone, but a handover whose old pod takes more than %ds to stop reports TransitionTimedOut; raise maxTransitionTime to at least %d",
			spec.TerminationGracePeriod, spec.MaxTransitionTime, spec.MaxTransitionTime, spec.TerminationGracePeriod))
}

// summarize derives the kstatus conditions from the status this reconcile decided, so they cannot
// contradict it: Stalled from a Ready reason that needs the user, Reconciling while a handover is in
// progress (phase Transitioning, or Failed past maxTransitionTime with the new pod still held). A
// condition that does not apply is removed (kstatus reads an absent one as False). Every condition left
// was decided or confirmed by this reconcile, which observed ss.Generation, so each carries it: after a
// spec change no condition claims an older generation.
func summarize(status *singletonv1.StatefulSingletonStatus, ss *singletonv1.StatefulSingleton) {
	for i := range status.Conditions {
		status.Conditions[i].ObservedGeneration = ss.Generation
	}
	ready := meta.FindStatusCondition(status.Conditions, singletonv1.ConditionReady)
	stalled := ready != nil && ready.Status == metav1.ConditionFalse && stalledReasons[ready.Reason]
	if stalled {
		setCondition(status, ss, singletonv1.ConditionStalled, metav1.ConditionTrue, ready.Reason, ready.Message)
	} else {
		meta.RemoveStatusCondition(&status.Conditions, singletonv1.ConditionStalled)
	}
	handover := status.Phase == singletonv1.PhaseTransitioning || status.Phase == singletonv1.PhaseFailed
	if handover && !stalled && ready != nil && ready.Status == metav1.ConditionFalse {
		setCondition(status, ss, singletonv1.ConditionReconciling, metav1.ConditionTrue, singletonv1.ReasonHandover, ready.Message)
	} else {
		meta.RemoveStatusCondition(&status.Conditions, singletonv1.ConditionReconciling)
	}
}
