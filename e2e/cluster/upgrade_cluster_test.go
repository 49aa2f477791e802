//go:build e2e

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
)

// TestClusterUpgradeUnderLoad: cluster-operator installed from deploy/cluster-operator.yaml (a real pod
// on the real node) is moved to the next release with `kubectl set image`, back to this release by
// applying its manifest, and to the next release by applying that manifest, each time while a
// StatefulCluster of kwok pods is mid-scale: up by upgradeScaleBy pods, down again, up again. The
// identity checker (watchIdentities, as in TestStatefulCluster and TestChaosCluster) watches the pods
// the whole test: a name created for a second pod (reused identity) or a creation beyond the bound
// (over-creation) is a violation, and there must be none. Every scale started before a move completes
// after it, with exactly the identities a single operator would have created.
//
// So that a scale lasts longer than a move (the new pod starting, the old one handing its Lease over),
// the StatefulCluster is OrderedReady (one pod at a time, each Ready before the next; deletions one at
// a time), its pods take upgradeReadyDelay to become Ready (slowStart, through a readiness gate) and
// stay Terminating upgradeTerminatingSeconds when deleted (the kwok pod-delete stage's annotation).
func TestClusterUpgradeUnderLoad(t *testing.T) {
	const operator, name = "cluster-operator", "upgrade"
	if !framework.PrepareUpgradeTest(t, operator) {
		return
	}

	ns := framework.NewNamespace(t)
	slowStart(t, ns, upgradeReadyDelay)
	replicas := upgradeBaseReplicas
	c := watchIdentities(t, ns, name, replicas)
	sc := framework.NewStatefulCluster(name, int32(replicas))
	sc.Spec.PodManagementPolicy = clusterv1alpha1.OrderedReadyPodManagement
	sc.Spec.Template.Annotations = map[string]string{localcluster.TerminatingSecondsAnnotation: fmt.Sprint(upgradeTerminatingSeconds)}
	sc.Spec.Template.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: upgradeGate}}
	sc.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30) // above the Terminating time, so kwok keeps it
	createStatefulCluster(t, ns, sc)
	waitStatefulClusterReady(t, ns, name, int32(replicas), framework.Timeout)

	// The identities a single operator would create: 0..replicas-1 first, then the next ordinals on
	// each scale-up; a scale-down retires the newest (the victims of equal rank).
	live := identityNames(name, 0, replicas)
	next := replicas
	var inFlight, takenOver int
	var leadership []time.Duration
	for i, step := range framework.UpgradeSteps() {
		from, to := replicas, upgradeBaseReplicas+upgradeScaleBy
		if from > upgradeBaseReplicas {
			to = upgradeBaseReplicas
		}
		if to > from {
			c.setBound(to) // before raising, as the checker asks
		}
		patchStatefulCluster(t, ns, name, fmt.Sprintf(`{"spec":{"replicas":%d}}`, to))
		before := waitScaleUnderWay(t, ns, name, from, to)
		inFlight++
		t.Logf("move %d (%s to %s): scale %d→%d under way: status replicas %d, ready %d; live pods %d",
			i+1, step.Move, step.Version, from, to, before.Status.Replicas, before.Status.ReadyReplicas, len(livePods(t, ns, name)))

		took := framework.UpgradeOperator(t, operator, step.Version, step.Move)
		leadership = append(leadership, took.Round(time.Millisecond))
		if after := getStatefulCluster(t, ns, name); after != nil && !scaleDone(after, int32(to)) {
			takenOver++ // the new leader finishes what the old one started
			t.Logf("move %d: the new leader took over the scale at status replicas %d, ready %d (of %d)",
				i+1, after.Status.Replicas, after.Status.ReadyReplicas, to)
		}

		done := waitStatefulClusterReady(t, ns, name, int32(to), 2*framework.Timeout)
		if to < from {
			c.setBound(to) // after lowering
			live = live[:to]
		} else {
			live = append(live, identityNames(name, next, to-from)...)
			next += to - from
		}
		replicas = to
		assert.Equal(t, live, sortedNames(livePods(t, ns, name)), "move %d: the identities of the scale", i+1)
		assert.EqualValues(t, next, done.Status.NextIdentity, "move %d: no identity handed out beyond the scale", i+1)
		names, reuses, over := c.counts()
		require.Equal(t, next, names, "move %d: pod names created, each once", i+1)
		require.Zero(t, reuses+over, "move %d: %d reused identities, %d over-creations", i+1, reuses, over)
		t.Logf("move %d: scale %d→%d complete, %d pod names created so far, 0 violations", i+1, from, to, names)
	}

	names, reuses, over := c.counts()
	violations := reuses + over
	t.Logf("upgrade: %s: %d moves, %d operations in flight across moves, %d violations, leadership after each move: %v",
		operator, len(leadership), inFlight, violations, leadership)
	t.Logf("upgrade: %s: %d of %d scales still under way when the new leader led; %d pod names created, max live %d",
		operator, takenOver, inFlight, names, c.maxLiveNow())
	assert.Zero(t, violations, "reused identities + over-creations")
}

const (
	// upgradeBaseReplicas is the StatefulCluster's size between the scales.
	upgradeBaseReplicas = 2
	// upgradeScaleBy is how many pods each scale adds or removes.
	upgradeScaleBy = 10
	// upgradeReadyDelay is how long a pod takes to become Ready once it runs: with OrderedReady, a
	// scale-up takes upgradeScaleBy times that at least (15s), longer than a move (3-8s from the move
	// to the new leader), so the new leader finishes what the old one started.
	upgradeReadyDelay = 1500 * time.Millisecond
	// upgradeTerminatingSeconds is how long a deleted pod stays Terminating: with OrderedReady, a
	// scale-down takes upgradeScaleBy times that at least (20s).
	upgradeTerminatingSeconds = 2
	// upgradeGate is the readiness gate of the test's pods; kwok never sets it (TestKwokReadinessGate).
	upgradeGate corev1.PodConditionType = "statefulops.dev/e2e-ready"
)

// identityNames returns name-from .. name-(from+n-1).
func identityNames(name string, from, n int) []string {
	names := make([]string, 0, n)
	for i := from; i < from+n; i++ {
		names = append(names, fmt.Sprintf("%s-%d", name, i))
	}
	return names
}

// scaleDone reports whether the status shows the scale to `to` complete: as many pods, all Ready.
func scaleDone(sc *clusterv1alpha1.StatefulCluster, to int32) bool {
	return sc.Generation == sc.Status.ObservedGeneration && sc.Status.Replicas == to && sc.Status.ReadyReplicas == to
}

// waitScaleUnderWay waits until the operator has begun the scale from `from` to `to` pods (it observed
// the new generation and the live pods moved toward to) and requires that it has not finished, by the
// StatefulCluster's status and by its pods; it returns that status.
func waitScaleUnderWay(t *testing.T, ns, name string, from, to int) *clusterv1alpha1.StatefulCluster {
	t.Helper()
	var sc *clusterv1alpha1.StatefulCluster
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		sc = getStatefulCluster(t, ns, name)
		require.NotNil(c, sc)
		require.Equal(c, sc.Generation, sc.Status.ObservedGeneration, "the operator saw the new replicas")
		if live := len(livePods(t, ns, name)); to > from {
			assert.Greater(c, live, from, "a pod created")
		} else {
			assert.Less(c, live, from, "a pod retired")
		}
	}, framework.Timeout, 50*time.Millisecond, "scale %s %d→%d started", name, from, to)
	require.False(t, scaleDone(sc, int32(to)), "scale %d→%d finished before the move: status %+v", from, to, sc.Status)
	pods := livePods(t, ns, name)
	ready := 0
	for _, p := range pods {
		if framework.PodCondition(p, corev1.PodReady) == corev1.ConditionTrue {
			ready++
		}
	}
	require.False(t, len(pods) == to && ready == to, "scale %d→%d finished before the move: %d pods, %d Ready", from, to, len(pods), ready)
	return sc
}

// slowStart stands in for the kubelet's readiness probe of an application that takes delay to start:
// it sets upgradeGate True on each running pod of ns delay after it first sees it running (kwok's
// pod-ready stage then makes the pod Ready). The delay is the simulated start-up time, not a wait for
// something to happen. Its watch is resumed if the API server closes it.
func slowStart(t *testing.T, ns string, delay time.Duration) {
	t.Helper()
	ctx := t.Context()
	w, err := framework.Clientset.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	go func() {
		started := map[types.UID]bool{}
		for {
			for ev := range w.ResultChan() {
				pod, ok := ev.Object.(*corev1.Pod)
				if !ok || ev.Type == watch.Deleted || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning ||
					framework.PodCondition(pod, upgradeGate) != "" || started[pod.UID] {
					continue
				}
				started[pod.UID] = true
				name := pod.Name
				time.AfterFunc(delay, func() {
					// Retried: a gate never set would leave the pod not Ready and the scale stuck.
					_ = retry.OnError(retry.DefaultBackoff, func(error) bool { return ctx.Err() == nil }, func() error {
						return setUpgradeGate(ctx, ns, name)
					})
				})
			}
			if ctx.Err() != nil {
				return
			}
			// Watched again from now: a pod seen before keeps its UID, so its gate is not set twice, and
			// one still without its gate is listed again as ADDED.
			for {
				if w, err = framework.Clientset.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{}); err == nil || ctx.Err() != nil {
					break
				}
				time.Sleep(100 * time.Millisecond) // test helper, not a reconcile: back off before watching again
			}
			if ctx.Err() != nil {
				return
			}
		}
	}()
}

func setUpgradeGate(ctx context.Context, ns, pod string) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: upgradeGate, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now(),
	}}}})
	if err != nil {
		return err
	}
	_, err = framework.Clientset.CoreV1().Pods(ns).Patch(ctx, pod, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return framework.IgnoreGone(err)
}
