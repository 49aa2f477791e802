//go:build e2e

package framework

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// PauseImage is the image of every test container: kwok never pulls it, a real node would.
const PauseImage = "registry.k8s.io/pause:3.10.1"

// Polling bounds of the tests: generous timeouts, as timings are not what they assert.
const (
	Timeout = 2 * time.Minute
	Tick    = 200 * time.Millisecond
)

// NewNamespace creates a namespace for one test, waits for its default ServiceAccount (pods cannot
// be created before it exists) and deletes the namespace when the test ends; if the test failed, it
// logs first what the namespace held (dumpOnFailure).
func NewNamespace(t *testing.T) string {
	t.Helper()
	ns, err := Clientset.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		err := Clientset.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
		if !apierrors.IsNotFound(err) { // a test may have deleted it already (ScaleTeardown)
			assert.NoError(t, err)
		}
	})
	dumpOnFailure(t, ns.Name) // runs before the namespace's deletion (cleanups run last first)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := Clientset.CoreV1().ServiceAccounts(ns.Name).Get(t.Context(), "default", metav1.GetOptions{})
		assert.NoError(c, err)
	}, Timeout, Tick)
	return ns.Name
}

// TestPod is a pod running one pause container.
func TestPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: PauseImage}}},
	}
}

// PodTemplate is the pod template of test workloads labelled app=name.
func PodTemplate(name string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: PauseImage}}},
	}
}

// CreatePod creates the pod and waits until it is Running.
func CreatePod(t *testing.T, ns string, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	_, err := Clientset.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
	require.NoError(t, err)
	var running *corev1.Pod
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := Clientset.CoreV1().Pods(ns).Get(t.Context(), pod.Name, metav1.GetOptions{})
		require.NoError(c, err)
		require.Equal(c, corev1.PodRunning, p.Status.Phase)
		running = p
	}, Timeout, Tick, "pod %s/%s running", ns, pod.Name)
	return running
}

// GetPod returns the pod, failing the test on any error. Only for the test's own goroutine: the
// conditions of Eventually and Never run on another one, and use FetchPod.
func GetPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	pod, err := FetchPod(t, ns, name)
	require.NoError(t, err)
	return pod
}

// FetchPod returns the pod.
func FetchPod(t *testing.T, ns, name string) (*corev1.Pod, error) {
	return Clientset.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
}

// PodGone reports whether the pod no longer exists.
func PodGone(t *testing.T, ns, name string) bool {
	_, err := Clientset.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// PodCondition returns the status of the pod's condition of that type, "" when it has none.
func PodCondition(pod *corev1.Pod, conditionType corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range pod.Status.Conditions {
		if c.Type == conditionType {
			return c.Status
		}
	}
	return ""
}

// PodConditionReason returns the reason of the pod's condition of that type, "" when it has none.
func PodConditionReason(pod *corev1.Pod, conditionType corev1.PodConditionType) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == conditionType {
			return c.Reason
		}
	}
	return ""
}

// NodeCondition returns the status of the node's condition of that type, "" when it has none.
func NodeCondition(node *corev1.Node, conditionType corev1.NodeConditionType) corev1.ConditionStatus {
	for _, c := range node.Status.Conditions {
		if c.Type == conditionType {
			return c.Status
		}
	}
	return ""
}

// WatchPods calls fn for every pod of ns ("" for all namespaces) matching selector, listed, then for
// every watch event, in order. The watch resumes from the last resourceVersion when the API server
// closes it (it does with a watcher that falls behind on a loaded machine, e.g. during a 500-pod
// scale-up), so no event is lost. It stops when the test ends.
func WatchPods(t *testing.T, ns, selector string, fn func(watch.EventType, *corev1.Pod)) {
	t.Helper()
	list, err := Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: selector})
	require.NoError(t, err)
	for i := range list.Items {
		fn(watch.Added, &list.Items[i])
	}
	w, err := watchtools.NewRetryWatcherWithContext(t.Context(), list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			options.LabelSelector = selector
			return Clientset.CoreV1().Pods(ns).Watch(ctx, options)
		},
	})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok {
				fn(ev.Type, pod)
			}
		}
	}()
}
