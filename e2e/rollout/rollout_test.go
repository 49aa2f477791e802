//go:build e2e

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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// TestRollout runs rollout-operator (as a local process, under its manifest's ServiceAccount)
// against the local cluster and a real Prometheus on loopback that scrapes an exporter the test
// controls. An invariant checker records every partition change of each StatefulSet and every query
// the operator sent (through a recording proxy) and counts the partition decreases not preceded by
// successThreshold consecutive passing checks: it must be 0.
//
// These run on kwok pods; TestRolloutOnTheRealNode (rollout_realnode_test.go) runs the operator
// installed from deploy/rollout-operator.yaml on the real node against a Prometheus scraping the e2e
// test app's own metrics.
func TestRollout(t *testing.T) {
	op := startRolloutOperator(t)
	exp := newMetricsExporter(t)
	prom := startPrometheusFor(t, exp.srv.Listener.Addr().String())
	proxy := newRecordingProxy(t, prom.url)

	var (
		mu        sync.Mutex
		total     invariant
		scenarios int
	)
	record := func(t *testing.T, pw *partitionWatch, ns string, threshold int) {
		t.Helper()
		inv := checkAdvances(pw, proxy, ns, threshold)
		t.Logf("partition history %v: %d advances, %d unchecked; %d queries, %d passed", pw.values(), inv.advances, inv.unchecked, inv.queries, inv.passes)
		assert.Zero(t, inv.unchecked, "partition advances without %d passing checks", threshold)
		mu.Lock()
		defer mu.Unlock()
		scenarios++
		total.advances += inv.advances
		total.unchecked += inv.unchecked
		total.overheads = append(total.overheads, inv.overheads...)
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		t.Logf("SUMMARY rollout-operator e2e: %d scenarios, unchecked advances %d, steps exercised %d; step overhead (last passing check answered → partition change observed) p50 %s p99 %s",
			scenarios, total.unchecked, total.advances,
			rolloutPercentile(total.overheads, 50).Round(time.Millisecond), rolloutPercentile(total.overheads, 99).Round(time.Millisecond))
	})

	// setup makes a namespace with a healthy StatefulSet "web" and a PhasedRollout "pr".
	setup := func(t *testing.T, replicas, start int32, threshold, maxTries int64, extra map[string]any) (string, *partitionWatch) {
		t.Helper()
		ns := framework.NewNamespace(t)
		for i := range replicas {
			exp.setErrors(ns, fmt.Sprintf("web-%d", start+i), 0)
		}
		framework.RolloutStatefulSet(t, ns, "web", replicas, start)
		pw := watchPartition(t, ns, "web")
		createPhasedRollout(t, ns, "pr", "web", proxy.url, threshold, maxTries, extra)
		return ns, pw
	}

	t.Run("3 replicas roll 3→2→1→0 after passing checks", func(t *testing.T) {
		ns, pw := setup(t, 3, 0, 2, 0, nil)
		waitRolloutPhase(t, ns, "pr", "Updated")
		waitPartitionValue(t, ns, "web", 3)
		framework.BumpTemplate(t, ns, "web", "2")
		waitRolloutPhase(t, ns, "pr", "Updated")
		waitPartitionValue(t, ns, "web", 3)
		framework.WaitStatefulSetReady(t, ns, "web", 3)
		require.Eventually(t, func() bool { return len(pw.values()) >= 5 }, framework.Timeout, framework.Tick, "the watch saw the last change")
		assert.Equal(t, []int32{3, 2, 1, 0, 3}, pw.values())
		record(t, pw, ns, 2)
	})

	t.Run("a failing metric stops the rollout at Failed, partition unchanged", func(t *testing.T) {
		ns, pw := setup(t, 3, 0, 2, 3, nil)
		waitPartitionValue(t, ns, "web", 3)
		exp.setErrors(ns, "web-1", 7) // web-2 rolls, web-1 then fails its checks after its roll
		framework.BumpTemplate(t, ns, "web", "2")
		waitRolloutPhase(t, ns, "pr", "Failed")
		assert.Equal(t, int32(1), stsPartition(t, ns, "web"))
		time.Sleep(3 * time.Second)
		assert.Equal(t, int32(1), stsPartition(t, ns, "web"), "Failed holds the partition")
		assert.Equal(t, []int32{3, 2, 1}, pw.values())
		record(t, pw, ns, 2)
	})

	t.Run("Prometheus down mid-rollout: no advance", func(t *testing.T) {
		ns, pw := setup(t, 3, 0, 2, 0, nil)
		waitPartitionValue(t, ns, "web", 3)
		framework.BumpTemplate(t, ns, "web", "2")
		waitPartitionValue(t, ns, "web", 2)
		prom.stop()
		require.Eventually(t, func() bool {
			_, step := rolloutPhase(t, ns, "pr")
			return step == "PrometheusError"
		}, framework.Timeout, framework.Tick)
		time.Sleep(4 * time.Second)
		assert.Equal(t, int32(2), stsPartition(t, ns, "web"), "no advance while Prometheus is down")
		prom.start()
		waitRolloutPhase(t, ns, "pr", "Updated")
		record(t, pw, ns, 2)
	})

	t.Run("operator SIGKILLed mid-step, then a second update during the rollout", func(t *testing.T) {
		ns, pw := setup(t, 3, 0, 3, 0, nil)
		waitPartitionValue(t, ns, "web", 3)
		framework.BumpTemplate(t, ns, "web", "2")
		waitPartitionValue(t, ns, "web", 2)
		require.Eventually(t, func() bool {
			_, step := rolloutPhase(t, ns, "pr")
			return step == "WaitForChecks"
		}, framework.Timeout, 20*time.Millisecond)
		op.Kill()
		op.Start()
		waitPartitionValue(t, ns, "web", 1)
		framework.BumpTemplate(t, ns, "web", "3")
		waitRolloutPhase(t, ns, "pr", "Updated")
		framework.WaitStatefulSetReady(t, ns, "web", 3)
		values := pw.values()
		require.Greater(t, len(values), 3)
		assert.Contains(t, values[3:], int32(3), "the second update starts over from the top: %v", values)
		record(t, pw, ns, 3)
	})

	t.Run("deletion mid-rollout leaves the partition", func(t *testing.T) {
		ns, pw := setup(t, 3, 0, 2, 0, nil)
		waitPartitionValue(t, ns, "web", 3)
		framework.BumpTemplate(t, ns, "web", "2")
		waitPartitionValue(t, ns, "web", 2)
		exp.setErrors(ns, "web-2", 1) // holds the rollout at the step of web-2
		require.NoError(t, framework.Client.Delete(t.Context(), &rolloutv1alpha1.PhasedRollout{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pr"}}))
		require.Eventually(t, func() bool {
			_, err := getPhasedRollout(t, ns, "pr")
			return err != nil
		}, framework.Timeout, framework.Tick)
		time.Sleep(2 * time.Second)
		assert.Equal(t, int32(2), stsPartition(t, ns, "web"))
		events, err := framework.Clientset.EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		found := false
		for _, e := range events.Items {
			found = found || e.Reason == "PartitionLeftOnDeletion"
		}
		assert.True(t, found, "an Event on the StatefulSet says the partition was left")
		record(t, pw, ns, 2)
	})

	t.Run("skipCheck resumes the normal rolling update", func(t *testing.T) {
		ns, _ := setup(t, 3, 0, 2, 0, map[string]any{"skipCheck": true})
		waitRolloutPhase(t, ns, "pr", "Suspended")
		waitPartitionValue(t, ns, "web", 0)
		framework.BumpTemplate(t, ns, "web", "2")
		framework.WaitStatefulSetReady(t, ns, "web", 3)
	})

	t.Run("ordinals.start=5", func(t *testing.T) {
		ns, pw := setup(t, 3, 5, 1, 0, nil)
		waitPartitionValue(t, ns, "web", 3)
		framework.BumpTemplate(t, ns, "web", "2")
		waitRolloutPhase(t, ns, "pr", "Updated")
		found := map[string]bool{}
		for _, r := range proxy.snapshot() {
			for _, pod := range []string{"web-5", "web-6", "web-7"} {
				if r.query == fmt.Sprintf(`app_errors{namespace=%q,pod=%q} > 0`, ns, pod) {
					found[pod] = true
				}
			}
		}
		assert.Equal(t, map[string]bool{"web-5": true, "web-6": true, "web-7": true}, found)
		record(t, pw, ns, 1)
	})

	// Issue 18: several StatefulSets in one ordered rollout (spec.targetRefs), on the real StatefulSet
	// controller and a real Prometheus: both templates change at once; zone-b is released only after
	// zone-a's rollout is over (its partition back at replicas, every pod updated and Ready), and every
	// partition move of each is checked.
	t.Run("targetRefs roll zone by zone", func(t *testing.T) {
		ns := framework.NewNamespace(t)
		zones := []string{"zone-a", "zone-b"}
		watches := map[string]*partitionWatch{}
		for _, z := range zones {
			for i := range 2 {
				exp.setErrors(ns, fmt.Sprintf("%s-%d", z, i), 0)
			}
			framework.RolloutStatefulSet(t, ns, z, 2, 0)
			watches[z] = watchPartition(t, ns, z)
		}
		createPhasedRollout(t, ns, "pr", "", proxy.url, 1, 0, map[string]any{"targetRefs": []any{"zone-a", "zone-b"}})
		waitRolloutPhase(t, ns, "pr", "Updated")
		for _, z := range zones {
			waitPartitionValue(t, ns, z, 2)
			framework.BumpTemplate(t, ns, z, "2")
		}
		waitRolloutPhase(t, ns, "pr", "Updated")
		for _, z := range zones {
			framework.WaitStatefulSetReady(t, ns, z, 2)
			require.Eventually(t, func() bool { return len(watches[z].values()) >= 4 }, framework.Timeout, framework.Tick, "the watch saw %s's last change", z)
			assert.Equal(t, []int32{2, 1, 0, 2}, watches[z].values(), "%s rolled one pod at a time and was held again", z)
			inv := checkAdvances(watches[z], proxy, fmt.Sprintf(`namespace=%q,pod="%s-`, ns, z), 1)
			assert.Equal(t, 2, inv.advances)
			assert.Zero(t, inv.unchecked, "%s: partition advances without a passing check of its own pods", z)
		}
		a, b := watches["zone-a"], watches["zone-b"]
		a.mu.Lock()
		aDone := a.changes[len(a.changes)-1].at // zone-a held again: its rollout is over
		a.mu.Unlock()
		b.mu.Lock()
		bStart := b.changes[1].at // zone-b's first release
		b.mu.Unlock()
		assert.True(t, bStart.After(aDone), "zone-b released at %s, before zone-a's rollout was over at %s", bStart.Format(time.StampMilli), aDone.Format(time.StampMilli))
		pr, err := getPhasedRollout(t, ns, "pr")
		require.NoError(t, err)
		assert.Equal(t, "zone-b", pr.Status.ActiveTarget)
	})
}

// TestRolloutSecondUpdateGap confirms a known limit (README, "a second template change during a
// rollout"): when the template changes again mid-rollout, the pods at or above the partition (already
// on the previous update revision) are restarted by the StatefulSet controller at once, in the same
// instant the operator learns of the change, so they are not gated by checks of the newest revision.
// The operator then starts over from the top and every later step is checked. The test counts the
// pods that reached the newest revision before the checked partition move that would have released
// them, and the pods restarted at all before the operator's partition write; it logs both (the
// count depends on who wins the race) and asserts that everything after that is checked.
func TestRolloutSecondUpdateGap(t *testing.T) {
	startRolloutOperator(t)
	exp := newMetricsExporter(t)
	prom := startPrometheusFor(t, exp.srv.Listener.Addr().String())
	proxy := newRecordingProxy(t, prom.url)
	ns := framework.NewNamespace(t)
	for i := range 3 {
		exp.setErrors(ns, fmt.Sprintf("web-%d", i), 0)
	}
	exp.setErrors(ns, "web-1", 1) // holds the rev2 rollout at partition 1 (web-2 and web-1 on rev2)
	framework.RolloutStatefulSet(t, ns, "web", 3, 0)
	pw := watchPartition(t, ns, "web")
	createPhasedRollout(t, ns, "pr", "web", proxy.url, 2, 0, nil)
	waitPartitionValue(t, ns, "web", 3)
	framework.BumpTemplate(t, ns, "web", "2")
	waitPartitionValue(t, ns, "web", 1)
	rev2 := stsUpdateRevisionOf(t, ns, "web")
	currentRev := stsCurrentRevisionOf(t, ns, "web")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, name := range []string{"web-1", "web-2"} {
			pod, err := framework.Clientset.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
			require.NoError(c, err)
			assert.Equal(c, rev2, pod.Labels[appsv1.ControllerRevisionHashLabelKey])
			assert.True(c, podIsReady(pod))
		}
	}, framework.Timeout, framework.Tick, "web-1 and web-2 run revision 2")

	pods := watchPodRevisions(t, ns)
	exp.setErrors(ns, "web-1", 0)
	bumpAt := time.Now()
	framework.BumpTemplate(t, ns, "web", "3")
	require.Eventually(t, func() bool { return stsUpdateRevisionOf(t, ns, "web") != rev2 }, framework.Timeout, framework.Tick)
	rev3 := stsUpdateRevisionOf(t, ns, "web")
	waitRolloutPhase(t, ns, "pr", "Updated")
	framework.WaitStatefulSetReady(t, ns, "web", 3)

	// When did the operator raise the partition back to 3, and when did it (after checks) release
	// each ordinal again?
	pw.mu.Lock()
	changes := slices.Clone(pw.changes)
	pw.mu.Unlock()
	var raisedAt time.Time
	released := map[int32]time.Time{}
	for _, c := range changes {
		if c.at.Before(bumpAt) {
			continue
		}
		if raisedAt.IsZero() {
			if c.value == 3 {
				raisedAt = c.at
			}
			continue
		}
		for i := c.value; i < 3; i++ {
			if _, ok := released[i]; !ok {
				released[i] = c.at
			}
		}
	}
	require.False(t, raisedAt.IsZero(), "the operator raised the partition to 3 after the second change: %v", pw.values())
	unchecked, restartedEarly := 0, 0
	for i := int32(0); i < 3; i++ {
		name := fmt.Sprintf("web-%d", i)
		if at, ok := pods.firstSeen(name, rev3); ok && (released[i].IsZero() || at.Before(released[i])) {
			unchecked++
			t.Logf("%s reached the newest revision %s %s after the change, before its checked release", name, rev3, at.Sub(bumpAt).Round(time.Millisecond))
		}
		if pods.deletedBetween(name, bumpAt, raisedAt) {
			restartedEarly++
			t.Logf("%s deleted by the StatefulSet controller before the partition write; revisions it came back on: %v (current %s, previous update %s, newest %s)",
				name, pods.revisionsSince(name, bumpAt), currentRev, rev2, rev3)
		}
	}
	t.Logf("KNOWN GAP second template change mid-rollout: partition history %v; %d pod(s) reached %s before their checked step, %d pod(s) deleted by the StatefulSet controller before the operator raised the partition (%s after the change)",
		pw.values(), unchecked, rev3, restartedEarly, raisedAt.Sub(bumpAt).Round(time.Millisecond))
	inv := checkAdvances(pw, proxy, ns, 2)
	t.Logf("partition decreases without 2 passing checks: %d of %d", inv.unchecked, inv.advances)
	assert.Zero(t, inv.unchecked, "every partition decrease of the operator is checked")
}

// podIsReady reports the pod's Ready condition.
func podIsReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestRolloutAdoptsANativeRollout (PR-12) against the real StatefulSet controller: a StatefulSet
// without a PhasedRollout is mid-way through its own rolling update (minReadySeconds makes the
// controller wait after each pod); a PhasedRollout created then freezes the partition just below the
// pods already updated (never back to replicas, never lower), the pod the native rollout rolled last
// is checked first, and no other pod changes while its checks fail.
func TestRolloutAdoptsANativeRollout(t *testing.T) {
	startRolloutOperator(t)
	exp := newMetricsExporter(t)
	prom := startPrometheusFor(t, exp.srv.Listener.Addr().String())
	proxy := newRecordingProxy(t, prom.url)
	ns := framework.NewNamespace(t)
	for i := range 3 {
		exp.setErrors(ns, fmt.Sprintf("web-%d", i), 0)
	}
	exp.setErrors(ns, "web-2", 1) // the pod the native rollout rolls first fails its checks
	replicas := int32(3)
	_, err := framework.Clientset.AppsV1().StatefulSets(ns).Create(t.Context(), &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: framework.PodTemplate("web"),
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	framework.WaitStatefulSetReady(t, ns, "web", 3)
	rev1 := stsCurrentRevisionOf(t, ns, "web")
	// Only now (not at creation, where it would cost 30 s per pod): the native rollout waits 30 s after
	// each updated pod, time to adopt it. minReadySeconds is not part of the revision.
	_, err = framework.Clientset.AppsV1().StatefulSets(ns).Patch(t.Context(), "web", types.MergePatchType, []byte(`{"spec":{"minReadySeconds":30}}`), metav1.PatchOptions{})
	require.NoError(t, err)

	framework.BumpTemplate(t, ns, "web", "2")
	require.Eventually(t, func() bool { return stsUpdateRevisionOf(t, ns, "web") != rev1 }, framework.Timeout, framework.Tick)
	rev2 := stsUpdateRevisionOf(t, ns, "web")
	require.Eventually(t, func() bool {
		pod, err := framework.Clientset.CoreV1().Pods(ns).Get(t.Context(), "web-2", metav1.GetOptions{})
		return err == nil && pod.Labels[appsv1.ControllerRevisionHashLabelKey] == rev2 && podIsReady(pod)
	}, framework.Timeout, 20*time.Millisecond, "the native rollout updated web-2")
	require.Equal(t, rev1, podRevisionOf(t, ns, "web-1"), "the native rollout waits minReadySeconds before web-1")

	pw := watchPartition(t, ns, "web")
	createPhasedRollout(t, ns, "pr", "web", proxy.url, 2, 0, nil)
	waitPartitionValue(t, ns, "web", 2)
	// The status that records the adoption is written just after the partition.
	var pr *rolloutv1alpha1.PhasedRollout
	require.Eventually(t, func() bool {
		pr, err = getPhasedRollout(t, ns, "pr")
		return err == nil && pr.Status.AdoptedPartition != nil
	}, framework.Timeout, framework.Tick, "status.adoptedPartition written")
	adopted := int64(ptr.Deref(pr.Status.AdoptedPartition, 0))
	assert.Equal(t, int64(2), adopted)
	// Past the native rollout's minReadySeconds: without the adoption web-1 would have rolled by now.
	testsupport.NeverWithin(t, 35*time.Second, framework.Tick, func() bool {
		return stsPartition(t, ns, "web") != 2 || podRevisionOf(t, ns, "web-1") != rev1 || podRevisionOf(t, ns, "web-0") != rev1
	}, "nothing moves while the adopted step's checks fail")
	for _, r := range proxy.snapshot() {
		if strings.Contains(r.query, ns) {
			assert.Contains(t, r.query, `pod="web-2"`, "the pod rolled natively is the one checked")
		}
	}

	exp.setErrors(ns, "web-2", 0)
	_, err = framework.Clientset.AppsV1().StatefulSets(ns).Patch(t.Context(), "web", types.MergePatchType, []byte(`{"spec":{"minReadySeconds":0}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	waitRolloutPhase(t, ns, "pr", "Updated")
	framework.WaitStatefulSetReady(t, ns, "web", 3)
	require.Eventually(t, func() bool { return len(pw.values()) >= 4 }, framework.Timeout, framework.Tick)
	assert.Equal(t, []int32{2, 1, 0, 3}, pw.values(), "adopted at 2, never back to 3 before the end")
	inv := checkAdvances(pw, proxy, ns, 2)
	t.Logf("adoption: partition history %v: %d advances, %d unchecked", pw.values(), inv.advances, inv.unchecked)
	assert.Zero(t, inv.unchecked)
}

// podRevisionOf returns the revision label of a pod ("" when it does not exist).
func podRevisionOf(t *testing.T, ns, name string) string {
	t.Helper()
	pod, err := framework.Clientset.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return pod.Labels[appsv1.ControllerRevisionHashLabelKey]
}
