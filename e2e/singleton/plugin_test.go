//go:build e2e

package singleton

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// TestPluginFenceRelease runs `kubectl statefulops singleton fence-release` on the scenario of
// TestSingletonFailures' first case: the active pod force-deleted from a NotReady kwok node, its
// successor held (FencingRequired; in Wrapper mode the successor may already be released on the old
// pod's exit, so the node to fence is in its start-on-exit annotation, not status.activePodNode). The verb refuses while the singleton waits on no node and when
// the typed confirmation is not the node's name (the node is left untainted), then taints the node
// out-of-service and returns once the operator released the held pod.
func TestPluginFenceRelease(t *testing.T) {
	if !framework.NeedRealNode(t) {
		return
	}
	framework.Install(t)
	for _, d := range []string{"singleton-operator-controller-manager", framework.WebhookDeployment} {
		_, err := framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", framework.SingletonNamespace, "deployment/"+d, "--timeout=240s")
		require.NoError(t, err)
	}
	ns := newSingletonNamespace(t, singletonv1.HoldModeWrapper)
	watchReleased(t, ns)
	node := localcluster.NodeName(2)
	t.Cleanup(func() {
		setOutOfService(t, node, false)
		assert.NoError(t, localcluster.SetNodeReady(context.Background(), framework.Clientset, node, true))
	})
	a := createSingletonPod(t, ns, node)
	waitPodReleased(t, ns, a)
	fenceRelease := func(stdin string) (string, error) {
		out, err := framework.PluginWithInput(t.Context(), stdin, "singleton", "fence-release", "app", "-n", ns)
		t.Logf("$ kubectl statefulops singleton fence-release app (stdin %q)\n%s%v", stdin, out, err)
		return out, err
	}

	_, err := fenceRelease(node + "\n")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "statefulsingleton/app is not waiting on a node (phase Running")

	require.NoError(t, localcluster.SetNodeReady(t.Context(), framework.Clientset, node, false))
	b := createSingletonPod(t, ns, localcluster.NodeName(0))
	require.NoError(t, framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), a, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, metav1.ConditionTrue, singletonCondition(t, ns, singletonv1.ConditionFencingRequired))
	}, framework.Timeout, framework.Tick, "FencingRequired")

	_, err = fenceRelease("statefulops-kwok-0\n")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `confirmation "statefulops-kwok-0" is not the node's name "`+node+`": nothing was changed`)
	n, err := framework.Clientset.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	require.NoError(t, err)
	for _, taint := range n.Spec.Taints {
		assert.NotEqual(t, corev1.TaintNodeOutOfService, taint.Key, "tainted without confirmation")
	}
	assert.False(t, podReleased(t, ns, b), "still held")

	out, err := fenceRelease(node + "\n")
	require.NoError(t, err)
	normalised := regexp.MustCompile(`after [0-9.]+m?s`).ReplaceAllString(strings.ReplaceAll(strings.ReplaceAll(out, b, "<held>"), a, "<old>"), "after <elapsed>")
	assert.Regexp(t, `^node/`+node+` tainted node.kubernetes.io/out-of-service=nodeshutdown:NoExecute
statefulsingleton/app: pod <held> released after <elapsed> \(epoch [0-9]+, phase Running\); it waited on pod (<old>|of UID [-0-9a-f]+) on node `+node+`
once node `+node+` is back and clean: kubectl taint node `+node+` node.kubernetes.io/out-of-service-
$`, normalised)
	assert.True(t, podReleased(t, ns, b), "released when the command returns")
}
