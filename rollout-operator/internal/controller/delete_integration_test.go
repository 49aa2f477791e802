//go:build integration

package controller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// freeze plays what a PhasedRollout that is gone left on the StatefulSet: the partition and its
// ownership annotation.
func (f *fixture) freeze(owner string, partition int32) {
	f.t.Helper()
	f.annotate(owner)
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sts := f.sts()
		sts.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To(partition)}
		return suite.Client.Update(context.Background(), sts)
	}))
}

// waitHandedBack waits until the StatefulSet has the partition and no ownership annotation.
func (f *fixture) waitHandedBack(partition int32) {
	f.t.Helper()
	require.Eventually(f.t, func() bool {
		_, annotated := f.sts().Annotations[rolloutv1alpha1.ManagedByAnnotation]
		return !annotated && f.partition() == partition
	}, wait, tick, "handed back with partition %d and no annotation", partition)
}

func (f *fixture) gone(name string) bool {
	return isNotFound(suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, &rolloutv1alpha1.PhasedRollout{}))
}

// StatefulSets whose annotation names a PhasedRollout that no longer exists (deleted while the operator
// was uninstalled) are handed back when the operator starts, decided from the StatefulSet alone.
func TestOrphanAnnotationIsHandedBackAtStart(t *testing.T) {
	idle := newFixture(t, 2, 0)
	idle.freeze("gone", 2)
	mid := newFixture(t, 3, 0)
	mid.setRevisions("web-r1", "web-r2")
	mid.freeze("gone", 2)
	unrelated := newFixture(t, 2, 0) // no annotation: not the operator's to touch

	startOperator(t, newFakeChecker(VerdictPass))
	idle.waitHandedBack(0)
	mid.waitHandedBack(2)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Len(c, testsupport.Events(t, suite.Client, idle.ns, "StatefulSet", "web", rolloutv1alpha1.EventPartitionReleased), 1)
		assert.Len(c, testsupport.Events(t, suite.Client, mid.ns, "StatefulSet", "web", rolloutv1alpha1.EventPartitionLeftOnDeletion), 1)
	}, wait, tick, "one Event each")
	assert.Empty(t, unrelated.sts().Annotations)
	assert.Empty(t, unrelated.eventReasons("web"))
}

// A PhasedRollout still carrying the finalizer of earlier versions loses it on sight: one being
// deleted goes (and its StatefulSet is handed back), one that is not keeps working without it.
func TestLegacyFinalizerIsRemoved(t *testing.T) {
	deleting := newFixture(t, 2, 0)
	deleting.freeze("pr", 2)
	deleting.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Finalizers = []string{rolloutv1alpha1.LegacyFinalizer} })
	require.NoError(t, suite.Client.Delete(context.Background(), deleting.rollout()))
	require.False(t, deleting.gone("pr"), "held by the legacy finalizer while no operator runs")
	living := newFixture(t, 2, 0)
	living.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Finalizers = []string{rolloutv1alpha1.LegacyFinalizer} })

	startOperator(t, newFakeChecker(VerdictPass))
	require.Eventually(t, func() bool { return deleting.gone("pr") }, wait, tick, "the PhasedRollout being deleted goes")
	deleting.waitHandedBack(0)
	living.waitPhase(rolloutv1alpha1.PhaseUpdated)
	living.waitPartition(2)
	assert.Empty(t, living.rollout().Finalizers)
}
