package controllerutil

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func newPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
}

// countingClient counts the patches the fake client receives.
func countingClient(t *testing.T, objs ...client.Object) (client.Client, *int) {
	t.Helper()
	n := new(int)
	c := fake.NewClientBuilder().WithObjects(objs...).WithStatusSubresource(&corev1.Pod{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
				*n++
				return c.Patch(ctx, obj, p, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				*n++
				return c.SubResource(sub).Patch(ctx, obj, p, opts...)
			},
		}).Build()
	return c, n
}

func TestPatchStatusWritesOnlyChanges(t *testing.T) {
	ctx := context.Background()
	c, patches := countingClient(t, newPod("p"))
	pod := &corev1.Pod{}
	require.NoError(t, c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "p"}, pod))

	orig := pod.DeepCopy()
	wrote, err := PatchStatus(ctx, c, pod, orig)
	require.NoError(t, err)
	assert.False(t, wrote, "an unchanged status is not written")
	assert.Equal(t, 0, *patches)

	pod.Status.Phase = corev1.PodRunning
	wrote, err = PatchStatus(ctx, c, pod, orig, WithOptimisticLock())
	require.NoError(t, err)
	assert.True(t, wrote)
	assert.Equal(t, 1, *patches)
	got := &corev1.Pod{}
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), got))
	assert.Equal(t, corev1.PodRunning, got.Status.Phase)

	wrote, err = PatchStatus(ctx, c, pod, pod.DeepCopy(), Force(true))
	require.NoError(t, err)
	assert.True(t, wrote, "Force writes an unchanged status")
	assert.Equal(t, 2, *patches)
}

func TestPatchStatusOptimisticLockConflicts(t *testing.T) {
	ctx := context.Background()
	c, _ := countingClient(t, newPod("p"))
	stale := &corev1.Pod{}
	require.NoError(t, c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "p"}, stale))
	fresh := stale.DeepCopy()
	fresh.Labels = map[string]string{"changed": "by someone else"}
	require.NoError(t, c.Update(ctx, fresh))

	orig := stale.DeepCopy()
	stale.Status.Phase = corev1.PodFailed
	_, err := PatchStatus(ctx, c, stale, orig, WithOptimisticLock())
	require.Error(t, err)
	assert.True(t, apierrors.IsConflict(err), "got %v", err)
	assert.ErrorContains(t, err, "writing the status")
}

func TestPatchStatusIgnoreNotFound(t *testing.T) {
	ctx := context.Background()
	c, _ := countingClient(t)
	gone := newPod("gone")
	orig := gone.DeepCopy()
	gone.Status.Phase = corev1.PodRunning
	_, err := PatchStatus(ctx, c, gone, orig)
	assert.True(t, apierrors.IsNotFound(err), "got %v", err)
	_, err = PatchStatus(ctx, c, gone, orig, IgnoreNotFound())
	assert.NoError(t, err)
}

func TestFinalizer(t *testing.T) {
	ctx := context.Background()
	c, patches := countingClient(t, newPod("p"))
	pod := &corev1.Pod{}
	require.NoError(t, c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "p"}, pod))

	for i, want := range []bool{true, false} {
		wrote, err := EnsureFinalizer(ctx, c, pod, "enge.me/f")
		require.NoError(t, err)
		assert.Equal(t, want, wrote, "call %d", i)
	}
	assert.Equal(t, 1, *patches, "the second EnsureFinalizer does not write")
	got := &corev1.Pod{}
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), got))
	assert.Equal(t, []string{"enge.me/f"}, got.Finalizers)

	for i, want := range []bool{true, false} {
		wrote, err := RemoveFinalizer(ctx, c, pod, "enge.me/f")
		require.NoError(t, err)
		assert.Equal(t, want, wrote, "call %d", i)
	}
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), got))
	assert.Empty(t, got.Finalizers)
}

func TestEnsureFinalizerStaleCopyConflicts(t *testing.T) {
	ctx := context.Background()
	c, _ := countingClient(t, newPod("p"))
	stale := &corev1.Pod{}
	require.NoError(t, c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "p"}, stale))
	fresh := stale.DeepCopy()
	fresh.Labels = map[string]string{"a": "b"}
	require.NoError(t, c.Update(ctx, fresh))
	_, err := EnsureFinalizer(ctx, c, stale, "enge.me/f")
	assert.True(t, apierrors.IsConflict(err), "got %v", err)
}

func TestReadiness(t *testing.T) {
	pod := func(conds ...corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Conditions: conds}}
	}
	assert.False(t, PodReady(pod()))
	assert.Nil(t, PodReadyCondition(pod()))
	assert.False(t, PodReady(pod(corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse})))
	ready := pod(corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
	assert.True(t, PodReady(ready))
	assert.Same(t, &ready.Status.Conditions[1], PodReadyCondition(ready), "the condition itself, not a copy")
	assert.Same(t, &ready.Status.Conditions[0], PodCondition(ready, corev1.PodScheduled))
	assert.Nil(t, PodCondition(ready, corev1.ContainersReady))

	node := func(s corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}, {Type: corev1.NodeReady, Status: s}}}}
	}
	assert.Equal(t, corev1.ConditionStatus(""), NodeReadyStatus(&corev1.Node{}))
	assert.False(t, NodeReady(&corev1.Node{}))
	assert.Equal(t, corev1.ConditionUnknown, NodeReadyStatus(node(corev1.ConditionUnknown)))
	assert.False(t, NodeReady(node(corev1.ConditionUnknown)))
	assert.True(t, NodeReady(node(corev1.ConditionTrue)))
}

func TestTransforms(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u", ResourceVersion: "7", Labels: map[string]string{"zone": "a"},
			Annotations: map[string]string{"big": "x"}, ManagedFields: managed},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "t"}}, PodCIDR: "10.0.0.0/24"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeDiskPressure}, {Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Images: []corev1.ContainerImage{{Names: []string{"img"}}}},
	}
	got, err := SlimNode(node)
	require.NoError(t, err)
	assert.Equal(t, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u", ResourceVersion: "7", Labels: map[string]string{"zone": "a"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "t"}}},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}, got)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "b"}, ManagedFields: managed},
		Spec:       corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	got, err = SlimPod(pod)
	require.NoError(t, err)
	assert.Equal(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "b"}},
		Spec:       corev1.PodSpec{NodeName: "n"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}, got)
	assert.Equal(t, managed, pod.ManagedFields, "the input is not modified")

	got, err = StripManagedFields(pod)
	require.NoError(t, err)
	assert.Nil(t, got.(*corev1.Pod).ManagedFields)
	assert.Equal(t, "10.0.0.1", got.(*corev1.Pod).Status.PodIP)

	tomb := cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: pod}
	for _, tf := range []cache.TransformFunc{SlimNode, SlimPod, StripManagedFields} {
		got, err := tf(tomb)
		require.NoError(t, err)
		assert.Equal(t, tomb, got, "a tombstone stays as it is")
	}
}

func TestNodeToPodOwners(t *testing.T) {
	owned := func(name, node, owner string) *corev1.Pod {
		p := newPod(name)
		p.Spec.NodeName = node
		if owner != "" {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "StatefulSet", Name: owner, Controller: new(true)}}
		}
		return p
	}
	c := fake.NewClientBuilder().
		WithObjects(owned("a-0", "n1", "a"), owned("a-1", "n1", "a"), owned("b-0", "n1", "b"),
			owned("loose", "n1", ""), owned("c-0", "n2", "c")).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		Build()
	owners := func(_ context.Context, pod *corev1.Pod) []reconcile.Request {
		if key, ok := ControllerOfKind(pod, "StatefulSet"); ok {
			return []reconcile.Request{{NamespacedName: key}}
		}
		return nil
	}
	var visited []string
	mapFn := NodeToPodOwners(c, "spec.nodeName", owners, func(_ *corev1.Node, p *corev1.Pod) { visited = append(visited, p.Name) })
	reqs := mapFn(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	assert.ElementsMatch(t, []reconcile.Request{
		{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "a"}},
		{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "b"}},
	}, reqs, "each owner once, only the node's pods")
	assert.ElementsMatch(t, []string{"a-0", "a-1", "b-0", "loose"}, visited)

	_, ok := ControllerOfKind(owned("x", "n", "a"), "StatefulCluster")
	assert.False(t, ok, "another kind")
}

func TestRegisterMetricsTwice(t *testing.T) {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "controllerutil_test_total", Help: "test"})
	RegisterMetrics(c)
	assert.NotPanics(t, func() { RegisterMetrics(c) }, "the same collector again is a no-op")
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "controllerutil_test_total", Help: "test"})
	assert.Panics(t, func() { RegisterMetrics(other) }, "another collector of the same name")
}

func TestPodHandler(t *testing.T) {
	ctx := context.Background()
	owners := func(_ context.Context, pod *corev1.Pod) []reconcile.Request {
		if key, ok := ControllerOfKind(pod, "StatefulSet"); ok {
			return []reconcile.Request{{NamespacedName: key}}
		}
		return nil
	}
	var seen, gone []string
	h := PodHandler(owners, func(p *corev1.Pod) { seen = append(seen, p.Name) }, func(p *corev1.Pod) { gone = append(gone, p.Name) })
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()

	owned := newPod("a-0")
	owned.OwnerReferences = []metav1.OwnerReference{{Kind: "StatefulSet", Name: "a", Controller: new(true)}}
	h.Create(ctx, event.TypedCreateEvent[*corev1.Pod]{Object: owned}, q)
	h.Update(ctx, event.TypedUpdateEvent[*corev1.Pod]{ObjectOld: newPod("loose"), ObjectNew: newPod("loose")}, q)
	h.Delete(ctx, event.TypedDeleteEvent[*corev1.Pod]{Object: owned}, q)
	assert.Equal(t, []string{"a-0", "loose"}, seen)
	assert.Equal(t, []string{"a-0"}, gone)
	require.Equal(t, 1, q.Len(), "the owner, once (the queue folds repeats)")
	req, _ := q.Get()
	assert.Equal(t, types.NamespacedName{Namespace: "ns", Name: "a"}, req.NamespacedName)

	none := PodHandler(owners, nil, nil)
	assert.NotPanics(t, func() { none.Delete(ctx, event.TypedDeleteEvent[*corev1.Pod]{Object: owned}, q) }, "hooks may be nil")
}
