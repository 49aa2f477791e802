//go:build e2e

package rollout

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
)

// TestChaosRollout is the rollout-operator campaign: several 3-replica StatefulSets, each with its
// PhasedRollout in a namespace of its own (framework.ParallelRounds), rolled out one after another,
// gated by a real Prometheus whose check results change at random (each pod's error gauge flips
// between healthy and failing every few hundred milliseconds), while the operator is SIGKILLed and
// restarted or upgraded, its API requests fail at random (apiFaultProxy), Prometheus goes down, pods
// are force-deleted, kwok nodes go NotReady and the API server restarts between two rounds. The
// checker is TestRollout's checkAdvances over watchPartition and the recording proxy: a partition
// decrease not preceded by successThreshold consecutive passing checks is an unchecked step.
// Operations: partition steps.
func TestChaosRollout(t *testing.T) {
	c := framework.NewCampaign(t, "rollout", "rollouts with random check results under operator kills and upgrades, API errors, Prometheus outages, force deletes, NotReady nodes and API-server restarts",
		"unchecked steps (partition lowered without successThreshold passing checks)")
	apiProxy := framework.StartAPIFaultProxy(t, c.Rand("proxy"))
	// The checker times partition changes from the operator's writes (partitionWatch.timeFromWrites).
	apiProxy.RecordWrites("statefulsets")
	op := framework.StartChaosOperator(t, "rollout-operator", apiProxy)
	exp := newMetricsExporter(t)
	prom := startPrometheusFor(t, exp.srv.Listener.Addr().String())
	rp := newRecordingProxy(t, prom.url)
	var lanes framework.LaneNamespaces

	// Random check results: each pod's gauge is failing 20 % of the time, re-drawn every 0.2–0.8 s.
	c.Schedule("check-results", 200*time.Millisecond, 800*time.Millisecond, func(_ context.Context, rng *rand.Rand) error {
		lanes.Each(func(ns string) {
			for i := range chaosReplicas {
				v := 0
				if rng.Float64() < 0.2 {
					v = 1 + rng.Intn(5)
				}
				exp.setErrors(ns, fmt.Sprintf("web-%d", i), v)
			}
		})
		return nil
	})
	c.Schedule("operator-kill", 10*time.Second, 30*time.Second, c.KillAndRestart(op))
	c.Schedule("operator-upgrade", 20*time.Second, 60*time.Second, c.UpgradeAndRestart(op))
	c.Schedule("api-errors", 2*time.Second, 6*time.Second, c.APIErrorBursts(apiProxy, 4*time.Second))
	c.Schedule("pod-force-delete", 8*time.Second, 20*time.Second, lanes.AtRandom(func(ns string) func(context.Context, *rand.Rand) error {
		return c.ForceDeletePod(ns, "app=web", nil)
	}))
	c.Schedule("node-notready", 15*time.Second, 35*time.Second, c.FlipNode(8*time.Second))
	c.Schedule("prometheus-down", 30*time.Second, 90*time.Second, func(ctx context.Context, rng *rand.Rand) error {
		down := time.Duration(1000+rng.Intn(4000)) * time.Millisecond
		prom.stop()
		c.Fault("prometheus-down", "Prometheus stopped for %s", down)
		select {
		case <-time.After(down):
		case <-ctx.Done(): // the campaign halts: Prometheus comes back all the same
		}
		return prom.tryStart()
	})

	var mu sync.Mutex
	advances := 0
	violations := c.ParallelRounds(t, c.N(9), "rollout", func(t *testing.T, c *framework.Campaign, _ *rand.Rand, n int) int {
		inv := chaosRollouts(t, c, &lanes, exp, rp, apiProxy, n)
		mu.Lock()
		advances += inv.advances
		mu.Unlock()
		return inv.unchecked
	})
	c.RecordProxyFaults(apiProxy)
	t.Logf("chaos rollout: %d partition steps checked in all", advances)
	assert.Positive(t, advances, "the checker saw partition steps")
	c.Finish(violations)
}

// The campaign's StatefulSets and the successThreshold of their checks.
const chaosReplicas, chaosThreshold = 3, 2

// chaosRollouts is one lane of TestChaosRollout: a StatefulSet and its PhasedRollout in a namespace of
// its own, rolled out until about n partition steps are done; it returns what the checker found.
func chaosRollouts(t *testing.T, c *framework.Campaign, lanes *framework.LaneNamespaces, exp *metricsExporter, rp *recordingProxy, apiProxy writeTimes, n int) invariant {
	ns := framework.NewNamespace(t)
	for i := range chaosReplicas {
		exp.setErrors(ns, fmt.Sprintf("web-%d", i), 0)
	}
	framework.RolloutStatefulSet(t, ns, "web", chaosReplicas, 0)
	pw := watchPartition(t, ns, "web")
	createPhasedRollout(t, ns, "pr", "web", rp.url, chaosThreshold, 0, nil)
	waitRolloutPhase(t, ns, "pr", "Updated")
	lanes.Join(ns)
	for i := range (n + chaosReplicas - 1) / chaosReplicas {
		if c.TimeUp() {
			break
		}
		framework.BumpTemplate(t, ns, "web", fmt.Sprint(i+2))
		waitRolledOut(t, ns, chaosReplicas)
		c.Op(chaosReplicas)
	}
	lanes.Leave(ns)
	byWatch := pw.timeFromWrites(func(rv string) (time.Time, bool) { return apiProxy.WriteTime(ns, "statefulsets", "web", rv) })
	inv := checkAdvances(pw, rp, ns, chaosThreshold)
	t.Logf("chaos rollout %s: partition history %v: %d advances, %d unchecked; %d queries, %d passed, %d aborted; %d partition changes timed by the watch",
		ns, pw.values(), inv.advances, inv.unchecked, inv.queries, inv.passes, inv.aborted, byWatch)
	c.Tally("check queries not counted: aborted before any answer reached the operator (killed or stopped mid-query)", inv.aborted)
	c.Tally("partition changes timed by the watch, for want of a recorded operator write", byWatch)
	return inv
}

// writeTimes is the API proxy's record of the operator's writes (framework apiFaultProxy).
type writeTimes interface {
	WriteTime(namespace, resource, name, resourceVersion string) (time.Time, bool)
}

// waitRolledOut waits until the StatefulSet runs its latest template on every pod, all Ready, and
// the PhasedRollout is Updated with the partition back at replicas. The faults go on meanwhile (the
// operator killed every 10–30 s of uptime, its restarts failed by injected API errors, pods
// force-deleted onto NotReady nodes), so on a loaded machine a roll can take minutes: this is a
// liveness bound, not a measurement.
func waitRolledOut(t *testing.T, ns string, replicas int32) {
	t.Helper()
	require.EventuallyWithT(t, func(col *assert.CollectT) {
		sts, err := framework.Clientset.AppsV1().StatefulSets(ns).Get(t.Context(), "web", metav1.GetOptions{})
		require.NoError(col, err)
		assert.Equal(col, sts.Generation, sts.Status.ObservedGeneration)
		assert.Equal(col, sts.Status.UpdateRevision, sts.Status.CurrentRevision)
		assert.Equal(col, replicas, sts.Status.UpdatedReplicas)
		assert.Equal(col, replicas, sts.Status.ReadyReplicas)
		if ru := sts.Spec.UpdateStrategy.RollingUpdate; assert.NotNil(col, ru) {
			assert.Equal(col, replicas, ptr.Deref(ru.Partition, 0))
		}
		phase, _ := rolloutPhase(t, ns, "pr")
		assert.Equal(col, "Updated", phase)
	}, framework.ChaosLiveness, framework.Tick, "rollout of web done")
}
