//go:build e2e

package singleton

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// TestChaosSingleton is the singleton-operator campaign, on kwok nodes in SchedulingGate mode (no real
// processes needed: the release is the API-level event the checkers see). Several singletons hand
// over in parallel: a new pod is created (held by the webhook), the old one is deleted — gracefully,
// force-deleted (grace 0), or before its successor exists — and the new one must be released; while
// the operator and the webhook server are SIGKILLed and restarted, kwok nodes go NotReady (a
// force-deleted pod there needs the out-of-service taint, as an administrator would apply it) and the
// API server restarts between two rounds. Checkers: watchReleased (TestSingletonFailures') and the
// pod timeline of singleton_timeline_test.go, whose release/gone intervals must not overlap and
// whose revision rule must hold. Operations: handovers completed.
func TestChaosSingleton(t *testing.T) {
	c := framework.NewCampaign(t, "singleton", "parallel handovers under operator and webhook kills, force deletes, NotReady nodes and API-server restarts",
		"overlapping released pods of one singleton (API level) + revision-rule violations")
	// The in-cluster webhook server goes first: its pods carry the operator's name label, which
	// parking the operator waits to see gone.
	framework.RestoreWebhookService(t) // in case a killed run left it pointing at loopback: the manifest would not apply
	require.NoError(t, framework.InstallManifestOnce("singleton-operator"), "kubectl apply -f deploy/singleton-operator.yaml")
	scaleWebhookDeployment(t, 0)
	t.Cleanup(func() { scaleWebhookDeployment(t, 2) })
	op := framework.StartChaosOperator(t, "singleton-operator", nil)
	wh := framework.StartChaosWebhook(t)

	c.Schedule("operator-kill", 10*time.Second, 30*time.Second, c.KillAndRestart(op))
	c.Schedule("operator-upgrade", 20*time.Second, 60*time.Second, c.UpgradeAndRestart(op))
	c.Schedule("webhook-kill", 6*time.Second, 18*time.Second, func(ctx context.Context, rng *rand.Rand) error {
		if err := wh.Kill(ctx); err != nil {
			return err
		}
		pause := time.Duration(rng.Intn(3000)) * time.Millisecond
		c.Fault("webhook-kill", "webhook-server SIGKILLed, restarted after %s", pause)
		select {
		case <-time.After(pause):
		case <-ctx.Done():
		}
		return wh.Start(context.WithoutCancel(ctx))
	})
	c.Schedule("node-notready", 15*time.Second, 35*time.Second, c.FlipNode(8*time.Second))

	violations := c.ParallelRounds(t, c.N(16), "singleton", chaosHandovers)
	c.Finish(violations)
}

// chaosHandovers runs n handovers of one singleton in a namespace of its own and returns the
// violations its checkers counted.
func chaosHandovers(t *testing.T, c *framework.Campaign, rng *rand.Rand, n int) int {
	ns := newSingletonNamespace(t, singletonv1.HoldModeSchedulingGate)
	watchReleased(t, ns)
	tl := watchPodTimeline(t, ns)
	prev := chaosSingletonPod(t, ns)
	waitReleasedFencing(t, ns, prev)
	for range n {
		if c.TimeUp() {
			break
		}
		node := podNode(t, ns, prev)
		switch r := rng.Intn(10); {
		case r < 6: // a rollout: the successor first, then the old pod deleted gracefully
			next := chaosSingletonPod(t, ns)
			require.NoError(t, framework.IgnoreGone(framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), prev, metav1.DeleteOptions{})))
			prev = next
		case r < 8: // the old pod force-deleted (grace 0) while its successor waits
			next := chaosSingletonPod(t, ns)
			require.NoError(t, framework.IgnoreGone(framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), prev, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})))
			c.Fault("pod-force-delete", "old pod %s/%s force-deleted (node %s)", ns, prev, node)
			prev = next
		default: // the old pod deleted before its successor exists (Recreate)
			require.NoError(t, framework.IgnoreGone(framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), prev, metav1.DeleteOptions{})))
			prev = chaosSingletonPod(t, ns)
		}
		waitReleasedFencing(t, ns, prev)
		c.Op(1)
	}
	ivs := releasedIntervals(tl)
	overlaps := overlappingIntervals(ivs)
	releases, rule := tl.revisionRule()
	// releases counts only the pods with a revision (the revision rule's subject): the campaign's bare
	// pods have none, so the releases the overlap check covers are the released intervals.
	t.Logf("chaos singleton %s: %d handovers planned, %d releases seen, %d overlapping released intervals, %d revision-rule violations in %d releases with a revision %v",
		ns, n, len(ivs), overlaps, len(rule), releases, rule)
	return overlaps + len(rule)
}

// chaosSingletonPod creates a pod of the singleton, retrying while the webhook server is down (the
// webhook fails closed, so creation is refused meanwhile), and returns its name. The scheduler places
// it once released (a pod with a scheduling gate may not name its node).
func chaosSingletonPod(t *testing.T, ns string) string {
	t.Helper()
	pod := appPod("app-", "app")
	var created *corev1.Pod
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		created, err = framework.Clientset.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
		require.NoError(c, err)
	}, 3*time.Minute, 100*time.Millisecond, "create a singleton pod (the webhook may be down)")
	require.Equal(t, "true", created.Labels[singletonv1.LabelManaged], "admitted held")
	return created.Name
}

// waitReleasedFencing waits until the pod is released. A force-deleted pod of a NotReady node leaves
// no termination evidence, so the operator holds its successor (FencingRequired) until the node is
// fenced: here, as an administrator would, by the out-of-service taint, removed after the release.
func waitReleasedFencing(t *testing.T, ns, name string) {
	t.Helper()
	var fenced []string
	defer func() {
		for _, node := range fenced {
			setOutOfService(t, node, false)
		}
	}()
	require.Eventually(t, func() bool {
		if podReleased(t, ns, name) {
			return true
		}
		ss, err := fetchSingleton(t.Context(), ns)
		if err != nil {
			return false
		}
		for _, cond := range ss.Status.Conditions {
			if cond.Type == singletonv1.ConditionFencingRequired && cond.Status == metav1.ConditionTrue {
				for _, node := range notReadyNodes(t) {
					if !slices.Contains(fenced, node) {
						setOutOfService(t, node, true)
						fenced = append(fenced, node)
						t.Logf("FencingRequired in %s: out-of-service taint on NotReady node %s", ns, node)
					}
				}
			}
		}
		return false
	}, 4*time.Minute, 50*time.Millisecond, "pod %s/%s released", ns, name)
}

// fetchSingleton reads the StatefulSingleton "app" of ns.
func fetchSingleton(ctx context.Context, ns string) (*singletonv1.StatefulSingleton, error) {
	raw, err := framework.Clientset.CoreV1().RESTClient().Get().AbsPath("/apis/apps.openshift.statefulsingleton.com/v1/namespaces", ns, "statefulsingletons", "app").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	ss := &singletonv1.StatefulSingleton{}
	return ss, json.Unmarshal(raw, ss)
}

// notReadyNodes returns the kwok nodes that are not Ready.
func notReadyNodes(t *testing.T) []string {
	nodes, err := framework.Clientset.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{LabelSelector: localcluster.KwokNodeLabel + "=" + localcluster.KwokNodeValue})
	if err != nil {
		return nil
	}
	var out []string
	for i := range nodes.Items {
		if !localcluster.NodeReady(&nodes.Items[i]) {
			out = append(out, nodes.Items[i].Name)
		}
	}
	return out
}

// podNode returns the node of a pod ("" when it is gone).
func podNode(t *testing.T, ns, name string) string {
	pod, err := framework.Clientset.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return pod.Spec.NodeName
}

// releasedIntervals returns, per pod the timeline saw released, [released, gone or exit reported) in
// the test's clock (zero: still there).
func releasedIntervals(tl *podTimeline) [][2]time.Time {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var out [][2]time.Time
	for _, pt := range tl.pods {
		if pt.released.IsZero() {
			continue
		}
		end, _ := pt.cleared()
		out = append(out, [2]time.Time{pt.released, end})
	}
	slices.SortFunc(out, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	return out
}

// overlappingIntervals counts the released intervals that begin before an earlier one ended (one
// singleton per namespace, so any overlap is two released pods at once).
func overlappingIntervals(ivs [][2]time.Time) int {
	overlaps := 0
	for i := 1; i < len(ivs); i++ {
		for j := range i {
			if end := ivs[j][1]; end.IsZero() || ivs[i][0].Before(end) {
				overlaps++
				break
			}
		}
	}
	return overlaps
}

// scaleWebhookDeployment scales the in-cluster webhook server; at 0 it waits until its pods are gone.
func scaleWebhookDeployment(t *testing.T, replicas int) {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	_, err := framework.Kubectl().Run(ctx, "scale", "-n", framework.SingletonNamespace, "deployment/"+framework.WebhookDeployment, fmt.Sprintf("--replicas=%d", replicas))
	require.NoError(t, err)
	if replicas == 0 {
		require.Eventually(t, func() bool {
			pods, err := framework.Clientset.CoreV1().Pods(framework.SingletonNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=webhook-server"})
			return err == nil && len(pods.Items) == 0
		}, 2*time.Minute, 100*time.Millisecond, "in-cluster webhook server pods gone")
	}
}
