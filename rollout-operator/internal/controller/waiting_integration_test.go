//go:build integration

package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

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

// Every waiting state of a rollout has its Event, recorded once when the rollout enters it (per pod for
// the steps), never once per reconcile: some pod not available, the initial delay, the checks, maxTries
// used up (Failed), the rolled pod not yet updated and Ready, skipCheck (Suspended), and a StatefulSet
// that cannot be managed (OnDelete).
func TestEveryWaitingStateHasOneEvent(t *testing.T) {
	checker := newFakeChecker(VerdictFail)
	startOperator(t, checker)
	f := newFixture(t, 2, 0)
	f.simulateStatefulSetController()
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) {
		pr.Spec.Check.InitialDelaySeconds = ptr.To[int32](1)
		pr.Spec.Check.MaxTries = ptr.To[int32](3)
	})
	f.waitPartition(2)
	f.setReady("web-0", false)
	f.newRevision("web-r2")
	require.Eventually(t, func() bool {
		st := f.rollout().Status.RollingPodStatus
		return st != nil && st.Status == rolloutv1alpha1.StepWaitForAllPodsToBeAvailable
	}, wait, tick, "waiting for web-0")
	time.Sleep(time.Second) // reconciles while waiting
	f.setReady("web-0", true)
	f.waitPhase(rolloutv1alpha1.PhaseFailed)

	// Retry with passing checks: each partition move waits for the rolled pod to be updated and Ready.
	checker.set(VerdictPass)
	f.updateRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Check.MaxTries = ptr.To[int32](10) })
	f.waitRolledTo("web-r2")

	f.updateRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.SkipCheck = ptr.To(true) })
	f.waitPhase(rolloutv1alpha1.PhaseSuspended)
	// Another StatefulSet, OnDelete from the start (switching f's under a reconcile that applies the
	// partition makes that write fail once: a Ready=False Event of its own).
	g := newFixture(t, 1, 0)
	g.setOnDelete()
	g.createRollout()
	g.waitPhase(rolloutv1alpha1.PhaseErrorCannotManage)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Len(c, testsupport.Events(t, suite.Client, g.ns, "PhasedRollout", "pr", rolloutv1alpha1.EventCannotManage), 1)
	}, wait, tick, "one CannotManage Event")

	// Once per entry: the recorder merges an Event repeated within minutes into a series, so one
	// recorded per reconcile would show one.
	for _, reason := range []string{
		string(rolloutv1alpha1.StepWaitForAllPodsToBeAvailable), string(rolloutv1alpha1.StepWaitForInitialDelay),
		string(rolloutv1alpha1.StepWaitForChecks), rolloutv1alpha1.EventRolloutFailed, string(rolloutv1alpha1.StepWaitForPodToBeUpdated),
		rolloutv1alpha1.EventSuspended,
	} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.NotEmpty(c, testsupport.Events(t, suite.Client, f.ns, "PhasedRollout", "pr", reason))
		}, wait, tick, "an Event %s", reason)
		for _, e := range testsupport.Events(t, suite.Client, f.ns, "PhasedRollout", "pr", reason) {
			assert.Nil(t, e.Series, "Event %s %q repeated", reason, e.Note)
			assert.NotContains(t, e.Note, "pod  ", "the Event names the pod")
		}
	}
	for _, reason := range []string{string(rolloutv1alpha1.StepWaitForAllPodsToBeAvailable), rolloutv1alpha1.EventRolloutFailed,
		rolloutv1alpha1.EventSuspended} {
		assert.Len(t, testsupport.Events(t, suite.Client, f.ns, "PhasedRollout", "pr", reason), 1, "Events %s", reason)
	}
}

// A new PhasedRollout whose StatefulSet's latest spec the StatefulSet controller has not observed yet
// holds the partition and says why in one Event, however long it waits.
func TestWaitingForTheStatefulSetControllerHasAnEvent(t *testing.T) {
	startOperator(t, newFakeChecker(VerdictPass))
	f := newFixture(t, 2, 0)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sts := f.sts()
		sts.Spec.Template.Annotations = map[string]string{"changed": "yes"} // a new generation, not yet observed
		return suite.Client.Update(t.Context(), sts)
	}))
	f.createRollout()
	f.waitPartition(2)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		evs := testsupport.Events(t, suite.Client, f.ns, "PhasedRollout", "pr", rolloutv1alpha1.EventWaitForStatefulSetController)
		if assert.Len(c, evs, 1) {
			assert.Contains(c, evs[0].Note, "partition is held at 2")
		}
	}, wait, tick, "WaitForStatefulSetController Event")
	testsupport.NeverWithin(t, 3*time.Second, 100*time.Millisecond, func() bool {
		evs := testsupport.Events(t, suite.Client, f.ns, "PhasedRollout", "pr", rolloutv1alpha1.EventWaitForStatefulSetController)
		return len(evs) != 1 || evs[0].Series != nil
	}, "the Event repeated while waiting")
	f.setRevisions("web-r1", "web-r1")
	f.waitPhase(rolloutv1alpha1.PhaseUpdated)
}
