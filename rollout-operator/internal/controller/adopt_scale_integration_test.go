//go:build integration

package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// TestAdoptsAnInFlightNativeRollout (PR-12): a StatefulSet in the middle of a native rollout
// (partition 0, web-2 already on the update revision, web-0 and web-1 not) gets a PhasedRollout:
// the partition is frozen at 2 (the first not-updated ordinal + 1) instead of restarting from the
// top, the pod rolled natively is checked first, no further pod changes while the checks fail, and
// the rollout completes once they pass.
func TestAdoptsAnInFlightNativeRollout(t *testing.T) {
	checker := newFakeChecker(VerdictFail)
	startOperator(t, checker)
	f := newFixture(t, 3, 0)
	f.setRevisions("web-r1", "web-r2")
	f.setPodRevision("web-2", "web-r2")
	require.Equal(t, int32(0), f.partition(), "a native rollout: partition 0 (the API default)")

	f.createRollout()
	f.waitPartition(2)
	pr := f.waitPhase(rolloutv1alpha1.PhaseRolling)
	require.NotNil(t, pr.Status.AdoptedPartition)
	assert.Equal(t, int32(2), *pr.Status.AdoptedPartition)
	// Events are sent asynchronously after the status write that the phase shows: wait for it.
	assert.Eventually(t, func() bool { return slices.Contains(f.eventReasons("pr"), rolloutv1alpha1.EventRolloutAdopted) }, wait, tick,
		"an Event %s about the PhasedRollout", rolloutv1alpha1.EventRolloutAdopted)
	// Only now does the simulated StatefulSet controller run (it would roll everything at partition 0).
	log := f.simulateStatefulSetController()
	require.Eventually(t, func() bool { return len(checker.recorded()) >= 2 }, wait, tick, "checks of the adopted step run")
	testsupport.NeverWithin(t, 2*time.Second, tick, func() bool {
		return f.partition() != 2 || f.podRevision("web-1") != "web-r1" || f.podRevision("web-0") != "web-r1"
	}, "no pod changes while the adopted step's checks fail")
	for _, q := range checker.recorded() {
		assert.Equal(t, `errors{pod="web-2"} > 0`, q.Expr, "the pod rolled before the adoption is the one checked")
	}

	checker.set(VerdictPass)
	f.waitPhase(rolloutv1alpha1.PhaseUpdated)
	f.waitPartition(3)
	require.Eventually(t, func() bool { v, _ := log.get(); return len(v) >= 4 }, wait, tick)
	values, _ := log.get()
	assert.Equal(t, []int32{2, 1, 0, 3}, values, "adopted at 2, never back to 3 before the end")
}

// TestScaleUpDuringRollout (PR-14): at partition 2 of 3, the StatefulSet is scaled to 5. With
// scaleUpDuringRollout HoldNew (the default) the partition is raised to 5 (the new ordinals start at
// the current revision), a new step starts there and status.lastScaleUp records the position the
// rollout had reached; with Allow the partition stays at 2.
func TestScaleUpDuringRollout(t *testing.T) {
	for _, tc := range []struct {
		name       string
		policy     rolloutv1alpha1.ScaleUpPolicy
		wantHeldAt int32
	}{
		{"HoldNew by default", "", 5},
		{"Allow", rolloutv1alpha1.ScaleUpAllow, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checker := newFakeChecker(VerdictPass)
			startOperator(t, checker)
			f := newFixture(t, 3, 0)
			f.simulateStatefulSetController()
			pr := f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) {
				pr.Spec.ScaleUpDuringRollout = tc.policy
			})
			if tc.policy == "" {
				assert.Equal(t, rolloutv1alpha1.ScaleUpHoldNew, pr.Spec.ScaleUpDuringRollout, "schema default")
			}
			f.waitPartition(3)
			f.newRevision("web-r2")
			f.waitPartition(2)
			checker.set(VerdictFail) // hold the rollout at partition 2 (successThreshold 2: at most one pass so far)
			require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
				sts := f.sts()
				sts.Spec.Replicas = ptr.To[int32](5)
				return suite.Client.Update(context.Background(), sts)
			}))
			require.Eventually(t, func() bool { return f.rollout().Status.LastScaleUp != nil }, wait, tick, "the scale-up is recorded")
			pr = f.rollout()
			assert.Equal(t, rolloutv1alpha1.ScaleUpRecord{
				FromReplicas: 3, ToReplicas: 5, Partition: 2, Policy: orDefault(tc.policy, rolloutv1alpha1.ScaleUpHoldNew), HeldAt: tc.wantHeldAt,
				Time: pr.Status.LastScaleUp.Time,
			}, *pr.Status.LastScaleUp)
			f.waitPartition(tc.wantHeldAt)
			testsupport.NeverWithin(t, 2*time.Second, tick, func() bool { return f.partition() != tc.wantHeldAt }, "the partition stays")
			require.Eventually(t, func() bool {
				st := f.rollout().Status.RollingPodStatus
				return st != nil && st.Partition != nil && *st.Partition == tc.wantHeldAt
			}, wait, tick, "the step is the one at the held partition")
			f.waitEventReason("pr", rolloutv1alpha1.EventScaledDuringRollout)
		})
	}
}

// orDefault returns v, or def when v is empty.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// podRevision returns the revision label of a pod.
func (f *fixture) podRevision(name string) string {
	f.t.Helper()
	pod := &corev1.Pod{}
	if err := suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, pod); err != nil {
		return ""
	}
	return pod.Labels[appsv1.ControllerRevisionHashLabelKey]
}
