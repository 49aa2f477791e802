//go:build e2e

package cluster

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
	"github.com/statefulops/statefulops/e2e/realnode"
	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
)

// TestReinstallRunsOnTheRealNode re-installs one operator with the README's own commands,
// `kubectl delete -f deploy/cluster-operator.yaml` (until everything is gone, its namespace too) and
// `kubectl apply -f deploy/cluster-operator.yaml`: the recreated namespace is steered to the real node
// by the cluster itself (localcluster.RealNodeNamespaces), so the operator's pod runs there for real
// (a containerd container, Ready, no restart), wins the leader election, and a StatefulCluster with a
// claim per pod becomes Ready through it. The Deployment's replicas are put back as they were found.
func TestReinstallRunsOnTheRealNode(t *testing.T) {
	if !framework.NeedRealNode(t) {
		return
	}
	framework.Install(t)
	const name, namespace = "cluster-operator", "cluster-operator-system"
	deploy := name + "-controller-manager"
	root, err := localcluster.RepoRoot()
	require.NoError(t, err)
	manifest := filepath.Join(root, "deploy", name+".yaml")

	d, err := framework.Clientset.AppsV1().Deployments(namespace).Get(t.Context(), deploy, metav1.GetOptions{})
	require.NoError(t, err)
	replicasFound := *d.Spec.Replicas
	// `kubectl delete -f` deletes the CRD, hence every StatefulCluster, while it deletes the operator
	// that would remove their finalizers: deleted first, through the running operator, so nothing
	// waits forever (on a cluster shared with `make run`, its demo StatefulCluster goes too).
	_, err = framework.Kubectl().Run(t.Context(), "delete", "statefulclusters", "--all", "-A", "--wait=true", "--timeout=120s")
	require.NoError(t, err, "StatefulClusters left by earlier tests or the demo")

	start := time.Now()
	_, err = framework.Kubectl().Run(t.Context(), "delete", "-f", manifest, "--wait=true", "--timeout=180s")
	require.NoError(t, err, "kubectl delete -f deploy/%s.yaml", name)
	require.Eventually(t, func() bool {
		_, err := framework.Clientset.CoreV1().Namespaces().Get(t.Context(), namespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, 2*framework.Timeout, framework.Tick, "namespace %s gone", namespace)
	t.Logf("kubectl delete -f deploy/%s.yaml: everything gone in %s", name, time.Since(start).Round(time.Millisecond))

	start = time.Now()
	_, err = framework.Kubectl().Run(t.Context(), "apply", "-f", manifest)
	require.NoError(t, err, "kubectl apply -f deploy/%s.yaml", name)
	_, err = framework.Kubectl().Run(t.Context(), "wait", "--for=condition=Established", "--timeout=60s", "crd/statefulclusters.enge.me")
	require.NoError(t, err)
	_, err = framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", namespace, "deployment/"+deploy, "--timeout=180s")
	require.NoError(t, err)
	pods, err := framework.Clientset.CoreV1().Pods(namespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name + ",control-plane=controller-manager"})
	require.NoError(t, err)
	require.Len(t, pods.Items, 1)
	pod := pods.Items[0]
	assert.Equal(t, realnode.NodeName, pod.Spec.NodeName, "the recreated namespace is steered to the real node")
	assert.Equal(t, realnode.LabelValue, pod.Spec.NodeSelector[realnode.LabelKey], "nodeSelector added by the cluster's admission policy")
	assert.Equal(t, corev1.ConditionTrue, framework.PodCondition(&pod, corev1.PodReady))
	require.Len(t, pod.Status.ContainerStatuses, 1)
	cs := pod.Status.ContainerStatuses[0]
	require.NotNil(t, cs.State.Running, "container running")
	assert.True(t, strings.HasPrefix(cs.ContainerID, "containerd://"), "a real container under the real kubelet: %s", cs.ContainerID)
	assert.Equal(t, int32(0), cs.RestartCount, "no restart")
	t.Logf("kubectl apply -f deploy/%s.yaml: pod %s Ready on %s in %s (%s, restarts %d)",
		name, pod.Name, pod.Spec.NodeName, time.Since(start).Round(time.Millisecond), cs.ContainerID[:25], cs.RestartCount)

	require.Eventually(t, func() bool {
		leases, err := framework.Clientset.CoordinationV1().Leases(namespace).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, l := range leases.Items {
			if l.Spec.HolderIdentity != nil && strings.HasPrefix(*l.Spec.HolderIdentity, pod.Name) {
				return true
			}
		}
		return false
	}, framework.Timeout, framework.Tick, "the re-installed operator's pod %s leads", pod.Name)

	ns := framework.NewNamespace(t)
	sc := framework.NewStatefulCluster("after-reinstall", 2)
	withDataClaim(sc)
	createStatefulCluster(t, ns, sc)
	start = time.Now()
	waitStatefulClusterReady(t, ns, "after-reinstall", 2, framework.Timeout)
	t.Logf("StatefulCluster with 2 claimed pods Ready through the re-installed operator in %s", time.Since(start).Round(time.Millisecond))
	require.NoError(t, framework.Client.Delete(t.Context(), &clusterv1alpha1.StatefulCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "after-reinstall"}}))
	require.Eventually(t, func() bool { return getStatefulCluster(t, ns, "after-reinstall") == nil }, framework.Timeout, framework.Tick,
		"StatefulCluster deleted through the re-installed operator (finalizer removed)")

	got, err := framework.Clientset.CoreV1().Pods(namespace).Get(t.Context(), pod.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(0), got.Status.ContainerStatuses[0].RestartCount, "no restart while it worked")
	if replicasFound != 1 {
		_, err = framework.Kubectl().Run(t.Context(), "scale", "-n", namespace, "deployment/"+deploy, "--replicas="+strconv.Itoa(int(replicasFound)))
		require.NoError(t, err)
	}
}
