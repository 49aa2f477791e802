//go:build e2e

package platform

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
)

// TestClusterIsUsable checks what every other test relies on: the API server serves, the controller
// manager has created the default ServiceAccount and the root CA ConfigMap, and some node is Ready.
func TestClusterIsUsable(t *testing.T) {
	version, err := framework.Clientset.Discovery().ServerVersion()
	require.NoError(t, err)
	t.Logf("server version %s", version.GitVersion)

	_, err = framework.Clientset.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(t.Context(), "default", metav1.GetOptions{})
	require.NoError(t, err)
	_, err = framework.Clientset.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(t.Context(), "kube-root-ca.crt", metav1.GetOptions{})
	require.NoError(t, err)

	nodes, err := framework.Clientset.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	ready := 0
	for _, node := range nodes.Items {
		if framework.NodeCondition(&node, corev1.NodeReady) == corev1.ConditionTrue {
			ready++
		}
	}
	assert.Positive(t, ready, "Ready nodes")
}

// TestDeploymentRollsOut creates a Deployment of 3 replicas, waits for it to be available, changes its
// pod template and waits for the second rollout to replace every pod.
func TestDeploymentRollsOut(t *testing.T) {
	ns := framework.NewNamespace(t)
	deployments := framework.Clientset.AppsV1().Deployments(ns)
	_, err := deployments.Create(t.Context(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: framework.PodTemplate("web"),
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	waitDeploymentRolledOut(t, ns, "web")

	patch := []byte(`{"spec":{"template":{"metadata":{"annotations":{"statefulops.dev/revision":"2"}}}}}`)
	_, err = deployments.Patch(t.Context(), "web", types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
	waitDeploymentRolledOut(t, ns, "web")

	pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=web"})
	require.NoError(t, err)
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp == nil {
			assert.Equal(t, "2", pod.Annotations["statefulops.dev/revision"], "pod %s is from the new template", pod.Name)
		}
	}
}

// waitDeploymentRolledOut waits until the Deployment's latest generation has all replicas updated and
// available and no old replica is left, as `kubectl rollout status` does.
func waitDeploymentRolledOut(t *testing.T, ns, name string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		d, err := framework.Clientset.AppsV1().Deployments(ns).Get(t.Context(), name, metav1.GetOptions{})
		require.NoError(c, err)
		want := *d.Spec.Replicas
		require.GreaterOrEqual(c, d.Status.ObservedGeneration, d.Generation, "observed generation")
		require.Equal(c, want, d.Status.UpdatedReplicas, "updated replicas")
		require.Equal(c, want, d.Status.Replicas, "replicas (old ones gone)")
		require.Equal(c, want, d.Status.AvailableReplicas, "available replicas")
	}, framework.Timeout, framework.Tick, "deployment %s/%s rolled out", ns, name)
}

// TestStatefulSetRollsOut creates a StatefulSet of 3 replicas, waits for all of them to be ready, then
// changes its pod template and waits for the rolling update to replace every pod.
func TestStatefulSetRollsOut(t *testing.T) {
	ns := framework.NewNamespace(t)
	_, err := framework.Clientset.CoreV1().Services(ns).Create(t.Context(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{"app": "db"},
			Ports:     []corev1.ServicePort{{Name: "db", Port: 5432}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	statefulSets := framework.Clientset.AppsV1().StatefulSets(ns)
	_, err = statefulSets.Create(t.Context(), &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To[int32](3),
			ServiceName: "db",
			Selector:    &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Template:    framework.PodTemplate("db"),
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	waitStatefulSetRolledOut(t, ns, "db")
	for i := range 3 {
		pod := framework.GetPod(t, ns, fmt.Sprintf("db-%d", i))
		assert.Equal(t, corev1.ConditionTrue, framework.PodCondition(pod, corev1.PodReady), pod.Name)
	}

	patch := []byte(`{"spec":{"template":{"metadata":{"annotations":{"statefulops.dev/revision":"2"}}}}}`)
	_, err = statefulSets.Patch(t.Context(), "db", types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
	waitStatefulSetRolledOut(t, ns, "db")
	for i := range 3 {
		pod := framework.GetPod(t, ns, fmt.Sprintf("db-%d", i))
		assert.Equal(t, "2", pod.Annotations["statefulops.dev/revision"], "pod %s is from the new template", pod.Name)
	}
}

// waitStatefulSetRolledOut waits until every replica of the StatefulSet's latest revision is ready.
func waitStatefulSetRolledOut(t *testing.T, ns, name string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s, err := framework.Clientset.AppsV1().StatefulSets(ns).Get(t.Context(), name, metav1.GetOptions{})
		require.NoError(c, err)
		want := *s.Spec.Replicas
		require.GreaterOrEqual(c, s.Status.ObservedGeneration, s.Generation, "observed generation")
		require.Equal(c, want, s.Status.UpdatedReplicas, "updated replicas")
		require.Equal(c, want, s.Status.ReadyReplicas, "ready replicas")
		require.Equal(c, s.Status.UpdateRevision, s.Status.CurrentRevision, "current revision")
	}, framework.Timeout, framework.Tick, "statefulset %s/%s rolled out", ns, name)
}
