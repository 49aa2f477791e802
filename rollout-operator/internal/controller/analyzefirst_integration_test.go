//go:build integration

package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// PR-08, spec.analyzeBeforeFirstPod false: the first pod rolls without a check (the first partition
// move happens before any query), every later step is checked as usual, and a dry run skips the same
// step. TestRollsOnePodAtATimeOnlyAfterPassingChecks is the default (true): four checked steps.
func TestAnalyzeBeforeFirstPodFalse(t *testing.T) {
	checker := newFakeChecker(VerdictPass)
	startOperator(t, checker)
	f := newFixture(t, 3, 0)
	log := f.simulateStatefulSetController()
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.AnalyzeBeforeFirstPod = ptr.To(false) })
	f.waitPartition(3)
	f.waitPhase(rolloutv1alpha1.PhaseUpdated)

	f.newRevision("web-r2")
	f.waitPartition(2)
	assert.Empty(t, checker.recorded(), "the first pod rolled before any check")
	f.waitRolledTo("web-r2")
	f.waitPartition(3)
	require.Eventually(t, func() bool { v, _ := log.get(); return len(v) >= 5 }, wait, tick, "the simulator saw the last change")
	values, _ := log.get()
	assert.Equal(t, []int32{3, 2, 1, 0, 3}, values)
	pods := map[string]int{}
	for _, q := range checker.recorded() {
		pods[q.Expr]++
	}
	// Three checked steps (web-2, web-1, web-0 after their roll), two passes each: no pre-check.
	assert.Equal(t, map[string]int{`errors{pod="web-2"} > 0`: 2, `errors{pod="web-1"} > 0`: 2, `errors{pod="web-0"} > 0`: 2}, pods)
}

// A dry run (analysisOnly) with analyzeBeforeFirstPod false simulates the same steps: no check of the
// pod before it would roll.
func TestAnalyzeBeforeFirstPodFalseDryRun(t *testing.T) {
	checker := newFakeChecker(VerdictPass)
	startOperator(t, checker)
	f, _ := idleRollout(t, 3, func(pr *rolloutv1alpha1.PhasedRollout) {
		pr.Spec.AnalysisOnly = true
		pr.Spec.AnalyzeBeforeFirstPod = ptr.To(false)
		pr.Spec.Check.SuccessThreshold = 1
	})
	f.newRevision("web-r2")
	require.Eventually(t, func() bool {
		d := f.rollout().Status.DryRun
		return d != nil && d.Revision == "web-r2" && d.Step == nil && d.WouldAdvance == rolloutv1alpha1.EventWouldAdvance
	}, wait, tick, "the dry run completes")
	assert.Equal(t, []string{"web-2", "web-1", "web-0"}, f.checksIn(checker), "each simulated step after the first pod's roll")
	assert.Equal(t, int32(3), f.partition())
}
