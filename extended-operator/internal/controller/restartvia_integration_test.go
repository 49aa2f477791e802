//go:build integration

package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// ES-B2, restartVia PhasedRollout: the test plays the StatefulSet controller (pods and status, as in
// inplace_integration_test.go) and the rollout-operator (its annotation on the StatefulSet and the
// partition steps); e2e/rollout's TestRestartThroughPhasedRollout runs both operators for real.

// playRollout plays the rollout-operator: it marks the in-place StatefulSet as managed by the
// PhasedRollout named (or unmarks it, for "") and sets its partition.
func (f *fixture) playRollout(name string, part int32) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sts := f.ipSTS()
		require.NotNil(f.t, sts)
		if name == "" {
			delete(sts.Annotations, rolloutv1alpha1.ManagedByAnnotation)
		} else {
			sts.Annotations[rolloutv1alpha1.ManagedByAnnotation] = name
		}
		setPartition(sts, part)
		return suite.Client.Update(f.t.Context(), sts)
	}))
}

// partitionStays asserts that the operator leaves the partition at part for a second.
func (f *fixture) partitionStays(part int32, msg string) {
	f.t.Helper()
	testsupport.NeverWithin(f.t, time.Second, 50*time.Millisecond, func() bool { return partition(f.ipSTS()) != part }, msg)
}

// The acceptance criterion: with restartVia PhasedRollout a configuration change takes the path of an
// image change. Both are written into the one StatefulSet and neither moves its partition: the
// PhasedRollout steps it (here the test), and the ExtendedStatefulSet follows, Ready once every pod is
// updated. Without a PhasedRollout nothing rolls and Reconciling says why, with a Warning Event.
func TestRestartViaPhasedRollout(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	ests := f.inPlaceESTS(3, "app:1")
	ests.Spec.UpdateStrategy.RestartVia = extendedv1alpha1.RestartViaPhasedRollout
	f.withConfigMap(ests)
	f.create(ests)
	sts := f.waitPartition(3, extendedv1alpha1.PhaseDone) // created held: nothing rolls unchecked
	for i := range 3 {
		f.stsPod(sts, i, "r1", true)
	}
	t.Cleanup(f.releasePods)
	f.ipStatus("r1", "r1", 3, 3)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, extendedv1alpha1.ReasonReconciled)

	// An image change without a PhasedRollout: written, not rolled, and said.
	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.Template.Spec.Template.Spec.Containers[0].Image = "app:2"
	})
	f.waitIP(func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, "app:2", sts.Spec.Template.Spec.Containers[0].Image)
		assert.Equal(c, extendedv1alpha1.PhaseRollout, sts.Annotations[extendedv1alpha1.PhaseAnnotation])
	}, "the template written")
	f.ipStatus("r1", "r2", 3, 0)
	f.waitCondition(extendedv1alpha1.ConditionReconciling, metav1.ConditionTrue, extendedv1alpha1.ReasonNoPhasedRollout)
	f.waitCondition(extendedv1alpha1.ConditionStalled, metav1.ConditionFalse, "")
	assert.Contains(t, conditionOf(f.get(), extendedv1alpha1.ConditionReady).Message, "create one with targetRef web")
	f.waitEvent(extendedv1alpha1.ReasonNoPhasedRollout, "no PhasedRollout manages it")
	f.partitionStays(3, "the partition moved without a PhasedRollout")

	// The PhasedRollout steps; the operator follows and never writes the partition.
	f.playRollout("web-rollout", 3)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionFalse, extendedv1alpha1.ReasonRollout)
	assert.Contains(t, conditionOf(f.get(), extendedv1alpha1.ConditionReady).Message, "rolled by PhasedRollout web-rollout")
	for step := int32(2); step >= 0; step-- {
		f.playRollout("web-rollout", step)
		f.replacePod(int(step), "r2", true)
		f.ipStatus("r1", "r2", 3, 3-step)
		if step > 0 {
			f.partitionStays(step, "the operator moved the PhasedRollout's partition")
		}
	}
	f.ipStatus("r2", "r2", 3, 3)
	f.waitPartition(0, extendedv1alpha1.PhaseDone)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, extendedv1alpha1.ReasonReconciled)
	assert.Equal(t, int32(2), f.get().Status.CurrentVersion)
	f.waitEvent(extendedv1alpha1.EventRolledOut, "by PhasedRollout web-rollout")

	// Idle, the PhasedRollout holds the partition at replicas; the operator leaves it there.
	f.playRollout("web-rollout", 3)
	f.partitionStays(3, "the operator reset an idle PhasedRollout's partition")

	// A configuration change: the same path, only the config hash written.
	before := f.ipSTS().Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation]
	cm := &corev1.ConfigMap{}
	require.NoError(t, suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "conf"}, cm))
	cm.Data["port"] = "8080"
	require.NoError(t, suite.Client.Update(t.Context(), cm))
	f.waitIP(func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.NotEqual(c, before, sts.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation], "config hash")
		assert.Equal(c, extendedv1alpha1.PhaseRollout, sts.Annotations[extendedv1alpha1.PhaseAnnotation])
		assert.Equal(c, "app:2", sts.Spec.Template.Spec.Containers[0].Image)
	}, "the configuration change written")
	f.ipStatus("r2", "r3", 3, 0)
	f.partitionStays(3, "a configuration restart moved the partition itself")
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionFalse, extendedv1alpha1.ReasonRollout)
	for step := int32(2); step >= 0; step-- {
		f.playRollout("web-rollout", step)
		f.replacePod(int(step), "r3", true)
		f.ipStatus("r2", "r3", 3, 3-step)
	}
	f.ipStatus("r3", "r3", 3, 3)
	f.waitPartition(0, extendedv1alpha1.PhaseDone)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, extendedv1alpha1.ReasonReconciled)
	f.onlyInPlaceSTS()
}

// A PhasedRollout managing an in-place StatefulSet whose ExtendedStatefulSet does not hand it the
// updates would fight the operator over the partition: Stalled says so and the operator leaves the
// partition alone until the PhasedRollout goes.
func TestInPlacePartitionConflictWithAPhasedRollout(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	f.settleInPlace(f.inPlaceESTS(3, "app:1"))
	f.playRollout("web-rollout", 3)
	f.waitCondition(extendedv1alpha1.ConditionStalled, metav1.ConditionTrue, extendedv1alpha1.ReasonPartitionConflict)
	assert.Contains(t, conditionOf(f.get(), extendedv1alpha1.ConditionStalled).Message, "set restartVia PhasedRollout")
	f.partitionStays(3, "the operator fought the PhasedRollout over the partition")

	// The PhasedRollout gone (the rollout-operator releases an idle partition to 0 on deletion; here
	// the test leaves it at 3): the operator owns the partition again and settles it.
	f.playRollout("", 3)
	f.waitPartition(0, extendedv1alpha1.PhaseDone)
	f.waitCondition(extendedv1alpha1.ConditionStalled, metav1.ConditionFalse, "")
	f.ipStatus("r1", "r1", 3, 3) // the StatefulSet controller observes the partition change
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, extendedv1alpha1.ReasonReconciled)
}

// restartVia set on an in-place ExtendedStatefulSet made without it (its partition 0, where the operator
// keeps a settled one): the next update is written held at replicas, so nothing rolls before a
// PhasedRollout manages the StatefulSet.
func TestRestartViaSetLaterHoldsTheNextUpdate(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	f.settleInPlace(f.inPlaceESTS(3, "app:1"))
	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.UpdateStrategy.RestartVia = extendedv1alpha1.RestartViaPhasedRollout
		e.Spec.Template.Spec.Template.Spec.Containers[0].Image = "app:2"
	})
	sts := f.waitIP(func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, "app:2", sts.Spec.Template.Spec.Containers[0].Image)
	}, "the template written")
	assert.Equal(t, int32(3), partition(sts), "held at replicas in the same write as the template")
	f.ipStatus("r1", "r2", 3, 0)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionFalse, extendedv1alpha1.ReasonNoPhasedRollout)
	f.partitionStays(3, "the partition moved without a PhasedRollout")
}
