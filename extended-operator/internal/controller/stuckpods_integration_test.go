//go:build integration

package controller

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// holdFinalizer keeps a deleted pod terminating until the test lets it go, as a kubelet would while
// the pod shuts down.
const holdFinalizer = "test.statefulops/hold"

// ES-07: a configuration roll whose StatefulSet is stuck behind pods that are not Ready on the old
// revision (the StatefulSet controller waits for them for ever, kubernetes/kubernetes#67250). Without
// updateNotReady nothing is deleted; with it, the highest-ordinal stuck pod created before the update
// revision is deleted, then, once it is gone (and back on the new revision, still not Ready), the next
// one; never two at a time, never a Ready pod, never a pod already on the update revision.
func TestUpdateNotReadyRecreatesAStuckPod(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	f.create(f.confESTS(3, "0"))
	sts := f.waitSTS(1, func(*assert.CollectT, *appsv1.StatefulSet) {}, "version 1")
	f.revision(sts, "r1")
	f.stsPod(sts, 0, "r1", true)
	f.stsPod(sts, 1, "r1", false) // crash-looping on the old template
	f.stsPod(sts, 2, "r1", false)
	f.rollStatus(sts.Name, "r1", "r1", 1)
	t.Cleanup(func() { f.releasePods() })

	// The configuration changes: the operator rolls the pods; the StatefulSet controller would make a
	// new revision and then wait for pods 1 and 2 for ever.
	time.Sleep(1100 * time.Millisecond) // the revision's creationTimestamp (seconds) after the pods'
	oldHash := sts.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation]
	require.NoError(t, suite.Client.Update(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "conf", Namespace: f.ns}, Data: map[string]string{"k": "1"}}))
	sts = f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.NotEqual(c, oldHash, sts.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation])
	}, "config roll")
	f.revision(sts, "r2")
	f.rollStatus(sts.Name, "r1", "r2", 1)

	terminating := func(name string) bool {
		p := &corev1.Pod{}
		err := suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, p)
		return apierrors.IsNotFound(err) || (err == nil && !p.DeletionTimestamp.IsZero())
	}
	anyTerminating := func() bool { return terminating("web-v1-0") || terminating("web-v1-1") || terminating("web-v1-2") }
	testsupport.NeverWithin(t, 2*time.Second, 50*time.Millisecond, anyTerminating, "a pod deleted without updateNotReady")

	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) { e.Spec.UpdateStrategy.UpdateNotReady = true })
	require.Eventually(t, func() bool { return terminating("web-v1-2") }, wait, tick, "the highest stuck pod deleted")
	assert.Nil(t, f.sts(2), "updateNotReady made no new version")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		evs := testsupport.Events(t, suite.Client, f.ns, "ExtendedStatefulSet", f.name, extendedv1alpha1.EventStuckPodRecreated)
		if assert.Len(c, evs, 1) {
			assert.Contains(c, evs[0].Note, "Pod web-v1-2 is not Ready on revision r1")
		}
	}, wait, tick)
	// One at a time: pod 1 stays while pod 2 terminates, however often the operator looks.
	f.rollStatus(sts.Name, "r1", "r2", 1)
	testsupport.NeverWithin(t, 2*time.Second, 50*time.Millisecond, func() bool { return terminating("web-v1-1") }, "two pods deleted at once")

	// Pod 2 goes and comes back on the new revision, still not Ready: it is left alone, pod 1 goes next.
	f.release("web-v1-2")
	f.stsPod(sts, 2, "r2", false)
	f.rollStatus(sts.Name, "r1", "r2", 1)
	require.Eventually(t, func() bool { return terminating("web-v1-1") }, wait, tick, "the next stuck pod deleted")
	f.release("web-v1-1")
	f.stsPod(sts, 1, "r2", false)
	f.rollStatus(sts.Name, "r1", "r2", 1)
	testsupport.NeverWithin(t, 2*time.Second, 50*time.Millisecond, anyTerminating,
		"a Ready pod, or a pod on the update revision, deleted")
}

// ES-07 after a revert: a configuration change whose new pod crash-loops, then the configuration set
// back. The StatefulSet controller reuses the first revision's ControllerRevision (its number raised,
// its creation time older than the stuck pod) so its update and current revisions are equal again,
// while pod 1 crash-loops on the reverted-from revision and is never replaced
// (kubernetes/kubernetes#67250). While the bad revision is the update revision the pod is left alone;
// after the revert, with updateNotReady, the operator deletes it, once.
func TestUpdateNotReadyRecreatesAStuckPodAfterARevert(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	ests := f.confESTS(2, "0")
	ests.Spec.UpdateStrategy.UpdateNotReady = true
	f.create(ests)
	sts := f.waitSTS(1, func(*assert.CollectT, *appsv1.StatefulSet) {}, "version 1")
	goodHash := sts.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation]
	f.revision(sts, "r1")
	f.stsPod(sts, 0, "r1", true)
	f.stsPod(sts, 1, "r1", true)
	f.rollStatus(sts.Name, "r1", "r1", 2)
	t.Cleanup(func() { f.releasePods() })
	setConf := func(value string) {
		require.NoError(t, suite.Client.Update(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "conf", Namespace: f.ns}, Data: map[string]string{"k": value}}))
	}

	// The bad configuration: the StatefulSet controller replaces pod 1, which crash-loops on r2.
	setConf("1")
	sts = f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.NotEqual(c, goodHash, sts.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation])
	}, "config roll")
	f.revision(sts, "r2")
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-v1-1", Namespace: f.ns}}
	require.NoError(t, suite.Client.Delete(t.Context(), old))
	f.release("web-v1-1")
	f.stsPod(sts, 1, "r2", false)
	f.rollStatus(sts.Name, "r1", "r2", 1)
	stuck := &corev1.Pod{}
	require.NoError(t, suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "web-v1-1"}, stuck))
	gone := func() bool {
		p := &corev1.Pod{}
		err := suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "web-v1-1"}, p)
		return apierrors.IsNotFound(err) || (err == nil && (p.UID != stuck.UID || !p.DeletionTimestamp.IsZero()))
	}
	testsupport.NeverWithin(t, 2*time.Second, 50*time.Millisecond, gone, "a pod on the update revision deleted")

	// The revert: r1 is the update revision again, its ControllerRevision older than the stuck pod.
	setConf("0")
	sts = f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, goodHash, sts.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation])
	}, "config reverted")
	f.reuseRevision("r1", 3)
	f.rollStatus(sts.Name, "r1", "r1", 1)
	require.Eventually(t, gone, wait, tick, "the stuck pod deleted after the revert")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		evs := testsupport.Events(t, suite.Client, f.ns, "ExtendedStatefulSet", f.name, extendedv1alpha1.EventStuckPodRecreated)
		if assert.Len(c, evs, 1) {
			assert.Contains(c, evs[0].Note, "Pod web-v1-1 is not Ready on revision r2")
		}
	}, wait, tick)

	// It comes back on r1 and gets Ready: nothing more is deleted.
	f.release("web-v1-1")
	f.stsPod(sts, 1, "r1", true)
	f.rollStatus(sts.Name, "r1", "r1", 2)
	testsupport.NeverWithin(t, 2*time.Second, 50*time.Millisecond, func() bool {
		p := &corev1.Pod{}
		err := suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "web-v1-1"}, p)
		return apierrors.IsNotFound(err) || !p.DeletionTimestamp.IsZero()
	}, "a pod deleted once the roll is over")
}

// confESTS creates ConfigMap "conf" with k=value and returns an ExtendedStatefulSet of replicas pods of
// app:1 whose container takes its environment from it.
func (f *fixture) confESTS(replicas int32, value string) *extendedv1alpha1.ExtendedStatefulSet {
	f.t.Helper()
	require.NoError(f.t, suite.Client.Create(f.t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "conf", Namespace: f.ns}, Data: map[string]string{"k": value}}))
	ests := f.newESTS(replicas, "app:1")
	ests.Spec.Template.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{
		ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}}}
	return ests
}

// revision creates the StatefulSet's ControllerRevision of that name, as the StatefulSet controller
// would when its template changes.
func (f *fixture) revision(sts *appsv1.StatefulSet, name string) {
	f.t.Helper()
	require.NoError(f.t, suite.Client.Create(f.t.Context(), &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID, Controller: ptr.To(true)}}},
		Data:     runtime.RawExtension{Raw: []byte(`{}`)},
		Revision: revisionNumber(f.t, name),
	}))
}

// revisionNumber is N of a revision named rN.
func revisionNumber(t *testing.T, name string) int64 {
	n, err := strconv.ParseInt(strings.TrimPrefix(name, "r"), 10, 64)
	require.NoError(t, err, "revision name %q", name)
	return n
}

// reuseRevision plays the StatefulSet controller's answer to a template reverted to the one of
// ControllerRevision name: it raises that revision's number to n and keeps its creation time.
func (f *fixture) reuseRevision(name string, n int64) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rev := &appsv1.ControllerRevision{}
		if err := suite.Client.Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, rev); err != nil {
			return err
		}
		rev.Revision = n
		return suite.Client.Update(f.t.Context(), rev)
	}))
}

// stsPod creates the pod of the StatefulSet with that ordinal on that revision, as its controller would,
// held by holdFinalizer, Ready or not.
func (f *fixture) stsPod(sts *appsv1.StatefulSet, ordinal int, revision string, ready bool) {
	f.t.Helper()
	labels := mergeMaps(sts.Spec.Template.Labels, map[string]string{appsv1.ControllerRevisionHashLabelKey: revision})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", sts.Name, ordinal), Namespace: f.ns, Labels: labels,
			Finalizers: []string{holdFinalizer},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "app:1"}}},
	}
	require.NoError(f.t, suite.Client.Create(f.t.Context(), pod))
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
	require.NoError(f.t, suite.Client.Status().Update(f.t.Context(), pod))
}

// rollStatus plays the StatefulSet controller's status during a roll from current to update revision.
func (f *fixture) rollStatus(name, current, update string, ready int32) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sts := &appsv1.StatefulSet{}
		if err := suite.Client.Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, sts); err != nil {
			return err
		}
		n := ptr.Deref(sts.Spec.Replicas, 1)
		sts.Status = appsv1.StatefulSetStatus{
			ObservedGeneration: sts.Generation, Replicas: n, ReadyReplicas: ready, AvailableReplicas: ready,
			CurrentReplicas: n, CurrentRevision: current, UpdateRevision: update,
			// A new field value on every call, so that each is an update event.
			CollisionCount: ptr.To(ptr.Deref(sts.Status.CollisionCount, 0) + 1),
		}
		return suite.Client.Status().Update(f.t.Context(), sts)
	}))
}

// release removes holdFinalizer from a pod (a deleted one is then gone).
func (f *fixture) release(name string) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &corev1.Pod{}
		if err := suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, p); err != nil {
			return client.IgnoreNotFound(err)
		}
		p.Finalizers = nil
		return suite.Client.Update(context.Background(), p)
	}))
	require.Eventually(f.t, func() bool {
		p := &corev1.Pod{}
		err := suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, p)
		return apierrors.IsNotFound(err) || p.DeletionTimestamp.IsZero()
	}, wait, tick)
}

// releasePods removes holdFinalizer from every pod of the namespace, so that it can be deleted.
func (f *fixture) releasePods() {
	var pods corev1.PodList
	if err := suite.Client.List(context.Background(), &pods, client.InNamespace(f.ns)); err != nil {
		return
	}
	for _, p := range pods.Items {
		f.release(p.Name)
	}
}
