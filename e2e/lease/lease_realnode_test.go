//go:build e2e

package lease

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/realnode"
)

// TestLeaseOnTheRealNode: lease-operator installed from deploy/lease-operator.yaml runs as a real pod on
// the real node, and a 3-replica StatefulSet of the e2e test app, with a readiness probe, runs there
// too. The writer's probe is made to fail, then its process is killed: the writer moves each time, the
// checker sees no instant with two writers, and the latency reported runs from the fault (so it
// includes the kubelet's detection) to the new writer's label.
func TestLeaseOnTheRealNode(t *testing.T) {
	if !framework.NeedRealNode(t) {
		return
	}
	framework.Install(t)
	_, err := framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", "lease-operator-system",
		"deployment/lease-operator-controller-manager", "--timeout=120s")
	require.NoError(t, err)

	ns := framework.NewNamespace(t)
	c := watchLease(t, ns)
	c.excludeLatency() // its latencies include the kubelet's probe period: reported here, not in the headline
	createTestAppStatefulSet(t, ns, "app", 3)
	createLock(t, ns, lockSpec{name: "app-lock", statefulSet: "app", lease: "app-lock-lease", duration: 10})
	first := c.waitWriter(t)
	require.Equal(t, "app-0", first, "initial election: lowest ordinal")
	rolesSettled(t, ns)

	// 1. The writer's readiness probe fails (the test app answers /readyz 503 while its file exists).
	notReady := filepath.Join(realnode.RecordDir(framework.RealNode.StateDir), ns+"-"+first+".notready")
	faultAt := time.Now()
	require.NoError(t, os.WriteFile(notReady, nil, 0o644))
	second := c.waitNewWriter(t, first)
	t.Logf("probe failing on %s: new writer %s %s after the fault (kubelet detection included)",
		first, second, time.Since(faultAt).Round(time.Millisecond))
	require.NoError(t, os.Remove(notReady))
	require.Equal(t, second, rolesSettled(t, ns), "the recovered pod stays a reader: the writer is sticky")

	// 2. The writer's process is killed; the kubelet restarts the container, the pod is not Ready meanwhile.
	pid := framework.TestAppPID(t, ns, second)
	faultAt = time.Now()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	third := c.waitNewWriter(t, second)
	t.Logf("process of %s killed: new writer %s %s after the kill (kubelet detection included)",
		second, third, time.Since(faultAt).Round(time.Millisecond))
	rolesSettled(t, ns)
}

// createTestAppStatefulSet runs the test app on the real node as a StatefulSet whose pods turn not ready
// while <record dir>/<namespace>-<pod>.notready exists, and waits until all replicas are Ready.
func createTestAppStatefulSet(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	pod := framework.TestAppPod(name, "--not-ready-file=/records/$(POD_NAMESPACE)-$(POD_NAME).notready")
	pod.Spec.Containers[0].ReadinessProbe.FailureThreshold = 1
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            &replicas,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template:            corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec},
		},
	}
	_, err := framework.Clientset.AppsV1().StatefulSets(ns).Create(t.Context(), sts, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", ns, "statefulset/"+name, "--timeout=120s")
	require.NoError(t, err)
}
