//go:build integration

package podreaper

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The local cluster's selector of the nodes kwok simulates (localcluster.kwokManagedNodes).
const kwokNodes = "type=kwok,statefulops.dev/kwok-node-ready!=false"

const (
	within = 30 * time.Second // a liveness bound: the reaper reacts to watch events within milliseconds
	tick   = 50 * time.Millisecond
)

// TestReaper runs the reaper against a real API server (envtest: no kubelet, no controllers), with a
// node it reaps, a kwok node taken away (NotReady) and a node kwok does not simulate.
func TestReaper(t *testing.T) {
	env := &envtest.Environment{}
	cfg, err := env.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := t.Context()

	const ns = "reap"
	_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	for name, labels := range map[string]map[string]string{
		"kwok-0":    {"type": "kwok"},
		"kwok-away": {"type": "kwok", "statefulops.dev/kwok-node-ready": "false"},
		"real":      {},
	} {
		_, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	r, err := New(client, kwokNodes)
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx, 2) }()
	t.Cleanup(func() {
		stop()
		assert.NoError(t, <-done)
	})

	createPod := func(t *testing.T, name, node string) *corev1.Pod {
		t.Helper()
		pod, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{TerminatingSecondsAnnotation: "0"}},
			Spec: corev1.PodSpec{
				NodeName:                     node,
				AutomountServiceAccountToken: ptr.To(false),
				Containers:                   []corev1.Container{{Name: "app", Image: "app"}},
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		return pod
	}
	// deleted deletes a pod gracefully, as the StatefulSet controller and the operators do, and returns
	// it as it is then: Terminating, its grace period running.
	deleted := func(t *testing.T, pod *corev1.Pod) *corev1.Pod {
		t.Helper()
		require.NoError(t, client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}}))
		got, err := client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		require.NoError(t, err)
		require.NotNil(t, got.DeletionTimestamp, "a pod bound to a node is deleted gracefully")
		return got
	}
	gone := func(name string) bool {
		_, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}

	// The double delete of issue 21: the pod is removed, the StatefulSet controller makes it again under
	// the same name, and then a second run of the removal for the old pod comes in, late. With kwok's
	// Stage that second run deleted by name and removed the new pod. The late run here is the reaper's
	// whole decision path with a view of the cluster from before the removal (a stale cache, a queued
	// duplicate, a retry).
	t.Run("a late second removal spares the new pod of the same name", func(t *testing.T) {
		old := deleted(t, createPod(t, "web-0", "kwok-0"))
		require.Eventually(t, func() bool { return gone("web-0") }, within, tick, "the reaper removes a deleted pod once due")
		replacement := createPod(t, "web-0", "kwok-0")

		late, err := New(client, kwokNodes) // not running: its cache is what this test puts in
		require.NoError(t, err)
		node, err := client.CoreV1().Nodes().Get(ctx, "kwok-0", metav1.GetOptions{})
		require.NoError(t, err)
		require.NoError(t, late.factory.Core().V1().Nodes().Informer().GetIndexer().Add(node))
		require.NoError(t, late.factory.Core().V1().Pods().Informer().GetIndexer().Add(old))
		wait, err := late.reap(ctx, podRef{ns, "web-0", old.UID})
		require.NoError(t, err)
		assert.Zero(t, wait, "the old pod was due, so the late run sent its delete")

		got, err := client.CoreV1().Pods(ns).Get(ctx, "web-0", metav1.GetOptions{})
		require.NoError(t, err, "the new pod survives the late delete")
		assert.Equal(t, replacement.UID, got.UID)
		assert.Nil(t, got.DeletionTimestamp)

		// The same late delete without the UID precondition, as kwok's Stage sends it, removes the new
		// pod: what the campaign counted as spurious restarts.
		require.NoError(t, client.CoreV1().Pods(ns).Delete(ctx, "web-0", *metav1.NewDeleteOptions(0)))
		assert.True(t, gone("web-0"))
	})

	// A node kwok does not simulate (the real node, or a kwok node while NotReady) has nobody to stop a
	// deleted pod's containers: the pod stays Terminating. A kwok node coming back removes its pods.
	t.Run("only the pods of simulated nodes", func(t *testing.T) {
		away := deleted(t, createPod(t, "away-0", "kwok-away"))
		real := deleted(t, createPod(t, "real-0", "real"))
		for _, pod := range []*corev1.Pod{away, real} {
			require.Eventually(t, func() bool {
				cached, err := r.pods.Pods(ns).Get(pod.Name)
				return err == nil && cached.DeletionTimestamp != nil
			}, within, tick, "the reaper has seen %s deleted", pod.Name)
			wait, err := r.reap(ctx, podRef{ns, pod.Name, pod.UID})
			require.NoError(t, err)
			assert.Zero(t, wait, "%s: not waited for, left alone", pod.Name)
			assert.False(t, gone(pod.Name), "%s stays Terminating", pod.Name)
		}

		node, err := client.CoreV1().Nodes().Get(ctx, "kwok-away", metav1.GetOptions{})
		require.NoError(t, err)
		delete(node.Labels, "statefulops.dev/kwok-node-ready")
		_, err = client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return gone("away-0") }, within, tick, "the pods of a node back are removed")
		assert.False(t, gone("real-0"))
	})
}
