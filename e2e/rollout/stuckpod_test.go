//go:build e2e

package rollout

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
	"github.com/statefulops/statefulops/e2e/operators"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// TestRecreateStuckPodsOnTheRealNode (PR-11): rollout-operator from deploy/rollout-operator.yaml (a
// real pod on the real node) rolls a 2-replica OrderedReady StatefulSet of the test app on the real
// node, with recreateStuckPods and checks against a real Prometheus scraping the app. A bad template
// (the app exits 3 at start): the first pod released, web-1, really crash-loops (the kubelet's
// CrashLoopBackOff) and the rollout holds at partition 1, web-0 on the good revision. The template is
// reverted: the StatefulSet's update revision is the good one again (its ControllerRevision reused),
// and the StatefulSet controller alone would wait for web-1 for ever (kubernetes/kubernetes#67250).
// Once web-1 has not been Ready for progressDeadlineSeconds the operator deletes it, exactly once (a
// watch records every pod deletion), it comes back on the good revision and the rollout is over:
// partition back at replicas, phase Updated.
func TestRecreateStuckPodsOnTheRealNode(t *testing.T) {
	if !framework.NeedRealNode(t) {
		return
	}
	root, err := localcluster.RepoRoot()
	require.NoError(t, err)
	require.NoError(t, operators.Install(t.Context(), framework.Kubectl(), []string{filepath.Join(root, "deploy", "rollout-operator.yaml")}),
		"kubectl apply -f deploy/rollout-operator.yaml")
	_, err = framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", "rollout-operator-system",
		"deployment/rollout-operator-controller-manager", "--timeout=180s")
	require.NoError(t, err)

	ns := framework.NewNamespace(t)
	prom := startPrometheusWith(t, testAppScrapeConfig(t, ns))
	proxy := newRecordingProxyOn(t, prom.url, net.JoinHostPort(bridgeAddress(t), "0"))
	proxyURL, err := url.Parse(proxy.url)
	require.NoError(t, err)

	// OrderedReady: the StatefulSet controller waits for a pod that is not Ready (with Parallel it
	// replaces an outdated pod whatever its state).
	pod := framework.TestAppPod("web")
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](2)
	_, err = framework.Clientset.AppsV1().StatefulSets(ns).Create(t.Context(), &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To[int32](2),
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			PodManagementPolicy: appsv1.OrderedReadyPodManagement,
			Template:            corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", ns, "statefulset/web", "--timeout=120s")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return promSeries(t, prom.url, fmt.Sprintf(`testapp_up{namespace=%q}`, ns)) == 2 },
		framework.Timeout, framework.Tick, "Prometheus scrapes the 2 pods of the test app")

	pw := watchPartition(t, ns, "web")
	const deadline = 5
	expr := `testapp_value{namespace="{{namespace}}",pod="{{pod}}"} > 0 or absent(testapp_up{namespace="{{namespace}}",pod="{{pod}}"})`
	createPhasedRolloutSpec(t, ns, "pr", map[string]any{
		"targetRef":               "web",
		"recreateStuckPods":       true,
		"progressDeadlineSeconds": int64(deadline),
		"check": map[string]any{
			"initialDelaySeconds": int64(1), "periodSeconds": int64(1), "successThreshold": int64(1), "maxTries": int64(4),
			"query": map[string]any{"expr": expr, "url": proxyURL.Host},
		},
	})
	waitRolloutPhase(t, ns, "pr", "Updated")
	waitPartitionValue(t, ns, "web", 2)
	good := stsUpdateRevisionOf(t, ns, "web")
	deletions := framework.RecordPodDeletions(t, ns)
	start := time.Now()

	// 1. The bad template: web-1 is released, crash-loops, and the rollout holds.
	patch := `[{"op":"add","path":"/spec/template/spec/containers/0/env/-","value":{"name":"TESTAPP_CRASH_AT_START","value":"3"}}]`
	_, err = framework.Clientset.AppsV1().StatefulSets(ns).Patch(t.Context(), "web", types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
	var bad string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		bad = stsUpdateRevisionOf(t, ns, "web")
		assert.NotEqual(c, good, bad, "a new revision")
		p, err := framework.Clientset.CoreV1().Pods(ns).Get(t.Context(), "web-1", metav1.GetOptions{})
		if assert.NoError(c, err) {
			assert.Equal(c, bad, p.Labels[appsv1.ControllerRevisionHashLabelKey], "web-1 on the bad revision")
			assert.True(c, framework.CrashLooping(p, "app", 3), "web-1 exited 3 and is not Ready")
		}
	}, framework.Timeout, framework.Tick, "web-1 crash-loops on the bad revision")
	crashing := time.Since(start)
	phase, step := rolloutPhase(t, ns, "pr")
	assert.Equal(t, string(rolloutv1alpha1.PhaseRolling), phase, "the rollout holds (step %s)", step)
	assert.Equal(t, int32(1), stsPartition(t, ns, "web"), "the rollout holds at web-1")
	p0, err := framework.Clientset.CoreV1().Pods(ns).Get(t.Context(), "web-0", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, good, p0.Labels[appsv1.ControllerRevisionHashLabelKey], "web-0 keeps the good revision")
	assert.Empty(t, deletions.OnRevision(bad), "a pod of the update revision deleted")

	// 2. The revert: the operator deletes the stuck pod; it comes back on the good revision.
	revert := `[{"op":"test","path":"/spec/template/spec/containers/0/env/4/name","value":"TESTAPP_CRASH_AT_START"},{"op":"remove","path":"/spec/template/spec/containers/0/env/4"}]`
	_, err = framework.Clientset.AppsV1().StatefulSets(ns).Patch(t.Context(), "web", types.JSONPatchType, []byte(revert), metav1.PatchOptions{})
	require.NoError(t, err)
	reverted := time.Now()
	require.Eventually(t, func() bool { return len(deletions.OnRevision(bad)) > 0 }, framework.Timeout, framework.Tick, "the stuck pod deleted")
	deleted := time.Since(reverted)
	waitPartitionValue(t, ns, "web", 2)
	waitRolloutPhase(t, ns, "pr", "Updated")
	framework.WaitStatefulSetReady(t, ns, "web", 2)
	done := time.Since(reverted)
	assert.Equal(t, good, stsUpdateRevisionOf(t, ns, "web"), "the revert is the good revision again")
	for _, name := range []string{"web-0", "web-1"} {
		p, err := framework.Clientset.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, good, p.Labels[appsv1.ControllerRevisionHashLabelKey], "%s on the good revision", name)
	}
	stuck := deletions.OnRevision(bad)
	require.Len(t, stuck, 1, "the stuck pod deleted exactly once; all deletions: %v", deletions.List())
	assert.Equal(t, "web-1", stuck[0].Name)
	pr, err := getPhasedRollout(t, ns, "pr")
	require.NoError(t, err)
	rec := pr.Status.LastStuckPodRecreated
	require.NotNil(t, rec, "status.lastStuckPodRecreated")
	assert.Equal(t, stuck[0].UID, rec.UID)
	assert.Equal(t, bad, rec.Revision)
	assert.Equal(t, good, rec.UpdateRevision)
	assert.GreaterOrEqual(t, rec.NotReadySeconds, int64(deadline))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		evs := testsupport.Events(t, framework.Client, ns, "PhasedRollout", "pr", rolloutv1alpha1.EventStuckPodRecreated)
		assert.Len(c, evs, 1)
	}, framework.Timeout, framework.Tick, "one StuckPodRecreated Event")
	for _, v := range pw.values() {
		assert.NotZero(t, v, "no pod released past web-1: %v", pw.values())
	}
	t.Logf("SUMMARY rollout-operator stuck pod on the real node: crash loop %s after the bad template; stuck pod deleted %s and rollout over %s after the revert (progressDeadlineSeconds %d); partitions %v; deletions %v",
		crashing.Round(time.Millisecond), deleted.Round(time.Millisecond), done.Round(time.Millisecond), deadline, pw.values(), deletions.List())
}
