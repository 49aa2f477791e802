//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// pauseImage is the image of every test container: kwok never pulls it, a real node would.
const pauseImage = "registry.k8s.io/pause:3.10.1"

// Polling bounds of the tests: generous timeouts, as timings are not what they assert.
const (
	timeout = 2 * time.Minute
	tick    = 200 * time.Millisecond
)

// newNamespace creates a namespace for one test, waits for its default ServiceAccount (pods cannot
// be created before it exists) and deletes the namespace when the test ends.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns, err := client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		err := client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
		assert.NoError(t, err)
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := client.CoreV1().ServiceAccounts(ns.Name).Get(t.Context(), "default", metav1.GetOptions{})
		assert.NoError(c, err)
	}, timeout, tick)
	return ns.Name
}

// testPod is a pod running one pause container.
func testPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: pauseImage}}},
	}
}

// podTemplate is the pod template of test workloads labelled app=name.
func podTemplate(name string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: pauseImage}}},
	}
}

// createPod creates the pod and waits until it is Running.
func createPod(t *testing.T, ns string, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	_, err := client.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
	require.NoError(t, err)
	var running *corev1.Pod
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := client.CoreV1().Pods(ns).Get(t.Context(), pod.Name, metav1.GetOptions{})
		require.NoError(c, err)
		require.Equal(c, corev1.PodRunning, p.Status.Phase)
		running = p
	}, timeout, tick, "pod %s/%s running", ns, pod.Name)
	return running
}

// getPod returns the pod, failing the test on any error. Only for the test's own goroutine: the
// conditions of Eventually and Never run on another one, and use fetchPod.
func getPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	pod, err := fetchPod(t, ns, name)
	require.NoError(t, err)
	return pod
}

// fetchPod returns the pod.
func fetchPod(t *testing.T, ns, name string) (*corev1.Pod, error) {
	return client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
}

// podGone reports whether the pod no longer exists.
func podGone(t *testing.T, ns, name string) bool {
	_, err := client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// podCondition returns the status of the pod's condition of that type, "" when it has none.
func podCondition(pod *corev1.Pod, conditionType corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range pod.Status.Conditions {
		if c.Type == conditionType {
			return c.Status
		}
	}
	return ""
}

// podConditionReason returns the reason of the pod's condition of that type, "" when it has none.
func podConditionReason(pod *corev1.Pod, conditionType corev1.PodConditionType) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == conditionType {
			return c.Reason
		}
	}
	return ""
}

// nodeCondition returns the status of the node's condition of that type, "" when it has none.
func nodeCondition(node *corev1.Node, conditionType corev1.NodeConditionType) corev1.ConditionStatus {
	for _, c := range node.Status.Conditions {
		if c.Type == conditionType {
			return c.Status
		}
	}
	return ""
}
