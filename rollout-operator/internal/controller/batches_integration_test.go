//go:build integration

package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// readinessSim plays the StatefulSet controller with the MaxUnavailableStatefulSet feature, as a
// kubelet would see it: every pod at or above the partition on another revision is rolled at once
// (relabelled and not Ready), becomes Ready readyAfter later unless its revision is broken (a
// crash-looping image), and a deleted pod is recreated (at the update revision at or above the
// partition, at the current revision below it). It keeps the partition log (watchPartitions) and the most pods
// it saw not Ready at once.
type readinessSim struct {
	log     *partitionLog
	mu      sync.Mutex
	maxDown int
	broken  map[string]bool
}

func (s *readinessSim) down() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxDown
}

// With orderedReady, it replaces no pod while any pod is not Ready, as the StatefulSet controller
// with podManagementPolicy OrderedReady (kubernetes/kubernetes#67250: a crash-looping pod blocks it).
func (f *fixture) simulateReadiness(readyAfter time.Duration, orderedReady bool, broken ...string) *readinessSim {
	sim := &readinessSim{log: f.watchPartitions(), broken: map[string]bool{}}
	for _, b := range broken {
		sim.broken[b] = true
	}
	ctx := f.t.Context()
	rolledAt := map[string]time.Time{}
	f.t.Cleanup(func() {
		if f.t.Failed() {
			pr := &rolloutv1alpha1.PhasedRollout{}
			_ = suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "pr"}, pr)
			values, _ := sim.log.get()
			var pods corev1.PodList
			_ = suite.Client.List(context.Background(), &pods, client.InNamespace(f.ns))
			for _, p := range pods.Items {
				f.t.Logf("pod %s %s ready=%v uid=%s", p.Name, p.Labels[appsv1.ControllerRevisionHashLabelKey], podReady(&p), p.UID)
			}
			f.t.Logf("partitions %v; status %+v; step %+v; batch %+v; events %v", values, pr.Status, pr.Status.RollingPodStatus, pr.Status.Batch, f.eventReasons("pr"))
		}
	})
	go func() {
		for ctx.Err() == nil {
			time.Sleep(tick)
			sts, p, ok := readStatefulSet(ctx, f.ns)
			if !ok {
				continue
			}
			all, down := true, 0
			blocked := false
			if orderedReady {
				var list corev1.PodList
				_ = suite.Client.List(ctx, &list, client.InNamespace(f.ns))
				for i := range list.Items {
					blocked = blocked || !podReady(&list.Items[i])
				}
			}
			for i := range f.n {
				name := fmt.Sprintf("web-%d", f.start+i)
				want := sts.Status.CurrentRevision
				if i >= p {
					want = sts.Status.UpdateRevision
				}
				pod := &corev1.Pod{}
				if err := suite.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, pod); err != nil {
					if isNotFound(err) {
						pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns,
							Labels:          map[string]string{"app": "web", appsv1.ControllerRevisionHashLabelKey: want},
							OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}},
							Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
						_ = suite.Client.Create(ctx, pod)
						rolledAt[name] = time.Now()
					}
					all, down = false, down+1
					continue
				}
				rev := pod.Labels[appsv1.ControllerRevisionHashLabelKey]
				ready := podReady(pod)
				if i >= p && rev != want && !blocked {
					// The controller replaces the pod: not Ready first, then on the new revision.
					setPodReady(ctx, pod, false)
					orig := pod.DeepCopy()
					pod.Labels[appsv1.ControllerRevisionHashLabelKey] = want
					_ = suite.Client.Patch(ctx, pod, client.MergeFrom(orig))
					rolledAt[name], rev, ready = time.Now(), want, false
				}
				if !ready && !sim.broken[rev] && time.Since(rolledAt[name]) >= readyAfter {
					setPodReady(ctx, pod, true)
					ready = true
				}
				if !ready {
					down++
				}
				if rev != sts.Status.UpdateRevision {
					all = false
				}
			}
			sim.mu.Lock()
			sim.maxDown = max(sim.maxDown, down)
			sim.mu.Unlock()
			syncStatefulSetStatus(ctx, sts, all)
		}
	}()
	return sim
}

// readStatefulSet reads the StatefulSet "web" of ns and its partition (0 when unset).
func readStatefulSet(ctx context.Context, ns string) (*appsv1.StatefulSet, int32, bool) {
	sts := &appsv1.StatefulSet{}
	if err := suite.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, sts); err != nil {
		return nil, 0, false
	}
	return sts, partitionOf(sts), true
}

// syncStatefulSetStatus plays the StatefulSet controller's status write: the spec observed, and the
// update revision current once every pod runs it (all).
func syncStatefulSetStatus(ctx context.Context, sts *appsv1.StatefulSet, all bool) {
	if (all && sts.Status.CurrentRevision != sts.Status.UpdateRevision) || sts.Status.ObservedGeneration != sts.Generation {
		if all {
			sts.Status.CurrentRevision = sts.Status.UpdateRevision
		}
		sts.Status.ObservedGeneration = sts.Generation
		_ = suite.Client.Status().Update(ctx, sts)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func setPodReady(ctx context.Context, pod *corev1.Pod, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
	_ = suite.Client.Status().Update(ctx, pod)
}

// checkedPods counts the checks per pod (the {{pod}} of the query).
func checkedPods(c *fakeChecker) map[string]int {
	pods := map[string]int{}
	for _, q := range c.recorded() {
		pods[q.Expr]++
	}
	return pods
}

func podQuery(pod string) string { return `errors{pod="` + pod + `"} > 0` }

// batchRollout runs a rollout of a 5-replica StatefulSet to web-r2 with steps and the StatefulSet's
// its default maxUnavailable (1), pods Ready 300ms after their roll; it returns the partitions written, the most
// pods seen not Ready at once, the checks per pod and the PhasedRollout at the end.
func batchRollout(t *testing.T, checker *fakeChecker, steps []rolloutv1alpha1.RolloutStep) ([]int32, int, map[string]int, *rolloutv1alpha1.PhasedRollout, *fixture) {
	f := newFixture(t, 5, 0)
	sim := f.simulateReadiness(300*time.Millisecond, false)
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) {
		pr.Spec.Check.SuccessThreshold = 1
		pr.Spec.Steps = steps
	})
	f.waitPartition(5)
	before := len(checker.recorded())
	f.newRevision("web-r2")
	pr := f.waitRolledTo("web-r2")
	f.waitPartition(5)
	require.Eventually(t, func() bool { v, _ := sim.log.get(); return len(v) > 0 && v[len(v)-1] == 5 && len(v) > 1 }, wait, tick)
	values, _ := sim.log.get()
	checks := map[string]int{}
	for _, q := range checker.recorded()[before:] {
		checks[q.Expr]++
	}
	return values, sim.down(), checks, pr, f
}

// TestStepsReleaseBatches: steps of 2 pods on 5 replicas check after 2, 2 and 1 pods: the checks run
// before the first batch and after each batch, on its lowest ordinal only (web-3, web-1, web-0), never
// mid-batch; with the StatefulSet's default maxUnavailable (1; envtest's API server, like any without
// the MaxUnavailableStatefulSet feature gate, drops the field) each batch is released one pod at a
// time, never two pods down at once although the simulated StatefulSet controller rolls every
// released pod at once. status.batch and a StepReleased Event per partition write say so.
func TestStepsReleaseBatches(t *testing.T) {
	checker := newFakeChecker(VerdictPass)
	startOperator(t, checker)
	values, down, checks, pr, f := batchRollout(t, checker, []rolloutv1alpha1.RolloutStep{{Pods: 2}})
	assert.Equal(t, []int32{5, 4, 3, 2, 1, 0, 5}, values)
	assert.Equal(t, 1, down, "never more than maxUnavailable pods down")
	assert.Equal(t, map[string]int{podQuery("web-4"): 1, podQuery("web-3"): 1, podQuery("web-1"): 1, podQuery("web-0"): 1}, checks, "batches of 2, 2, 1")
	require.NotNil(t, pr.Status.Batch)
	assert.Equal(t, rolloutv1alpha1.BatchStatus{Step: 2, Pods: 1, Released: 1, FromPartition: 1, ToPartition: 0}, *pr.Status.Batch)
	released := 0
	for _, r := range f.eventReasons("pr") {
		if r == rolloutv1alpha1.EventStepReleased {
			released++
		}
	}
	assert.Equal(t, 5, released, "one StepReleased Event per partition write")
}

// TestMaxUnavailableCapsABatch: a batch of 3 with maxUnavailable 1 is released one pod at a time, each
// when the previous one is available, and checked once, on its lowest ordinal.
func TestMaxUnavailableCapsABatch(t *testing.T) {
	checker := newFakeChecker(VerdictPass)
	startOperator(t, checker)
	values, down, checks, _, _ := batchRollout(t, checker, []rolloutv1alpha1.RolloutStep{{Pods: 3}})
	assert.Equal(t, []int32{5, 4, 3, 2, 1, 0, 5}, values, "one pod at a time")
	assert.Equal(t, 1, down, "never more than maxUnavailable pods down")
	assert.Equal(t, map[string]int{podQuery("web-4"): 1, podQuery("web-2"): 1, podQuery("web-0"): 1}, checks, "checks after each whole batch only")
}

// TestStepPause: after the checks of a step with pause.duration passed, the partition stays and no
// check runs until status.batch.pausedUntil, then the next batch is released (StepPaused Event).
func TestStepPause(t *testing.T) {
	checker := newFakeChecker(VerdictPass)
	startOperator(t, checker)
	f := newFixture(t, 3, 0)
	sim := f.simulateReadiness(100*time.Millisecond, false)
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) {
		pr.Spec.Check.SuccessThreshold = 1
		pr.Spec.Steps = []rolloutv1alpha1.RolloutStep{{Pods: 2, Pause: &rolloutv1alpha1.StepPause{Duration: "3s"}}}
	})
	f.waitPartition(3)
	f.newRevision("web-r2")
	var until time.Time
	require.Eventually(t, func() bool {
		b := f.rollout().Status.Batch
		if b != nil && b.PausedUntil != nil {
			until = b.PausedUntil.Time
			return true
		}
		return false
	}, wait, tick, "the pause starts")
	assert.Equal(t, int32(1), f.partition())
	assert.Contains(t, f.rollout().Status.Message, "pauses until")
	checks := len(checker.recorded())
	testsupport.NeverWithin(t, time.Until(until)-500*time.Millisecond, tick, func() bool {
		return f.partition() != 1 || len(checker.recorded()) != checks
	}, "the partition moved or a check ran during the pause")
	f.waitRolledTo("web-r2")
	values, at := sim.log.get()
	require.Equal(t, []int32{3, 2, 1, 0}, values[:4], "maxUnavailable 1: the batch of 2 in two writes")
	assert.False(t, at[3].Before(until), "the next batch was released at %s, before the pause ended at %s", at[3], until)
	f.waitEventReason("pr", rolloutv1alpha1.EventStepPaused)
	assert.Equal(t, map[string]int{podQuery("web-2"): 1, podQuery("web-1"): 1, podQuery("web-0"): 1}, checkedPods(checker))
}
