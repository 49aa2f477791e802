//go:build integration

package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// A PhasedRollout that waits says why in an Event, once per entry into the waiting state (not once per
// check): its StatefulSet missing, a check that cannot be evaluated, waiting for a pod.
func TestWaitingStatesHaveEvents(t *testing.T) {
	startOperator(t, newFakeChecker(VerdictError))

	g := newFixture(t, 1, 0)
	g.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.TargetRef = "missing" })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		evs := testsupport.Events(t, suite.Client, g.ns, "PhasedRollout", "pr", string(rolloutv1alpha1.PhaseErrorSTSNotFound))
		if assert.Len(c, evs, 1) {
			assert.Equal(c, corev1.EventTypeWarning, evs[0].Type)
			assert.Contains(c, evs[0].Note, "StatefulSet missing not found")
		}
	}, wait, tick, "ErrorSTSNotFound Event")

	f := newFixture(t, 2, 0)
	f.simulateStatefulSetController()
	f.createRollout()
	f.waitPartition(2)
	f.newRevision("web-r2")
	require.Eventually(t, func() bool {
		st := f.rollout().Status.RollingPodStatus
		return st != nil && st.Status == rolloutv1alpha1.StepPrometheusError && st.TotalChecks >= 3
	}, wait, tick, "several checks that could not be evaluated")
	evs := testsupport.Events(t, suite.Client, f.ns, "PhasedRollout", "pr", string(rolloutv1alpha1.StepPrometheusError))
	require.Len(t, evs, 1, "one Event for the state, not one per check")
	assert.Nil(t, evs[0].Series)
	assert.Equal(t, corev1.EventTypeWarning, evs[0].Type)
	assert.Contains(t, evs[0].Note, "fake error")
	assert.Contains(t, f.eventReasons("pr"), string(rolloutv1alpha1.StepWaitForInitialDelay))
	testsupport.NeverWithin(t, 2*time.Second, 100*time.Millisecond, func() bool {
		evs := testsupport.Events(t, suite.Client, g.ns, "PhasedRollout", "pr", string(rolloutv1alpha1.PhaseErrorSTSNotFound))
		return len(evs) != 1 || evs[0].Series != nil
	}, "ErrorSTSNotFound recorded again")
}
