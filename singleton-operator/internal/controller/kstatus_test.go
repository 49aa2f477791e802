package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

func testScope(spec singletonv1.StatefulSingletonSpec) *scope {
	ss := &singletonv1.StatefulSingleton{ObjectMeta: metav1.ObjectMeta{Name: "db", Generation: 3}, Spec: spec}
	return &scope{ss: ss, status: &singletonv1.StatefulSingletonStatus{ObservedGeneration: 3}}
}

// The original e2e suite's spec (terminationGracePeriod 30, maxTransitionTime 1) is reported, not
// refused; a spec within the rule carries no warning, and a warning goes once the spec is fixed.
func TestSpecConcernGracePeriod(t *testing.T) {
	s := testScope(singletonv1.StatefulSingletonSpec{TerminationGracePeriod: 30, MaxTransitionTime: 1})
	reportSpecConcerns(s)
	c := meta.FindStatusCondition(s.status.Conditions, singletonv1.ConditionSpecWarning)
	require.NotNil(t, c)
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Equal(t, singletonv1.ReasonGracePeriodExceedsTransitionTime, c.Reason)
	assert.Equal(t, int64(3), c.ObservedGeneration)
	assert.Contains(t, c.Message, "30s")

	s.ss.Spec.MaxTransitionTime = 30
	reportSpecConcerns(s)
	assert.Nil(t, meta.FindStatusCondition(s.status.Conditions, singletonv1.ConditionSpecWarning))
}

// The warning never changes what the operator does: past maxTransitionTime the transition is reported
// and the candidate stays held (checkDeadline only reports), whatever terminationGracePeriod says.
func TestSpecConcernDoesNotShortenTheHold(t *testing.T) {
	s := testScope(singletonv1.StatefulSingletonSpec{TerminationGracePeriod: 30, MaxTransitionTime: 1})
	reportSpecConcerns(s)
	s.status.Phase = singletonv1.PhaseTransitioning
	setCondition(s.status, s.ss, singletonv1.ConditionReady, metav1.ConditionFalse, singletonv1.ReasonWaitingForOldPod, "pod new is held until pods old are gone")
	summarize(s.status, s.ss)
	assert.True(t, meta.IsStatusConditionTrue(s.status.Conditions, singletonv1.ConditionReconciling))
	assert.Nil(t, meta.FindStatusCondition(s.status.Conditions, singletonv1.ConditionStalled))
}

// An unparsable selector: phase Failed, Ready=False and Stalled=True with the parser's message.
func TestInvalidSelectorPhase(t *testing.T) {
	for name, sel := range map[string]metav1.LabelSelector{
		"unknown operator": {MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}},
		"invalid value":    {MatchLabels: map[string]string{"app": "a b"}},
	} {
		t.Run(name, func(t *testing.T) {
			s := testScope(singletonv1.StatefulSingletonSpec{Selector: sel, TerminationGracePeriod: 30, MaxTransitionTime: 300})
			_, s.invalidSelector = metav1.LabelSelectorAsSelector(&sel)
			require.Error(t, s.invalidSelector)
			reportInvalidSelector(s)
			summarize(s.status, s.ss)
			assert.Equal(t, singletonv1.PhaseFailed, s.status.Phase)
			ready := meta.FindStatusCondition(s.status.Conditions, singletonv1.ConditionReady)
			stalled := meta.FindStatusCondition(s.status.Conditions, singletonv1.ConditionStalled)
			require.NotNil(t, ready)
			require.NotNil(t, stalled)
			assert.Equal(t, metav1.ConditionFalse, ready.Status)
			assert.Equal(t, metav1.ConditionTrue, stalled.Status)
			assert.Equal(t, singletonv1.ReasonInvalidSelector, stalled.Reason)
			assert.Contains(t, stalled.Message, s.invalidSelector.Error())
			assert.Equal(t, int64(3), stalled.ObservedGeneration)
			assert.Nil(t, meta.FindStatusCondition(s.status.Conditions, singletonv1.ConditionReconciling), "stalled is not reconciling")
		})
	}
}

// summarize: Stalled for the Ready reasons that need the user, Reconciling while a handover is in
// progress (also past the deadline), neither when Ready or idle.
func TestSummarize(t *testing.T) {
	cases := []struct {
		phase                singletonv1.StatefulSingletonPhase
		ready                metav1.ConditionStatus
		reason               string
		stalled, reconciling bool
	}{
		{singletonv1.PhaseRunning, metav1.ConditionTrue, singletonv1.ReasonActive, false, false},
		{singletonv1.PhaseRunning, metav1.ConditionFalse, singletonv1.ReasonNoPods, false, false},
		{singletonv1.PhaseTransitioning, metav1.ConditionFalse, singletonv1.ReasonWaitingForOldPod, false, true},
		{singletonv1.PhaseFailed, metav1.ConditionFalse, singletonv1.ReasonTransitionTimeout, false, true},
		{singletonv1.PhaseTransitioning, metav1.ConditionFalse, singletonv1.ReasonNodeNotReady, false, true},
		{singletonv1.PhaseRunning, metav1.ConditionFalse, singletonv1.ReasonSeveralPodsWithoutHold, true, false},
		{"", metav1.ConditionFalse, singletonv1.ReasonSelectorOverlap, true, false},
	}
	for _, c := range cases {
		s := testScope(singletonv1.StatefulSingletonSpec{})
		s.status.Phase = c.phase
		setCondition(s.status, s.ss, singletonv1.ConditionReconciling, metav1.ConditionTrue, singletonv1.ReasonHandover, "stale")
		setCondition(s.status, s.ss, singletonv1.ConditionStalled, metav1.ConditionTrue, "stale", "stale")
		setCondition(s.status, s.ss, singletonv1.ConditionReady, c.ready, c.reason, "msg")
		summarize(s.status, s.ss)
		assert.Equal(t, c.stalled, meta.IsStatusConditionTrue(s.status.Conditions, singletonv1.ConditionStalled), "%s/%s stalled", c.phase, c.reason)
		assert.Equal(t, c.reconciling, meta.IsStatusConditionTrue(s.status.Conditions, singletonv1.ConditionReconciling), "%s/%s reconciling", c.phase, c.reason)
	}
}

// Every condition the status keeps carries the generation this reconcile observed.
func TestSummarizeStampsObservedGeneration(t *testing.T) {
	s := testScope(singletonv1.StatefulSingletonSpec{})
	s.status.Conditions = []metav1.Condition{{Type: singletonv1.ConditionUngatedPod, Status: metav1.ConditionTrue, Reason: singletonv1.ReasonPodWithoutHold, ObservedGeneration: 1}}
	setCondition(s.status, s.ss, singletonv1.ConditionReady, metav1.ConditionTrue, singletonv1.ReasonActive, "pod a is active")
	summarize(s.status, s.ss)
	for _, c := range s.status.Conditions {
		assert.Equal(t, int64(3), c.ObservedGeneration, "condition %s", c.Type)
	}
}
