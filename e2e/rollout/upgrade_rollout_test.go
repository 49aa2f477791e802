//go:build e2e

package rollout

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/statefulops/statefulops/e2e/framework"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// TestRolloutUpgradeUnderLoad moves the in-cluster rollout-operator (deploy/rollout-operator.yaml, a
// real pod on the real node) to another image and back while a PhasedRollout is between steps: for
// each move of framework.UpgradeSteps(), a template change of a 5-replica StatefulSet (kwok pods) starts
// a rollout gated by a real Prometheus on loopback scraping an exporter the test controls, reached by
// the operator pod through the recording proxy on the real node's bridge (as in
// TestRolloutOnTheRealNode). The check fails on two pods, web-2 and web-1, so the rollout holds with
// web-4 and web-3 rolled and web-2's check waiting (partition 2 of 5): it is mid-way at the move. web-2's
// gate opens as the move is made, so the step may be taken by the old operator as it goes or by the new
// one as it takes over; web-1's gate holds until the new pod leads, so the rollout cannot finish before
// the handover and the new operator must finish it. The invariant checker is TestRollout's
// (watchPartition + the recording proxy + checkAdvances): every partition decrease preceded by
// successThreshold passing checks; it watches the whole test and must read 0.
func TestRolloutUpgradeUnderLoad(t *testing.T) {
	if !framework.PrepareUpgradeTest(t, "rollout-operator") {
		return
	}

	exp := newMetricsExporter(t)
	prom := startPrometheusFor(t, exp.srv.Listener.Addr().String())
	// The operator is a pod: it reaches the loopback Prometheus through the proxy on the bridge.
	proxy := newRecordingProxyOn(t, prom.url, net.JoinHostPort(bridgeAddress(t), "0"))
	proxyURL, err := url.Parse(proxy.url)
	require.NoError(t, err)

	const (
		replicas  = int32(5)
		threshold = 2
		// gateAtMove's check fails until the move is made; gateAfterMove's until the new pod leads.
		gateAtMove, gateAfterMove = "web-2", "web-1"
		holdPartition             = int32(2) // the partition at which web-2 rolled and is checked
	)
	ns := framework.NewNamespace(t)
	for i := range replicas {
		exp.setErrors(ns, fmt.Sprintf("web-%d", i), 0)
	}
	framework.RolloutStatefulSet(t, ns, "web", replicas, 0)
	pw := watchPartition(t, ns, "web")
	// maxTries unset: a failing check waits (never Failed), the hold the test needs at each move.
	createPhasedRollout(t, ns, "pr", "web", proxyURL.Host, threshold, 0, nil)
	waitRolloutPhase(t, ns, "pr", "Updated")
	waitPartitionValue(t, ns, "web", replicas)

	// violations reads the checker: partition decreases without threshold passing checks so far.
	violations := func() int {
		inv := checkAdvances(pw, proxy, ns, threshold)
		t.Logf("checker: partition history %v: %d advances, %d unchecked; %d queries, %d passed",
			pw.values(), inv.advances, inv.unchecked, inv.queries, inv.passes)
		return inv.unchecked
	}

	steps := framework.UpgradeSteps()
	var leadership []time.Duration
	inFlight := 0
	for i, step := range steps {
		// A new rollout whose check fails on web-2 and web-1: it rolls web-4 and web-3, then waits.
		exp.setErrors(ns, gateAtMove, 1)
		exp.setErrors(ns, gateAfterMove, 1)
		framework.BumpTemplate(t, ns, "web", fmt.Sprint(i+2))
		rev := waitUpdateRevisionChange(t, ns, "web")
		waitCheckWaiting(t, ns, "pr", rev, gateAtMove)
		partition := stsPartition(t, ns, "web")
		require.Equal(t, holdPartition, partition, "move %d: the rollout holds at %s's step", i+1, gateAtMove)
		pr, err := getPhasedRollout(t, ns, "pr")
		require.NoError(t, err)
		require.Equal(t, rolloutv1alpha1.PhaseRolling, pr.Status.Phase, "move %d: the rollout is under way", i+1)
		t.Logf("move %d (%s to %s): rollout %d in flight: partition %d of %d, phase %s, step %s on %s, %d failed checks",
			i+1, step.Move, step.Version, i+1, partition, replicas, pr.Status.Phase,
			pr.Status.RollingPodStatus.Status, pr.Status.RollingPodStatus.Pod, pr.Status.RollingPodStatus.ConsecutiveFailedChecks)
		inFlight++

		// web-2's step may now pass, under the old operator or the new one.
		exp.setErrors(ns, gateAtMove, 0)
		leadership = append(leadership, framework.UpgradeOperator(t, "rollout-operator", step.Version, step.Move))

		// web-1's gate held: the rollout is still under way when the new pod leads.
		partition = stsPartition(t, ns, "web")
		phase, podStep := rolloutPhase(t, ns, "pr")
		t.Logf("move %d: new leader: partition %d, phase %s, step %s", i+1, partition, phase, podStep)
		require.Contains(t, []int32{holdPartition, holdPartition - 1}, partition, "move %d: the rollout went past %s's failing check", i+1, gateAfterMove)
		require.Equal(t, string(rolloutv1alpha1.PhaseRolling), phase, "move %d: the rollout is still under way after the move", i+1)

		exp.setErrors(ns, gateAfterMove, 0)
		waitRolloutDone(t, ns, "web", "pr", rev, replicas)
		require.Zero(t, violations(), "move %d: partition lowered without %d passing checks", i+1, threshold)
	}

	// One pod at a time, from the top, every rollout: the idle hold at replicas, then per rollout
	// replicas-1 … 0 and the hold again.
	want := []int32{replicas}
	for range steps {
		for p := replicas - 1; p >= 0; p-- {
			want = append(want, p)
		}
		want = append(want, replicas)
	}
	require.Eventually(t, func() bool { return len(pw.values()) >= len(want) }, framework.Timeout, framework.Tick, "the watch saw the last change")
	assert.Equal(t, want, pw.values(), "partition history")
	total := violations()
	assert.Zero(t, total, "partition lowered without %d passing checks", threshold)
	rounded := make([]time.Duration, len(leadership))
	for i, d := range leadership {
		rounded[i] = d.Round(time.Millisecond)
	}
	t.Logf("upgrade: %s: %d moves, %d operations in flight across moves, %d violations, leadership after each move: %v",
		"rollout-operator", len(steps), inFlight, total, rounded)
}

// waitUpdateRevisionChange waits until the StatefulSet controller observed the template change and
// returns the new update revision.
func waitUpdateRevisionChange(t *testing.T, ns, name string) string {
	t.Helper()
	var rev string
	require.Eventually(t, func() bool {
		sts, err := framework.Clientset.AppsV1().StatefulSets(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil || sts.Status.ObservedGeneration != sts.Generation {
			return false
		}
		rev = sts.Status.UpdateRevision
		return rev != sts.Status.CurrentRevision
	}, framework.Timeout, framework.Tick, "StatefulSet %s has a new update revision", name)
	return rev
}

// waitCheckWaiting waits until the PhasedRollout's rollout to rev is at pod's step with its check
// waiting: WaitForChecks after at least one failing check.
func waitCheckWaiting(t *testing.T, ns, name, rev, pod string) {
	t.Helper()
	require.Eventually(t, func() bool {
		pr, err := getPhasedRollout(t, ns, name)
		if err != nil || pr.Status.UpdateRevision != rev || pr.Status.RollingPodStatus == nil {
			return false
		}
		s := pr.Status.RollingPodStatus
		return s.Pod == pod && s.Status == rolloutv1alpha1.StepWaitForChecks && s.ConsecutiveFailedChecks >= 1
	}, framework.Timeout, framework.Tick, "PhasedRollout %s waits on %s's failing check", name, pod)
}

// waitRolloutDone waits until the rollout to rev is over: the PhasedRollout Updated at that revision,
// the partition held at replicas again, and every pod Ready on rev.
func waitRolloutDone(t *testing.T, ns, sts, pr, rev string, replicas int32) {
	t.Helper()
	waitRolloutPhase(t, ns, pr, string(rolloutv1alpha1.PhaseUpdated))
	waitPartitionValue(t, ns, sts, replicas)
	framework.WaitStatefulSetReady(t, ns, sts, replicas)
	require.Equal(t, rev, stsCurrentRevisionOf(t, ns, sts), "the StatefulSet's current revision is the rolled one")
	pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=" + sts})
	require.NoError(t, err)
	var onRev []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Labels[appsv1.ControllerRevisionHashLabelKey] == rev {
			onRev = append(onRev, p.Name)
		}
	}
	slices.Sort(onRev)
	require.Len(t, onRev, int(replicas), "every pod runs %s: %v", rev, onRev)
}
