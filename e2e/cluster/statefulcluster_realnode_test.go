//go:build e2e

package cluster

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
)

// TestStatefulClusterOnTheRealNode: cluster-operator installed from deploy/cluster-operator.yaml runs as
// a real pod on the real node, and so does a StatefulCluster of seed 001's example's shape (three
// replicas, the seed's selector, a 1Gi claim per identity mounted in the container) with the e2e test
// app as its image. One pod's process is killed: the pod goes not Ready, and with
// unhealthyThresholdSeconds 0 its identity is retired at once and replaced by a new one (new name,
// new claim); the old name never comes back. Real containers are needed for a real process to die and
// the kubelet to report it.
func TestStatefulClusterOnTheRealNode(t *testing.T) {
	if !framework.NeedRealNode(t) {
		return
	}
	framework.Install(t)
	_, err := framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", "cluster-operator-system",
		"deployment/cluster-operator-controller-manager", "--timeout=120s")
	require.NoError(t, err)

	ns := framework.NewNamespace(t)
	c := watchIdentities(t, ns, "coder", 3)

	pod := framework.TestAppPod("coder")
	pod.Labels["enge.me/statefulcluster"] = "coder"
	pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "data", MountPath: "/home/coder/project"})
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
	sc := framework.NewStatefulCluster("coder", 3)
	sc.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "coder", "enge.me/statefulcluster": "coder"}}
	sc.Spec.Template = corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec}
	sc.Spec.UnhealthyThresholdSeconds = ptr.To[int32](0)
	withDataClaim(sc)
	createStatefulCluster(t, ns, sc)
	start := time.Now()
	waitStatefulClusterReady(t, ns, "coder", 3, 3*framework.Timeout)
	t.Logf("3 pods of the test app Ready on the real node in %s", time.Since(start).Round(time.Millisecond))

	victim := "coder-1"
	pid := framework.TestAppPID(t, ns, victim)
	killedAt := time.Now()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.Eventually(t, func() bool {
		p, ok := livePods(t, ns, "coder")["coder-3"]
		return ok && framework.PodCondition(p, corev1.PodReady) == corev1.ConditionTrue
	}, 3*framework.Timeout, framework.Tick, "coder-1 replaced by a new identity, coder-3, Ready")
	t.Logf("process of %s killed: replacement coder-3 Ready %s later", victim, time.Since(killedAt).Round(time.Millisecond))
	got := waitStatefulClusterReady(t, ns, "coder", 3, framework.Timeout)
	assert.Equal(t, []string{"coder-0", "coder-2", "coder-3"}, sortedNames(livePods(t, ns, "coder")))
	reason := clusterv1alpha1.RetirementReason("")
	for _, rec := range got.Status.Identities {
		if rec.Name == victim {
			reason = rec.Reason
		}
	}
	assert.Equal(t, clusterv1alpha1.RetiredUnhealthy, reason, "ledger")
	require.Eventually(t, func() bool {
		pvc, err := framework.Clientset.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "coder-data-1", metav1.GetOptions{})
		return err == nil && pvc.Labels[clusterv1alpha1.RetiredLabel] == "true"
	}, framework.Timeout, framework.Tick, "the retired identity's claim is kept (whenReplaced Retain), labelled retired")
	pvc, err := framework.Clientset.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "coder-data-3", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.ClaimBound, pvc.Status.Phase, "the new identity has a new claim")
	names, reuses, _ := c.counts()
	t.Logf("real node: %d pod names created, %d reuses", names, reuses)
}
