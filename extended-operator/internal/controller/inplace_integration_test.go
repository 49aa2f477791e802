//go:build integration

package controller

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// ES-06, in place: one StatefulSet "web", whose partition the operator owns. The tests play the
// StatefulSet controller: they create the pods (stsPod) on the revision the partition allows and write
// the StatefulSet's status.

// inPlaceESTS is newESTS with spec.updateStrategy.type InPlace.
func (f *fixture) inPlaceESTS(replicas int32, image string) *extendedv1alpha1.ExtendedStatefulSet {
	ests := f.newESTS(replicas, image)
	ests.Spec.UpdateStrategy.Type = extendedv1alpha1.InPlaceUpdateStrategy
	return ests
}

// ipSTS returns the in-place StatefulSet (named after the ExtendedStatefulSet), nil when it does not exist.
func (f *fixture) ipSTS() *appsv1.StatefulSet {
	sts := &appsv1.StatefulSet{}
	err := suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: f.name}, sts)
	if apierrors.IsNotFound(err) {
		return nil
	}
	require.NoError(f.t, err)
	return sts
}

// waitIP waits until the in-place StatefulSet exists and cond holds for it.
func (f *fixture) waitIP(cond func(c *assert.CollectT, sts *appsv1.StatefulSet), msg string) *appsv1.StatefulSet {
	f.t.Helper()
	var got *appsv1.StatefulSet
	require.EventuallyWithT(f.t, func(c *assert.CollectT) {
		sts := f.ipSTS()
		if !assert.NotNil(c, sts, "StatefulSet %s", f.name) {
			return
		}
		cond(c, sts)
		got = sts
	}, wait, tick, msg)
	return got
}

// waitPartition waits until the in-place StatefulSet's partition and phase are these.
func (f *fixture) waitPartition(part int32, phase string) *appsv1.StatefulSet {
	f.t.Helper()
	return f.waitIP(func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, part, partition(sts), "partition")
		assert.Equal(c, phase, sts.Annotations[extendedv1alpha1.PhaseAnnotation], "phase")
	}, "partition "+strconv.Itoa(int(part))+", phase "+phase)
}

// ipStatus plays the StatefulSet controller's status: revisions, Ready and updated pod counts.
func (f *fixture) ipStatus(current, update string, ready, updated int32) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sts := f.ipSTS()
		require.NotNil(f.t, sts)
		n := ptr.Deref(sts.Spec.Replicas, 1)
		sts.Status = appsv1.StatefulSetStatus{
			ObservedGeneration: sts.Generation, Replicas: n, ReadyReplicas: ready, AvailableReplicas: ready,
			CurrentReplicas: n - updated, UpdatedReplicas: updated, CurrentRevision: current, UpdateRevision: update,
			CollisionCount: ptr.To(ptr.Deref(sts.Status.CollisionCount, 0) + 1), // every call an update event
		}
		if current == update {
			sts.Status.CurrentReplicas = n
		}
		return suite.Client.Status().Update(f.t.Context(), sts)
	}))
}

// replacePod plays the StatefulSet controller replacing the pod of an ordinal with one on revision.
func (f *fixture) replacePod(ordinal int, revision string, ready bool) {
	f.t.Helper()
	name := f.name + "-" + strconv.Itoa(ordinal)
	err := suite.Client.Delete(f.t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}})
	require.NoError(f.t, client.IgnoreNotFound(err))
	f.release(name)
	require.Eventually(f.t, func() bool {
		return apierrors.IsNotFound(suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, &corev1.Pod{}))
	}, wait, tick, "pod %s gone", name)
	f.stsPod(f.ipSTS(), ordinal, revision, ready)
}

// settleInPlace creates the in-place ExtendedStatefulSet and plays its first revision r1 with every pod
// Ready, until Ready=True.
func (f *fixture) settleInPlace(ests *extendedv1alpha1.ExtendedStatefulSet) {
	f.t.Helper()
	f.create(ests)
	sts := f.waitPartition(0, extendedv1alpha1.PhaseDone)
	n := int(ptr.Deref(ests.Spec.Template.Spec.Replicas, 1))
	for i := range n {
		f.stsPod(sts, i, "r1", true)
	}
	f.t.Cleanup(f.releasePods)
	f.ipStatus("r1", "r1", int32(n), int32(n))
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, extendedv1alpha1.ReasonReconciled)
}

// onlyInPlaceSTS asserts that the namespace holds no StatefulSet but the in-place one.
func (f *fixture) onlyInPlaceSTS() {
	f.t.Helper()
	var list appsv1.StatefulSetList
	require.NoError(f.t, suite.Client.List(f.t.Context(), &list, client.InNamespace(f.ns)))
	names := []string{}
	for _, s := range list.Items {
		names = append(names, s.Name)
	}
	assert.Equal(f.t, []string{f.name}, names, "one StatefulSet, updated in place")
}

// The acceptance criterion: a template change sets partition = replicas - canaries on the same
// StatefulSet; once the canary (the highest ordinal) is updated and Ready the partition walks down one
// pod at a time; at 0 with every pod updated and Ready the version is rolled out.
func TestInPlaceCanaryThenPartitionWalksDown(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	f.settleInPlace(f.inPlaceESTS(3, "app:1"))
	sts := f.ipSTS()
	assert.NotContains(t, sts.Spec.Selector.MatchLabels, extendedv1alpha1.VersionLabel, "the selector cannot change, so it has no version")
	assert.Equal(t, "1", sts.Spec.Template.Labels[extendedv1alpha1.VersionLabel])

	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.Template.Spec.Template.Spec.Containers[0].Image = "app:2"
	})
	sts = f.waitPartition(2, extendedv1alpha1.PhaseCanary)
	assert.Equal(t, "app:2", sts.Spec.Template.Spec.Containers[0].Image)
	assert.Equal(t, "2", sts.Annotations[extendedv1alpha1.VersionAnnotation])
	assert.Equal(t, "2", sts.Spec.Template.Labels[extendedv1alpha1.VersionLabel])
	f.onlyInPlaceSTS()
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionFalse, extendedv1alpha1.ReasonCanaryRollout)

	// The StatefulSet controller replaces ordinal 2 (above the partition); not Ready yet: no step.
	f.replacePod(2, "r2", false)
	f.ipStatus("r1", "r2", 2, 1)
	testsupport.NeverWithin(t, time.Second, 50*time.Millisecond, func() bool { return partition(f.ipSTS()) != 2 },
		"the partition moved before the canary was Ready")
	// Ready: the partition walks down to 1, then 0.
	f.replacePod(2, "r2", true)
	f.ipStatus("r1", "r2", 3, 1)
	f.waitPartition(1, extendedv1alpha1.PhaseRollout)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ests := f.get()
		assert.Equal(c, int32(1), ests.Status.CurrentVersion, "the pods below the partition run version 1")
		assert.Equal(c, int32(2), ests.Status.UpdateVersion)
		assert.Equal(c, map[string]bool{"2": true}, ests.Status.Versions)
	}, wait, tick)
	f.replacePod(1, "r2", true)
	f.ipStatus("r1", "r2", 3, 2)
	f.waitPartition(0, extendedv1alpha1.PhaseRollout)
	f.replacePod(0, "r2", true)
	f.ipStatus("r2", "r2", 3, 3)
	f.waitPartition(0, extendedv1alpha1.PhaseDone)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, extendedv1alpha1.ReasonReconciled)
	ests := f.get()
	assert.Equal(t, int32(2), ests.Status.CurrentVersion)
	assert.Equal(t, int32(3), ests.Status.UpdatedReplicas)
	f.onlyInPlaceSTS()
	for _, reason := range []string{extendedv1alpha1.EventInPlaceUpdate, extendedv1alpha1.EventRolledOut} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.NotEmpty(c, testsupport.Events(t, suite.Client, f.ns, "ExtendedStatefulSet", f.name, reason), reason)
		}, wait, tick)
	}
}

// A canary not updated and Ready within canaryWatchTime is restarted retryCount times, then the
// StatefulSet is marked stale: Stale=True/CanaryFailed, Stalled, the partition frozen at replicas -
// canaries. The next template change starts over.
func TestInPlaceCanaryFailureFreezesThePartition(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	ests := f.inPlaceESTS(3, "app:1")
	ests.Spec.UpdateStrategy.CanaryWatchTime = &metav1.Duration{Duration: 2 * time.Second}
	ests.Spec.UpdateStrategy.RetryCount = 1
	f.settleInPlace(ests)

	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.Template.Spec.Template.Spec.Containers[0].Image = "app:broken"
	})
	f.waitPartition(2, extendedv1alpha1.PhaseCanary)
	f.replacePod(2, "r2", false)
	f.ipStatus("r1", "r2", 2, 1)

	// The retry deletes the canary (held by the test's finalizer, as a kubelet would while it stops).
	require.Eventually(t, func() bool {
		p := &corev1.Pod{}
		err := suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "web-2"}, p)
		return err == nil && !p.DeletionTimestamp.IsZero()
	}, wait, tick, "the canary restarted")
	f.waitIP(func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, "1", sts.Annotations[extendedv1alpha1.CanaryRetriesAnnotation])
	}, "one retry")
	f.replacePod(2, "r2", false)
	f.ipStatus("r1", "r2", 2, 1)

	f.waitCondition(extendedv1alpha1.ConditionStale, metav1.ConditionTrue, extendedv1alpha1.ReasonCanaryFailed)
	f.waitCondition(extendedv1alpha1.ConditionStalled, metav1.ConditionTrue, extendedv1alpha1.ReasonCanaryFailed)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionFalse, extendedv1alpha1.ReasonCanaryFailed)
	sts := f.waitIP(func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, "true", sts.Annotations[extendedv1alpha1.StaleAnnotation])
	}, "annotated stale")
	assert.Equal(t, int32(2), partition(sts), "the partition is frozen")
	assert.Equal(t, int32(3), ptr.Deref(sts.Spec.Replicas, 0), "in place, a stale StatefulSet keeps serving")
	assert.Contains(t, conditionOf(f.get(), extendedv1alpha1.ConditionStale).Message, "partition frozen at 2: ordinals below it keep running version 1")
	assert.Equal(t, int32(1), f.get().Status.CurrentVersion)
	// Frozen: even the canary becoming Ready later moves nothing.
	f.replacePod(2, "r2", true)
	f.ipStatus("r1", "r2", 3, 1)
	testsupport.NeverWithin(t, time.Second, 50*time.Millisecond, func() bool { return partition(f.ipSTS()) != 2 }, "a stale partition moved")

	// A fix starts over from replicas - canaries, with the next version.
	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.Template.Spec.Template.Spec.Containers[0].Image = "app:3"
	})
	sts = f.waitIP(func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, "3", sts.Annotations[extendedv1alpha1.VersionAnnotation])
	}, "version 3")
	assert.Empty(t, sts.Annotations[extendedv1alpha1.StaleAnnotation])
	assert.Equal(t, int32(2), partition(sts))
	assert.Equal(t, extendedv1alpha1.PhaseCanary, sts.Annotations[extendedv1alpha1.PhaseAnnotation])
	assert.Equal(t, "app:3", sts.Spec.Template.Spec.Containers[0].Image)
	assert.Equal(t, "0", sts.Annotations[extendedv1alpha1.CanaryRetriesAnnotation])
	f.waitCondition(extendedv1alpha1.ConditionStale, metav1.ConditionFalse, "")
	f.onlyInPlaceSTS()
}

// The state of an in-place update is the StatefulSet's: an operator stopped mid-rollout and a new one
// go on where it was, without starting over.
func TestInPlaceResumesAfterOperatorRestart(t *testing.T) {
	op := startOperator(t, nil)
	f := newFixture(t)
	f.settleInPlace(f.inPlaceESTS(3, "app:1"))
	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.Template.Spec.Template.Spec.Containers[0].Image = "app:2"
	})
	f.waitPartition(2, extendedv1alpha1.PhaseCanary)
	f.replacePod(2, "r2", true)
	f.ipStatus("r1", "r2", 3, 1)
	f.waitPartition(1, extendedv1alpha1.PhaseRollout)
	op.stop()

	// While no operator runs, ordinal 1 is updated.
	f.replacePod(1, "r2", true)
	f.ipStatus("r1", "r2", 3, 2)
	startOperator(t, nil)
	f.waitPartition(0, extendedv1alpha1.PhaseRollout)
	f.replacePod(0, "r2", true)
	f.ipStatus("r2", "r2", 3, 3)
	f.waitPartition(0, extendedv1alpha1.PhaseDone)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, extendedv1alpha1.ReasonReconciled)
	sts := f.ipSTS()
	assert.Equal(t, "2", sts.Annotations[extendedv1alpha1.VersionAnnotation], "no new version after the restart")
	assert.Equal(t, "2", sts.Annotations[extendedv1alpha1.CurrentVersionAnnotation])
	assert.Len(t, testsupport.Events(t, suite.Client, f.ns, "ExtendedStatefulSet", f.name, extendedv1alpha1.EventInPlaceUpdate), 1,
		"the update was started once")
}

// The default stays the versioned upgrade: an object without spec.updateStrategy.type gets Versioned,
// a StatefulSet web-v1 whose selector carries the version, and a template change makes web-v2.
func TestInPlaceDefaultIsVersioned(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	f.create(f.newESTS(2, "app:1"))
	assert.Equal(t, extendedv1alpha1.VersionedUpdateStrategy, f.get().Spec.UpdateStrategy.Type)
	sts := f.waitSTS(1, func(*assert.CollectT, *appsv1.StatefulSet) {}, "version 1")
	assert.Equal(t, "1", sts.Spec.Selector.MatchLabels[extendedv1alpha1.VersionLabel])
	f.setStatus(1, 2)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, extendedv1alpha1.ReasonReconciled)
	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.Template.Spec.Template.Spec.Containers[0].Image = "app:2"
	})
	f.waitSTS(2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, "app:2", sts.Spec.Template.Spec.Containers[0].Image)
	}, "version 2 is a new StatefulSet")
	assert.Nil(t, f.ipSTS(), "no in-place StatefulSet")
	assert.Equal(t, "app:1", f.sts(1).Spec.Template.Spec.Containers[0].Image, "version 1 is untouched")
}

// conditionOf returns the ExtendedStatefulSet's condition of that type (an empty one when missing).
func conditionOf(ests *extendedv1alpha1.ExtendedStatefulSet, t string) metav1.Condition {
	for _, c := range ests.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return metav1.Condition{}
}

// A storage-only change after an in-place template change that also grew storage is no template change:
// the StatefulSet's claim templates keep their creation size (in place never rewrites them), so the
// check compares with the storage the template hash was computed with. No roll: the version stays, the
// partition stays 0, every pod is the one that was there.
func TestInPlaceStorageOnlyAfterTemplateChangeDoesNotRoll(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	ests := f.inPlaceESTS(2, "app:1")
	ests.Spec.Template.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}}
	f.settleInPlace(ests)

	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.Template.Spec.Template.Spec.Containers[0].Image = "app:2"
		e.Spec.Template.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
	})
	f.waitPartition(1, extendedv1alpha1.PhaseCanary)
	f.replacePod(1, "r2", true)
	f.ipStatus("r1", "r2", 2, 1)
	f.waitPartition(0, extendedv1alpha1.PhaseRollout)
	f.replacePod(0, "r2", true)
	f.ipStatus("r2", "r2", 2, 2)
	sts := f.waitPartition(0, extendedv1alpha1.PhaseDone)
	require.Equal(t, "2", sts.Annotations[extendedv1alpha1.VersionAnnotation])
	q := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]
	require.Equal(t, "1Gi", q.String(), "in place, the StatefulSet's claim templates keep their creation form")
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, extendedv1alpha1.ReasonReconciled)
	pods := map[string]string{}
	for _, name := range []string{f.name + "-0", f.name + "-1"} {
		pod := &corev1.Pod{}
		require.NoError(t, suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, pod))
		pods[name] = string(pod.UID)
	}

	f.setClaimStorage("3Gi")
	want := templateHash(f.get())
	sts = f.waitIP(func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, want, sts.Annotations[extendedv1alpha1.TemplateHashAnnotation], "the StatefulSet carries the new template's hash")
	}, "template hash moved")
	assert.Equal(t, "2", sts.Annotations[extendedv1alpha1.VersionAnnotation], "a storage change makes no new version")
	assert.Equal(t, extendedv1alpha1.PhaseDone, sts.Annotations[extendedv1alpha1.PhaseAnnotation], "no update started")
	assert.Equal(t, int32(0), partition(sts))
	for name, uid := range pods {
		pod := &corev1.Pod{}
		require.NoError(t, suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, pod))
		assert.Equal(t, uid, string(pod.UID), "pod %s is the one that was there", name)
		assert.True(t, pod.DeletionTimestamp.IsZero(), "pod %s not deleted", name)
	}
}

// A template change the in-place StatefulSet cannot take (here a claim template's access modes, with an
// image change) is reported at once and applies nothing, not even the image: Stalled and Ready=False
// with ImmutableInPlace naming the field and the way out, a Warning Event; the StatefulSet keeps
// version 1. Reverting the claim template lets the image change go in place.
func TestInPlaceImmutableFieldIsStalled(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	ests := f.inPlaceESTS(2, "app:1")
	ests.Spec.Template.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}}
	f.settleInPlace(ests)
	before := f.ipSTS()

	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.Template.Spec.Template.Spec.Containers[0].Image = "app:2"
		e.Spec.Template.Spec.VolumeClaimTemplates[0].Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}
	})
	f.waitCondition(extendedv1alpha1.ConditionStalled, metav1.ConditionTrue, extendedv1alpha1.ReasonImmutableInPlace)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionFalse, extendedv1alpha1.ReasonImmutableInPlace)
	msg := f.condition(extendedv1alpha1.ConditionStalled).Message
	assert.Contains(t, msg, "spec.template.spec.volumeClaimTemplates[data]")
	assert.Contains(t, msg, "spec.updateStrategy.type Versioned")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NotEmpty(c, testsupport.Events(t, suite.Client, f.ns, "ExtendedStatefulSet", f.name, extendedv1alpha1.ReasonImmutableInPlace))
	}, wait, tick, "a Warning Event")
	sts := f.ipSTS()
	assert.Equal(t, before.Generation, sts.Generation, "the StatefulSet's spec is untouched")
	assert.Equal(t, "app:1", sts.Spec.Template.Spec.Containers[0].Image)
	assert.Equal(t, "1", sts.Annotations[extendedv1alpha1.VersionAnnotation])
	assert.Equal(t, int32(0), partition(sts))

	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.Template.Spec.VolumeClaimTemplates[0].Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	})
	sts = f.waitPartition(1, extendedv1alpha1.PhaseCanary)
	assert.Equal(t, "app:2", sts.Spec.Template.Spec.Containers[0].Image)
	f.waitCondition(extendedv1alpha1.ConditionStalled, metav1.ConditionFalse, extendedv1alpha1.ReasonReconciled)
}
