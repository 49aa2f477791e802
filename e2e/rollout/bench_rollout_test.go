//go:build e2e && bench

package rollout

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/statefulops/statefulops/e2e/benchfmt"
	"github.com/statefulops/statefulops/e2e/framework"
)

// The rollout bench rolls rolloutBenchSets StatefulSets of rolloutBenchReplicas pods at once: each
// step costs a pod's restart plus the check's initial delay and period (about 2s), so parallel
// rollouts give ≥ 20 steps within the bench's time budget.
const rolloutBenchSets, rolloutBenchReplicas = 4, 7

// TestBenchRolloutStep measures rollout-operator's step overhead: from the answer to a step's last
// passing check (as the recording proxy between the operator and a real Prometheus saw it) to the
// partition change (as the test's watch saw it). The baseline is the native StatefulSet controller's
// own step in a plain RollingUpdate of the same size: from the watch event showing a pod of the new
// revision Ready to the one showing the next old pod deleted. The checker of TestRollout counts
// partition decreases without the required passing checks (must be 0).
func TestBenchRolloutStep(t *testing.T) {
	op := startRolloutOperator(t)
	exp := newMetricsExporter(t)
	prom := startPrometheusFor(t, exp.srv.Listener.Addr().String())
	proxy := newRecordingProxy(t, prom.url)

	// CPU profiles of the operator and the kube-apiserver over each kind of step (docs/performance.md).
	profiled := framework.CPUProfilesUntil(t, "rollout-step", op.Profiled())
	overheads, unchecked := rolloutBenchOverheads(t, exp, proxy, nil)
	profiled()
	// The same steps with three checks each: spec.check plus two spec.checks, every one a query of the
	// same real Prometheus through the proxy (the partition moves once all three passed).
	threeChecks := func(ns string) map[string]any {
		check := func(name, expr string) map[string]any {
			return map[string]any{"name": name, "initialDelaySeconds": int64(1), "periodSeconds": int64(1), "successThreshold": int64(1),
				"query": map[string]any{"expr": expr, "url": strings.TrimPrefix(proxy.url, "http://")}}
		}
		return map[string]any{"checks": []any{
			check("restarts", `app_errors{namespace="`+ns+`",pod="{{pod}}",kind="restarts"} > 0`),
			check("latency", `app_errors{namespace="`+ns+`",pod="{{pod}}",kind="latency"} > 0`),
		}}
	}
	profiled = framework.CPUProfilesUntil(t, "rollout-step-three-checks", op.Profiled())
	multiOverheads, multiUnchecked := rolloutBenchOverheads(t, exp, proxy, threeChecks)
	profiled()

	// The baseline: the same StatefulSets without a PhasedRollout, rolled by their own controller.
	var natives []*rolloutBenchPods
	for range rolloutBenchSets {
		ns := framework.NewNamespace(t)
		framework.RolloutStatefulSet(t, ns, "web", rolloutBenchReplicas, 0)
		natives = append(natives, watchRolloutBenchPods(t, ns))
	}
	for _, p := range natives {
		framework.BumpTemplate(t, p.ns, "web", "2")
	}
	var baseline []float64
	for _, p := range natives {
		// Rolled, not only Ready: right after the template change the old pods are all still Ready.
		framework.WaitRolled(t, p.ns, "web")
		steps := p.steps(stsUpdateRevisionOf(t, p.ns, "web"))
		assert.Len(t, steps, rolloutBenchReplicas-1, "one step per pod after the first")
		for _, d := range steps {
			baseline = append(baseline, framework.LeaseBenchMillis(d))
		}
	}

	framework.RecordFigure(t, benchfmt.Figure{
		Operator: "rollout", Name: "step overhead (last passing check answered -> partition written)", Unit: "ms", Where: "kwok",
		Samples: overheads, Baseline: "StatefulSet RollingUpdate step (new-revision pod Ready -> next old pod deleted)", BaselineSamples: baseline,
		Targets: []benchfmt.Target{benchfmt.AtMost("p99", 100)},
		Note: fmt.Sprintf("%d PhasedRollouts of %d pods rolling at once (successThreshold 1, periodSeconds 1, a real Prometheus scraping every "+
			"200ms through a recording proxy), %d steps; the baseline rolls %d plain StatefulSets of the same size at once afterwards. "+
			"Invariant: %d partition decreases without a passing check.", rolloutBenchSets, rolloutBenchReplicas, len(overheads),
			rolloutBenchSets, unchecked),
	})
	framework.RecordFigure(t, benchfmt.Figure{
		Operator: "rollout", Name: "step overhead with 3 checks per step (last passing check answered -> partition written)", Unit: "ms", Where: "kwok",
		Samples: multiOverheads, Baseline: "the same step with one check (the figure above, same run)", BaselineSamples: overheads,
		Targets: []benchfmt.Target{benchfmt.AtMost("p99", 100)},
		Note: fmt.Sprintf("%d PhasedRollouts of %d pods rolling at once, each step gated by spec.check and two spec.checks (all successThreshold 1, "+
			"periodSeconds 1, against the same real Prometheus through the recording proxy), %d steps. Invariant: %d partition decreases without a passing check.",
			rolloutBenchSets, rolloutBenchReplicas, len(multiOverheads), multiUnchecked),
	})
}

// rolloutBenchOverheads rolls rolloutBenchSets new StatefulSets of rolloutBenchReplicas pods at once
// under PhasedRollouts (extra, when set, adds to each one's spec) and returns the step overheads (from
// the last passing answer the proxy recorded in a step to the partition change the watch saw) and the
// partition decreases without a passing check (must be 0).
func rolloutBenchOverheads(t *testing.T, exp *metricsExporter, proxy *recordingProxy, extra func(ns string) map[string]any) ([]float64, int) {
	t.Helper()
	type rollout struct {
		ns string
		pw *partitionWatch
	}
	var rollouts []rollout
	for range rolloutBenchSets {
		ns := framework.NewNamespace(t)
		for i := range rolloutBenchReplicas {
			exp.setErrors(ns, fmt.Sprintf("web-%d", i), 0)
		}
		framework.RolloutStatefulSet(t, ns, "web", rolloutBenchReplicas, 0)
		pw := watchPartition(t, ns, "web")
		var spec map[string]any
		if extra != nil {
			spec = extra(ns)
		}
		createPhasedRollout(t, ns, "pr", "web", proxy.url, 1, 0, spec)
		rollouts = append(rollouts, rollout{ns, pw})
	}
	for _, r := range rollouts {
		waitRolloutPhase(t, r.ns, "pr", "Updated")
		waitPartitionValue(t, r.ns, "web", rolloutBenchReplicas)
	}
	for _, r := range rollouts {
		framework.BumpTemplate(t, r.ns, "web", "2")
	}
	var overheads []float64
	unchecked := 0
	for _, r := range rollouts {
		waitRolloutPhase(t, r.ns, "pr", "Updated")
		framework.WaitStatefulSetReady(t, r.ns, "web", rolloutBenchReplicas)
		require.Eventually(t, func() bool { return len(r.pw.values()) >= rolloutBenchReplicas+2 }, framework.Timeout, framework.Tick, "the watch saw the last change")
		inv := checkAdvances(r.pw, proxy, r.ns, 1)
		assert.Equal(t, rolloutBenchReplicas, inv.advances, "one advance per pod: %v", r.pw.values())
		assert.Zero(t, inv.unchecked, "partition advances without a passing check")
		unchecked += inv.unchecked
		for _, d := range inv.overheads {
			overheads = append(overheads, framework.LeaseBenchMillis(d))
		}
	}
	return overheads, unchecked
}

// rolloutBenchPods records, for one namespace, when each pod was seen Ready on which revision and
// when each pod was seen deleted (deletionTimestamp set or gone), in watch order.
type rolloutBenchPods struct {
	ns     string
	mu     sync.Mutex
	events []rolloutBenchEvent
}

// rolloutBenchEvent is one pod becoming Ready (on rev) or being deleted.
type rolloutBenchEvent struct {
	at      time.Time
	pod     string
	rev     string
	deleted bool
}

func watchRolloutBenchPods(t *testing.T, ns string) *rolloutBenchPods {
	t.Helper()
	w, err := framework.Clientset.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	p := &rolloutBenchPods{ns: ns}
	go func() {
		ready, deleting := map[string]bool{}, map[string]bool{}
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			now, uid := time.Now(), string(pod.UID)
			p.mu.Lock()
			switch {
			case ev.Type == watch.Deleted || pod.DeletionTimestamp != nil:
				if !deleting[uid] {
					deleting[uid] = true
					p.events = append(p.events, rolloutBenchEvent{at: now, pod: pod.Name, rev: pod.Labels[appsv1.ControllerRevisionHashLabelKey], deleted: true})
				}
			case podIsReady(pod) && !ready[uid]:
				ready[uid] = true
				p.events = append(p.events, rolloutBenchEvent{at: now, pod: pod.Name, rev: pod.Labels[appsv1.ControllerRevisionHashLabelKey]})
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// steps returns, for each deletion of an old-revision pod after the first, the time since the last
// pod of revision rev became Ready: the StatefulSet controller's own step overhead.
func (p *rolloutBenchPods) steps(rev string) []time.Duration {
	p.mu.Lock()
	events := slices.Clone(p.events)
	p.mu.Unlock()
	var out []time.Duration
	var lastReady time.Time
	for _, e := range events {
		switch {
		case !e.deleted && e.rev == rev:
			lastReady = e.at
		case e.deleted && e.rev != rev && !lastReady.IsZero():
			out = append(out, e.at.Sub(lastReady))
		}
	}
	return out
}
