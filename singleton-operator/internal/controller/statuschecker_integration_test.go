//go:build integration

package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// statusChecker watches every status the operator writes for the StatefulSingletons of a namespace and
// checks it against itself and the pods at that moment. The pods are read when the status arrives, so
// they may already be a step further; what happened after the write is told apart by the epoch (a pod
// released after the write carries an epoch above status.epoch, or the one the write reserved) and by
// the pods the test itself
// stopped (stopped). The checks:
//   - observedGeneration on every condition equals status.observedGeneration; Stalled and Reconciling
//     are never both True;
//   - Ready=True: phase Running, neither Stalled nor Reconciling, and status.activePod names the pod
//     released at that moment (same UID, an epoch of at most status.epoch), the only one;
//   - Reconciling=True (Handover): phase Transitioning or Failed, Ready=False, and a pod was held at
//     that moment (held now, or released with an epoch above status.epoch);
//   - Ready=False NoPods: no pod was released at that moment;
//   - a deletion that waits ("deletion waits" message): a pod was held at that moment.
type statusChecker struct {
	mu         sync.Mutex
	violations []string
	writes     int
	stopped    map[string]bool // pods the test confirmed stopped: gone since
}

func (f *fixture) checkStatuses() *statusChecker {
	ch := &statusChecker{stopped: map[string]bool{}}
	w, err := suite.Client.Watch(f.t.Context(), &singletonv1.StatefulSingletonList{}, client.InNamespace(f.ns))
	require.NoError(f.t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			ss, ok := ev.Object.(*singletonv1.StatefulSingleton)
			if !ok || ev.Type == watch.Deleted || ss.Status.ObservedGeneration == 0 {
				continue
			}
			var pods corev1.PodList
			if err := suite.Client.List(context.Background(), &pods, client.InNamespace(f.ns)); err != nil {
				continue
			}
			ch.mu.Lock()
			ch.writes++
			for _, p := range ch.problems(ss, pods.Items) {
				ch.violations = append(ch.violations, fmt.Sprintf("rv %s (%s, %q): %s", ss.ResourceVersion, ss.Status.Phase, ss.Status.Message, p))
			}
			ch.mu.Unlock()
		}
	}()
	f.t.Cleanup(func() {
		w.Stop()
		<-done
		ch.mu.Lock()
		defer ch.mu.Unlock()
		f.t.Logf("status checker: %d statuses checked, %d violations", ch.writes, len(ch.violations))
		for _, v := range ch.violations {
			f.t.Errorf("status contradicts itself or the cluster: %s", v)
		}
	})
	return ch
}

// stop confirms the pod's stop (fixture.confirmStop) and tells the checker it is gone since.
func (ch *statusChecker) stop(f *fixture, name string) {
	ch.mu.Lock()
	ch.stopped[name] = true
	ch.mu.Unlock()
	f.confirmStop(name)
}

func (ch *statusChecker) problems(ss *singletonv1.StatefulSingleton, pods []corev1.Pod) []string {
	st := ss.Status
	out := testsupport.KstatusProblems(st.Conditions, st.ObservedGeneration)
	stalled := meta.IsStatusConditionTrue(st.Conditions, singletonv1.ConditionStalled)
	reconciling := meta.IsStatusConditionTrue(st.Conditions, singletonv1.ConditionReconciling)
	var releasedThen []*corev1.Pod // released at the write and not terminal
	heldThen := false
	for i := range pods {
		p := &pods[i]
		switch classify(p) {
		case stateHeld:
			heldThen = true
		case stateReleased:
			// Released after the write: an epoch above status.epoch, or the epoch the write reserved
			// (reserveAndList writes it before the release) for a pod the write does not name yet.
			if e := podEpoch(p); e > st.Epoch || e == st.Epoch && p.Name != st.ActivePod {
				heldThen = true
			} else {
				releasedThen = append(releasedThen, p)
			}
		}
	}
	ready := meta.FindStatusCondition(st.Conditions, singletonv1.ConditionReady)
	if ready == nil {
		return append(out, "no Ready condition")
	}
	switch {
	case ready.Status == metav1.ConditionTrue:
		if st.Phase != singletonv1.PhaseRunning || stalled || reconciling {
			out = append(out, fmt.Sprintf("Ready=True with phase %s, Stalled %v, Reconciling %v", st.Phase, stalled, reconciling))
		}
		switch {
		case len(releasedThen) > 1:
			out = append(out, "Ready=True while pods "+podNames(releasedThen)+" are all released")
		case len(releasedThen) == 1 && (releasedThen[0].Name != st.ActivePod || string(releasedThen[0].UID) != st.ActivePodUID):
			out = append(out, fmt.Sprintf("activePod %s (%s) but pod %s is the released one", st.ActivePod, st.ActivePodUID, releasedThen[0].Name))
		case len(releasedThen) == 0 && !ch.stopped[st.ActivePod]:
			out = append(out, fmt.Sprintf("activePod %s is not a released pod", st.ActivePod))
		}
	case ready.Reason == singletonv1.ReasonNoPods:
		if len(releasedThen) > 0 {
			out = append(out, "NoPods while pods "+podNames(releasedThen)+" are released")
		}
	}
	if reconciling {
		if st.Phase != singletonv1.PhaseTransitioning && st.Phase != singletonv1.PhaseFailed || ready.Status != metav1.ConditionFalse {
			out = append(out, fmt.Sprintf("Reconciling with phase %s and Ready %s", st.Phase, ready.Status))
		}
		if !heldThen {
			out = append(out, "Reconciling (handover) while no pod is held")
		}
	}
	if strings.HasPrefix(st.Message, deletionWaits) && !heldThen {
		out = append(out, "deletion waits while no pod is held")
	}
	return out
}

// TestStatusNeverContradictsItself (issue 16) drives a StatefulSingleton through its states — no pod,
// the first pod released and running, a RollingUpdate handover, a handover during which it is deleted
// — while statusChecker checks every status written against the pods at that moment.
func TestStatusNeverContradictsItself(t *testing.T) {
	f := newFixture(t)
	watchOverlaps(t, f.ns)
	ch := f.checkStatuses()
	rs1, rs2, rs3 := f.createReplicaSet("db-1", 1), f.createReplicaSet("db-2", 2), f.createReplicaSet("db-3", 3)
	startOperator(t, nil)
	f.createSingleton("db")
	f.waitCondition("db", singletonv1.ConditionReady, metav1.ConditionFalse)
	assert.Equal(t, singletonv1.ReasonNoPods, findCondition(f.singleton("db"), singletonv1.ConditionReady).Reason)

	f.createPod("a", held(singletonv1.HoldModeWrapper), ownedBy(rs1))
	f.waitReleased("a")
	f.waitCondition("db", singletonv1.ConditionReady, metav1.ConditionTrue)

	f.createPod("b", held(singletonv1.HoldModeWrapper), ownedBy(rs2))
	f.waitCondition("db", singletonv1.ConditionReconciling, metav1.ConditionTrue)
	require.Eventually(t, func() bool { return !f.pod("a").DeletionTimestamp.IsZero() }, wait, tick)
	ch.stop(f, "a")
	f.waitReleased("b")
	require.Eventually(t, func() bool {
		ss := f.singleton("db")
		return ss.Status.ActivePod == "b" && meta.IsStatusConditionTrue(ss.Status.Conditions, singletonv1.ConditionReady)
	}, wait, tick)

	f.createPod("c", held(singletonv1.HoldModeWrapper), ownedBy(rs3))
	require.Eventually(t, func() bool { return f.hasFinalizer("db") && !f.pod("b").DeletionTimestamp.IsZero() }, wait, tick)
	require.NoError(t, suite.Client.Delete(t.Context(), f.singleton("db")))
	require.Eventually(t, func() bool { return strings.HasPrefix(f.singleton("db").Status.Message, deletionWaits) }, wait, tick)
	require.Eventually(t, func() bool {
		evs := testsupport.Events(t, suite.Client, f.ns, "StatefulSingleton", "db", singletonv1.ReasonDeletionWaiting)
		return len(evs) == 1 && testsupport.Occurrences(evs) == 1
	}, wait, tick, "one DeletionWaiting Event")
	ch.stop(f, "b")
	f.waitReleased("c")
	require.Eventually(t, func() bool { return f.singletonGone("db") }, wait, tick)

	ch.mu.Lock()
	defer ch.mu.Unlock()
	assert.Greater(t, ch.writes, 5, "statuses checked")
}
