//go:build e2e

package singleton

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"slices"
	"strconv"
	"strings"
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
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// TestChaosSingleton is the singleton-operator campaign, on kwok nodes in SchedulingGate mode (no real
// processes needed: the release is the API-level event the checkers see). Several singletons hand
// over in parallel, each in turn with bare pods, a RollingUpdate Deployment, a Recreate Deployment and
// a StatefulSet (chaosKinds). Bare pods: a new pod is created (held by the webhook), the old one is
// deleted — gracefully, force-deleted (grace 0), or before its successor exists — and the new one must
// be released. Workloads: rolled out (a template change: the revision rule is exercised), their pod
// deleted or force-deleted, and the replacement must be released; while
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
	per := max(1, n/len(chaosKinds))
	for _, kind := range chaosKinds {
		if kind == chaosBarePods {
			chaosPodHandovers(t, c, rng, ns, per)
		} else {
			chaosWorkloadHandovers(t, c, rng, ns, kind, per)
		}
	}
	ivs := releasedIntervals(tl)
	overlaps := overlappingIntervals(ivs)
	releases, rule := tl.revisionRule()
	t.Logf("chaos singleton %s: %d handovers of each kind %v planned, %d releases seen, %d overlapping released intervals, %d revision-rule violations in %d releases with a revision %v",
		ns, per, chaosKinds, len(ivs), overlaps, len(rule), releases, rule)
	return overlaps + len(rule)
}

// The kinds of workload each campaign driver hands over in turn.
const (
	chaosBarePods      = "pods"
	chaosRollingUpdate = "Deployment/RollingUpdate"
	chaosRecreate      = "Deployment/Recreate"
	chaosStatefulSet   = "StatefulSet"
)

var chaosKinds = []string{chaosBarePods, chaosRollingUpdate, chaosRecreate, chaosStatefulSet}

// chaosPodHandovers runs n handovers between bare pods of the singleton of ns, and deletes the last one.
func chaosPodHandovers(t *testing.T, c *framework.Campaign, rng *rand.Rand, ns string, n int) {
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
	require.NoError(t, framework.IgnoreGone(framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), prev, metav1.DeleteOptions{})))
	waitNoAppPods(t, ns)
}

// chaosWorkloadHandovers runs n handovers of a one-replica workload of kind (chaosKinds) under the
// singleton of ns: rollouts, deletions and force deletions of its released pod, each followed by the
// release of its replacement; then it deletes the workload.
func chaosWorkloadHandovers(t *testing.T, c *framework.Campaign, rng *rand.Rand, ns, kind string, n int) {
	chaosCreateWorkload(t, ns, kind)
	epoch := waitNewRelease(t, ns, 0)
	for i := range n {
		if c.TimeUp() {
			break
		}
		switch r := rng.Intn(10); {
		case r < 5: // a rollout
			chaosBumpTemplate(t, ns, kind, i)
		case r < 8: // its pod deleted: evicted, drained, deleted by hand
			require.NoError(t, framework.IgnoreGone(framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), releasedPod(t, ns, epoch), metav1.DeleteOptions{})))
		default:
			pod := releasedPod(t, ns, epoch)
			require.NoError(t, framework.IgnoreGone(framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), pod, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})))
			c.Fault("pod-force-delete", "%s pod %s/%s force-deleted", kind, ns, pod)
		}
		epoch = waitNewRelease(t, ns, epoch)
		c.Op(1)
	}
	workload, _, _ := strings.Cut(kind, "/")
	_, err := framework.Kubectl().Run(t.Context(), "delete", "-n", ns, strings.ToLower(workload), "app", "--wait=true")
	require.NoError(t, err)
	waitNoAppPods(t, ns)
}

// chaosCreateWorkload creates the one-replica workload "app" of kind (a Deployment with its strategy,
// or a StatefulSet) of pause pods on the kwok nodes, which kwok removes at once when deleted.
func chaosCreateWorkload(t *testing.T, ns, kind string) {
	t.Helper()
	pod := appPod("", "app")
	pod.Annotations = map[string]string{localcluster.TerminatingSecondsAnnotation: "0"}
	template := corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec}
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "app"}}
	var err error
	switch kind {
	case chaosStatefulSet:
		_, err = framework.Clientset.AppsV1().StatefulSets(ns).Create(t.Context(), &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "app"},
			Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), ServiceName: "app", Selector: selector, Template: template},
		}, metav1.CreateOptions{})
	default:
		strategy := appsv1.RollingUpdateDeploymentStrategyType
		if kind == chaosRecreate {
			strategy = appsv1.RecreateDeploymentStrategyType
		}
		_, err = framework.Clientset.AppsV1().Deployments(ns).Create(t.Context(), &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "app"},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: selector, Template: template,
				Strategy: appsv1.DeploymentStrategy{Type: strategy}},
		}, metav1.CreateOptions{})
	}
	require.NoError(t, err)
}

// chaosBumpTemplate changes the pod template of the workload "app" of kind: a rollout.
func chaosBumpTemplate(t *testing.T, ns, kind string, i int) {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"chaos/rollout":%q}}}}}`, strconv.Itoa(i)))
	var err error
	if kind == chaosStatefulSet {
		_, err = framework.Clientset.AppsV1().StatefulSets(ns).Patch(t.Context(), "app", types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	} else {
		_, err = framework.Clientset.AppsV1().Deployments(ns).Patch(t.Context(), "app", types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	}
	require.NoError(t, err)
}

// releasedPod is the name of the pod of app "app" released with epoch.
func releasedPod(t *testing.T, ns string, epoch int64) string {
	t.Helper()
	pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=app"})
	require.NoError(t, err)
	for _, p := range pods.Items {
		if p.Annotations[singletonv1.AnnotationEpoch] == strconv.FormatInt(epoch, 10) {
			return p.Name
		}
	}
	require.Failf(t, "no released pod", "no pod of %s carries epoch %d", ns, epoch)
	return ""
}

// waitNewRelease waits until a pod of app "app", not being deleted, is released with an epoch above
// after (fencing NotReady nodes as waitReleasedFencing does), and returns that epoch.
func waitNewRelease(t *testing.T, ns string, after int64) int64 {
	t.Helper()
	var epoch int64
	waitFencing(t, ns, func() bool {
		pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=app"})
		if err != nil {
			return false
		}
		for _, p := range pods.Items {
			if e, _ := strconv.ParseInt(p.Annotations[singletonv1.AnnotationEpoch], 10, 64); e > after && p.DeletionTimestamp == nil {
				epoch = e
				return true
			}
		}
		return false
	}, "a pod of %s released with an epoch above %d", ns, after)
	return epoch
}

// waitNoAppPods waits until ns has no pod of app "app" left.
func waitNoAppPods(t *testing.T, ns string) {
	t.Helper()
	require.Eventually(t, func() bool {
		pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=app"})
		return err == nil && len(pods.Items) == 0
	}, 4*time.Minute, 100*time.Millisecond, "the pods of %s gone", ns)
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
	waitFencing(t, ns, func() bool { return podReleased(t, ns, name) }, "pod %s/%s released", ns, name)
}

// waitFencing waits until done, fencing meanwhile the NotReady nodes whenever the singleton of ns
// reports FencingRequired (the out-of-service taint, removed once done).
func waitFencing(t *testing.T, ns string, done func() bool, msgAndArgs ...any) {
	t.Helper()
	var fenced []string
	defer func() {
		for _, node := range fenced {
			setOutOfService(t, node, false)
		}
	}()
	require.Eventually(t, func() bool {
		if done() {
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
	}, 4*time.Minute, 50*time.Millisecond, msgAndArgs...)
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
