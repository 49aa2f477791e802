//go:build integration

package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// setAnnotation sets (value non-nil) or removes the annotation key of the PhasedRollout "pr".
func (f *fixture) setAnnotation(key string, value *string) {
	f.t.Helper()
	f.updateRollout(func(pr *rolloutv1alpha1.PhasedRollout) {
		if value == nil {
			delete(pr.Annotations, key)
			return
		}
		if pr.Annotations == nil {
			pr.Annotations = map[string]string{}
		}
		pr.Annotations[key] = *value
	})
}

// namespacedQuery is a check query that names the namespace, so that a test's checker tells its own
// rollout's checks from those of rollouts other tests run at the same time or left behind.
const namespacedQuery = `errors{namespace="{{namespace}}",pod="{{pod}}"} > 0`

// withNamespacedQuery sets spec.check's query to namespacedQuery.
func withNamespacedQuery(pr *rolloutv1alpha1.PhasedRollout) {
	pr.Spec.Check.Query.Expr = namespacedQuery
}

// createNamespacedRollout creates the PhasedRollout "pr" with namespacedQuery (checksIn counts this
// fixture's checks only).
func (f *fixture) createNamespacedRollout(mods ...func(*rolloutv1alpha1.PhasedRollout)) {
	f.t.Helper()
	f.createRollout(append([]func(*rolloutv1alpha1.PhasedRollout){withNamespacedQuery}, mods...)...)
}

// checksIn returns the pods of the checks c ran for f's namespace, in order.
func (f *fixture) checksIn(c *fakeChecker) []string {
	var pods []string
	prefix := `errors{namespace="` + f.ns + `",pod="`
	for _, q := range c.recorded() {
		if rest, ok := strings.CutPrefix(q.Expr, prefix); ok {
			pods = append(pods, strings.TrimSuffix(rest, `"} > 0`))
		}
	}
	return pods
}

// events counts the Events of the PhasedRollout "pr" with reason.
func (f *fixture) events(reason string) int {
	return len(testsupport.Events(f.t, suite.Client, f.ns, "PhasedRollout", "pr", reason))
}

// waitEvents waits until the PhasedRollout "pr" has exactly n Events with reason (the recorder writes
// them asynchronously).
func (f *fixture) waitEvents(reason string, n int) {
	f.t.Helper()
	require.Eventually(f.t, func() bool { return f.events(reason) == n }, wait, tick, "%d Events %s", n, reason)
}

// idleRollout creates a StatefulSet of replicas pods (the StatefulSet controller simulated) under
// the PhasedRollout "pr", idle at revision web-r1.
func idleRollout(t *testing.T, replicas int32, mods ...func(*rolloutv1alpha1.PhasedRollout)) (*fixture, *partitionLog) {
	t.Helper()
	f := newFixture(t, replicas, 0)
	log := f.simulateStatefulSetController()
	f.createNamespacedRollout(mods...)
	f.waitPartition(replicas)
	f.waitPhase(rolloutv1alpha1.PhaseUpdated)
	return f, log
}

// rollingStuck starts a rollout of web-r2 over 3 pods whose checks always fail (no maxTries): the
// first step (partition 3, pod web-2 checked before it rolls) never passes on its own.
func rollingStuck(t *testing.T, checker *fakeChecker, mods ...func(*rolloutv1alpha1.PhasedRollout)) (*fixture, *partitionLog) {
	t.Helper()
	f, log := idleRollout(t, 3, mods...)
	f.newRevision("web-r2")
	f.waitPhase(rolloutv1alpha1.PhaseRolling)
	require.Eventually(t, func() bool { st := f.rollout().Status.RollingPodStatus; return st != nil && st.TotalChecks > 0 }, wait, tick, "checks run")
	return f, log
}

// spec.paused holds a rollout under way: phase Paused with its Event, the partition and the step's
// counters kept, no check runs, kstatus Current (Reconciling False, reason Paused); unpausing resumes
// (Event Resumed) and the rollout completes.
func TestPauseHoldsMidRolloutAndResumes(t *testing.T) {
	checker := newFakeChecker(VerdictFail)
	startOperator(t, checker)
	f, _ := rollingStuck(t, checker)

	f.updateRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Paused = true })
	paused := f.waitPhase(rolloutv1alpha1.PhasePaused)
	f.waitCondition(rolloutv1alpha1.ConditionReconciling, "False", rolloutv1alpha1.ReasonPaused)
	assert.Equal(t, status.CurrentStatus, f.kstatusOf())
	assert.Empty(t, testsupport.KstatusProblems(paused.Status.Conditions, paused.Generation))
	f.waitEvents(rolloutv1alpha1.EventPaused, 1)
	step := f.rollout().Status.RollingPodStatus
	require.NotNil(t, step)
	n := len(f.checksIn(checker))
	checker.set(VerdictPass) // would pass the step at once if checks ran
	testsupport.NeverWithin(t, 3*time.Second, 50*time.Millisecond, func() bool {
		pr := f.rollout()
		return f.partition() != 3 || len(f.checksIn(checker)) != n || pr.Status.Phase != rolloutv1alpha1.PhasePaused
	}, "the partition moved, a check ran or the pause ended")
	kept := f.rollout().Status.RollingPodStatus
	assert.Equal(t, step.TotalChecks, kept.TotalChecks, "the step's progress is kept")
	assert.Equal(t, step.Partition, kept.Partition)

	f.updateRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Paused = false })
	f.waitRolledTo("web-r2")
	f.waitEvents(rolloutv1alpha1.EventResumed, 1)
}

// The promote annotation passes the current step once, skipping its initial delay (an hour here) and
// checks that fail: the partition moves by exactly one, the annotation is removed, then nothing more
// moves. Promote on a Failed step retries it and passes it.
func TestPromoteMovesExactlyOneStep(t *testing.T) {
	checker := newFakeChecker(VerdictFail)
	startOperator(t, checker)
	f, log := idleRollout(t, 3, func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Check.InitialDelaySeconds = ptr.To[int32](3600) })
	f.newRevision("web-r2")
	require.Eventually(t, func() bool {
		st := f.rollout().Status.RollingPodStatus
		return st != nil && st.Status == rolloutv1alpha1.StepWaitForInitialDelay
	}, wait, tick, "waiting for the initial delay")

	f.setAnnotation(rolloutv1alpha1.PromoteAnnotation, ptr.To("go"))
	f.waitPartition(2)
	require.Eventually(t, func() bool {
		_, ok := f.rollout().Annotations[rolloutv1alpha1.PromoteAnnotation]
		return !ok
	}, wait, tick, "the annotation is removed")
	testsupport.NeverWithin(t, 3*time.Second, 50*time.Millisecond, func() bool { return f.partition() != 2 }, "moved a second step")
	values, _ := log.get()
	assert.Equal(t, []int32{3, 2}, values)
	f.waitEvents(rolloutv1alpha1.EventPromoted, 1)
	assert.Nil(t, f.rollout().Status.Promotion, "the record goes with the annotation")
	assert.Empty(t, f.checksIn(checker), "no check ran: the promote skipped the initial delay")

	// A promote while paused is kept until the rollout is resumed, then passes the step.
	f.updateRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Paused = true })
	f.waitPhase(rolloutv1alpha1.PhasePaused)
	f.setAnnotation(rolloutv1alpha1.PromoteAnnotation, ptr.To("go"))
	testsupport.NeverWithin(t, 2*time.Second, 50*time.Millisecond, func() bool {
		_, kept := f.rollout().Annotations[rolloutv1alpha1.PromoteAnnotation]
		return f.partition() != 2 || !kept
	}, "promoted while paused")
	f.updateRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Paused = false })
	f.waitPartition(1)
	f.waitEvents(rolloutv1alpha1.EventPromoted, 2)

	// A Failed step: the promote retries and passes it.
	g, _ := idleRollout(t, 3, func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Check.MaxTries = ptr.To[int32](2) })
	g.newRevision("web-r2")
	g.waitPhase(rolloutv1alpha1.PhaseFailed)
	g.setAnnotation(rolloutv1alpha1.PromoteAnnotation, ptr.To("go"))
	g.waitPartition(2)
	g.waitPhase(rolloutv1alpha1.PhaseFailed) // the next step fails on its own
	assert.Equal(t, int32(2), g.partition())
	g.waitEvents(rolloutv1alpha1.EventPromoted, 1)
}

// A promote the operator recorded, then died after moving the partition and before writing the
// status: the replayed reconcile finds the partition moved, does not promote the next step, and
// removes the annotation.
func TestPromoteReplayAfterCrashDoesNotMoveTwice(t *testing.T) {
	checker := newFakeChecker(VerdictFail)
	stop := startOperator(t, checker)
	f, log := rollingStuck(t, checker)
	stop()

	// The state a crash between the partition move and the status write leaves: the promotion
	// recorded for the step at partition 3, the partition already at 2, the status still at 3.
	f.setAnnotation(rolloutv1alpha1.PromoteAnnotation, ptr.To("now"))
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pr := f.rollout()
		pr.Status.Promotion = &rolloutv1alpha1.PromotionRecord{Value: "now", Partition: 3, Time: metav1.Now()}
		return suite.Client.Status().Update(context.Background(), pr)
	}))
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sts := f.sts()
		sts.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To[int32](2)
		return suite.Client.Update(context.Background(), sts)
	}))
	f.waitPartition(2)
	require.Equal(t, int32(3), *f.rollout().Status.RollingPodStatus.Partition)

	startOperator(t, checker)
	require.Eventually(t, func() bool {
		_, ok := f.rollout().Annotations[rolloutv1alpha1.PromoteAnnotation]
		return !ok
	}, wait, tick, "the spent annotation is removed")
	testsupport.NeverWithin(t, 3*time.Second, 50*time.Millisecond, func() bool { return f.partition() != 2 }, "promoted twice")
	values, _ := log.get()
	assert.Equal(t, []int32{3, 2}, values)
	assert.Equal(t, int32(2), *f.rollout().Status.RollingPodStatus.Partition)
}

// The abort annotation stops the rollout with the partition kept: phase Aborted, Event Aborted, a
// message saying how to revert, kstatus Failed (Stalled True); removing it resumes.
func TestAbortKeepsThePartitionAndReports(t *testing.T) {
	checker := newFakeChecker(VerdictFail)
	startOperator(t, checker)
	f, _ := rollingStuck(t, checker)

	f.setAnnotation(rolloutv1alpha1.AbortAnnotation, ptr.To(""))
	pr := f.waitPhase(rolloutv1alpha1.PhaseAborted)
	assert.Contains(t, pr.Status.Message, "kubectl rollout undo statefulset/web")
	f.waitCondition(rolloutv1alpha1.ConditionStalled, "True", string(rolloutv1alpha1.PhaseAborted))
	assert.Equal(t, status.FailedStatus, f.kstatusOf())
	assert.False(t, metaTrue(f.rollout(), rolloutv1alpha1.ConditionReady))
	assert.Empty(t, testsupport.KstatusProblems(f.rollout().Status.Conditions, f.rollout().Generation))
	f.waitEvents(rolloutv1alpha1.EventAborted, 1)
	n := len(f.checksIn(checker))
	checker.set(VerdictPass)
	testsupport.NeverWithin(t, 3*time.Second, 50*time.Millisecond, func() bool {
		return f.partition() != 3 || len(f.checksIn(checker)) != n
	}, "the partition moved or a check ran while aborted: %d → %d checks, partition %d, %+v", n, len(f.checksIn(checker)), f.partition(), f.rollout().Status)

	f.setAnnotation(rolloutv1alpha1.AbortAnnotation, nil)
	f.waitRolledTo("web-r2")
	f.waitEvents(rolloutv1alpha1.EventResumed, 1)
}

// spec.analysisOnly: the checks of every simulated step run (each on the pod the step would roll)
// while the partition stays held at replicas; the dry run reports WouldAdvance after each step, and
// WouldFail when a step uses up maxTries. kstatus reads it Current.
func TestAnalysisOnlyMovesNothing(t *testing.T) {
	checker := newFakeChecker(VerdictPass)
	startOperator(t, checker)
	f, log := idleRollout(t, 3, func(pr *rolloutv1alpha1.PhasedRollout) {
		pr.Spec.AnalysisOnly = true
		pr.Spec.Check.SuccessThreshold = 1
	})
	f.newRevision("web-r2")
	require.Eventually(t, func() bool {
		d := f.rollout().Status.DryRun
		return d != nil && d.Revision == "web-r2" && d.Step == nil && d.WouldAdvance == rolloutv1alpha1.EventWouldAdvance
	}, wait, tick, "the dry run completes")
	pr := f.rollout()
	assert.Contains(t, pr.Status.DryRun.Message, "would be complete")
	assert.Equal(t, rolloutv1alpha1.PhaseUpdated, pr.Status.Phase)
	assert.Equal(t, int32(3), f.partition())
	values, _ := log.get()
	assert.Equal(t, []int32{3}, values, "the partition never moved")
	f.waitEvents(rolloutv1alpha1.EventWouldAdvance, 4)
	f.waitEvents(rolloutv1alpha1.EventAnalysisOnly, 1)
	assert.Equal(t, []string{"web-2", "web-2", "web-1", "web-0"}, f.checksIn(checker), "each simulated step checks the pod it would roll")
	f.waitCondition(rolloutv1alpha1.ConditionUpdated, "False", rolloutv1alpha1.ReasonAnalysisOnly)
	assert.Equal(t, status.CurrentStatus, f.kstatusOf())

	// Off: the real rollout starts from the held partition.
	f.updateRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.AnalysisOnly = false })
	require.Eventually(t, func() bool { v, _ := log.get(); return len(v) == 5 }, wait, tick, "the real rollout ran")
	values, _ = log.get()
	assert.Equal(t, []int32{3, 2, 1, 0, 3}, values)
	assert.Nil(t, f.rollout().Status.DryRun)
}

// A dry run whose checks fail reports WouldFail once a step used up maxTries, and stops there.
func TestAnalysisOnlyWouldFail(t *testing.T) {
	startOperator(t, newFakeChecker(VerdictFail))
	g, _ := idleRollout(t, 2, func(pr *rolloutv1alpha1.PhasedRollout) {
		pr.Spec.AnalysisOnly = true
		pr.Spec.Check.MaxTries = ptr.To[int32](2)
	})
	g.newRevision("web-r2")
	require.Eventually(t, func() bool {
		d := g.rollout().Status.DryRun
		return d != nil && d.WouldAdvance == rolloutv1alpha1.EventWouldFail
	}, wait, tick, "the dry run would fail")
	assert.Equal(t, int32(2), g.partition())
	g.waitEvents(rolloutv1alpha1.EventWouldFail, 1)
	assert.Contains(t, g.rollout().Status.Message, "would stop here")
	assert.Equal(t, status.CurrentStatus, g.kstatusOf())
}

// Available follows the StatefulSet's available replicas, idle with the partition held included.
func TestAvailableCondition(t *testing.T) {
	startOperator(t, newFakeChecker(VerdictPass))
	f := newFixture(t, 2, 0)
	f.createNamespacedRollout()
	f.waitPhase(rolloutv1alpha1.PhaseUpdated)
	f.waitCondition(rolloutv1alpha1.ConditionAvailable, "False", "ReplicasUnavailable")
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sts := f.sts()
		sts.Status.AvailableReplicas = 2
		sts.Status.ReadyReplicas = 2
		return suite.Client.Status().Update(context.Background(), sts)
	}))
	c := f.waitCondition(rolloutv1alpha1.ConditionAvailable, "True", "AllReplicasAvailable")
	assert.Contains(t, c.Message, "2 of 2")
	assert.Equal(t, int32(2), f.partition(), "idle, partition held")
	assert.Equal(t, status.CurrentStatus, f.kstatusOf())
}

// spec.analysisOnly set during a real rollout freezes it at its partition (never raised back to
// replicas, which would roll the updated pods back): phase Paused, the simulated steps start there.
func TestAnalysisOnlyFreezesARolloutUnderWay(t *testing.T) {
	checker := newFakeChecker(VerdictFail)
	startOperator(t, checker)
	f, log := rollingStuck(t, checker)
	f.setAnnotation(rolloutv1alpha1.PromoteAnnotation, ptr.To("1"))
	f.waitPartition(2)

	f.updateRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.AnalysisOnly = true })
	f.waitPhase(rolloutv1alpha1.PhasePaused)
	require.Eventually(t, func() bool {
		d := f.rollout().Status.DryRun
		return d != nil && d.Step != nil && ptr.Deref(d.Step.Partition, -1) == 2 && d.Step.TotalChecks > 0
	}, wait, tick, "the dry run checks the step at partition 2")
	testsupport.NeverWithin(t, 2*time.Second, 50*time.Millisecond, func() bool { return f.partition() != 2 }, "the partition moved")
	values, _ := log.get()
	assert.Equal(t, []int32{3, 2}, values)
	assert.Equal(t, status.CurrentStatus, f.kstatusOf())
}
