//go:build integration

package controller

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// TestStatusNeverContradictsTheCluster drives locks through their states — no pods, the first
// election, a failover, a switchover, a second lock on the same StatefulSet (StatefulSetConflict), a lock
// on another StatefulSet naming the same Lease (LeaseConflict), and the first lock's deletion — while a
// checker compares every status written with the pods and Leases at that moment (statusChecker).
func TestStatusNeverContradictsTheCluster(t *testing.T) {
	f := newFixture(t)
	ch := f.checkStatuses()
	startOperator(t, nil)

	f.createLock("lock", 2)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, leasev1.ReasonNoReadyPods, condition(f.lock("lock"), leasev1.ConditionReady).Reason)
	}, wait, tick)
	f.createPod(0, false)
	f.createPod(1, true)
	f.waitWriter("db-1", "1") // the only Ready pod
	f.createPod(2, true)
	f.setReady("db-0", true)
	f.setReady("db-1", false) // failover: lowest Ready ordinal
	f.waitWriter("db-0", "2")
	f.setReady("db-1", true)
	f.switchover("lock", "db-2")
	f.waitWriter("db-2", "3")

	other := f.createStatefulSetNamed("other")
	f.createPodOf(other, 0, true, "node-a")
	f.createLock("second", 2, func(l *leasev1.StatefulSetLock) { l.Spec.LeaseName = "second-lease" })
	f.createLock("intruder", 2, func(l *leasev1.StatefulSetLock) { l.Spec.StatefulSetName, l.Spec.LeaseName = "other", "lock-lease" })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, leasev1.ReasonStatefulSetConflict, condition(f.lock("second"), leasev1.ConditionReady).Reason)
		assert.Equal(c, leasev1.ReasonLeaseConflict, condition(f.lock("intruder"), leasev1.ConditionReady).Reason)
	}, wait, tick)

	// The first lock goes: its labels and Lease with it; the second lock takes over its StatefulSet and
	// the intruder the Lease.
	require.NoError(t, suite.Client.Delete(t.Context(), f.lock("lock")))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, metav1.ConditionTrue, condition(f.lock("second"), leasev1.ConditionReady).Status)
		assert.Equal(c, metav1.ConditionTrue, condition(f.lock("intruder"), leasev1.ConditionReady).Status)
		assert.Equal(c, "other-0", f.lock("intruder").Status.WriterPod)
	}, wait, tick)
	time.Sleep(2 * time.Second) // a renewal of each, checked too
	assert.Positive(t, ch.checked())
}

// statusChecker watches the namespace's locks, pods and Leases from before the operator starts and,
// when the test ends, replays their events in resourceVersion order (the API server's one etcd revision
// order), so each status written is compared with the pods and Leases exactly as they were when it
// was written:
//   - observedGeneration on every condition; Stalled and Reconciling never both True; Ready=False only
//     with one of them (kstatus never reads a lock without a writer as Current);
//   - Ready=True: status.writerPod is the one pod the lock labelled writer, with the status's epoch,
//     and the holder of the lock's Lease, owned by it, at status.leaseTransitions;
//   - no writer (NoReadyPods) or waiting for the user (Stalled): the lock labels no pod writer;
//   - at every revision: no Lease without a holder, no two pods labelled writer for one Lease.
type statusChecker struct {
	mu       sync.Mutex
	events   []checkedEvent
	statuses int
}

type checkedEvent struct {
	rv      int64
	deleted bool
	obj     client.Object
}

func (f *fixture) checkStatuses() *statusChecker {
	ch := &statusChecker{}
	var stops []func()
	for _, list := range []client.ObjectList{&leasev1.StatefulSetLockList{}, &corev1.PodList{}, &coordinationv1.LeaseList{}} {
		w, err := suite.Client.Watch(f.t.Context(), list, client.InNamespace(f.ns))
		require.NoError(f.t, err)
		stops = append(stops, w.Stop)
		go func() {
			for ev := range w.ResultChan() {
				obj, ok := ev.Object.(client.Object)
				if !ok || ev.Type == watch.Error || ev.Type == watch.Bookmark {
					continue
				}
				rv, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
				if err != nil {
					continue
				}
				ch.mu.Lock()
				ch.events = append(ch.events, checkedEvent{rv: rv, deleted: ev.Type == watch.Deleted, obj: obj})
				ch.mu.Unlock()
			}
		}()
	}
	f.t.Cleanup(func() {
		time.Sleep(500 * time.Millisecond) // the last events in flight
		for _, stop := range stops {
			stop()
		}
		violations, statuses := ch.replay()
		f.t.Logf("status checker: %d statuses checked, %d violations", statuses, len(violations))
		for _, v := range violations {
			f.t.Errorf("status contradicts itself or the cluster: %s", v)
		}
	})
	return ch
}

// checked is the number of lock statuses seen so far.
func (ch *statusChecker) checked() int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	n := 0
	for _, e := range ch.events {
		if l, ok := e.obj.(*leasev1.StatefulSetLock); ok && l.Status.ObservedGeneration != 0 {
			n++
		}
	}
	return n
}

func (ch *statusChecker) replay() (violations []string, statuses int) {
	ch.mu.Lock()
	events := slices.Clone(ch.events)
	ch.mu.Unlock()
	slices.SortStableFunc(events, func(a, b checkedEvent) int { return int(a.rv - b.rv) })
	pods, leases := map[string]*corev1.Pod{}, map[string]*coordinationv1.Lease{}
	lastStatus := map[string]string{}
	for _, e := range events {
		at := func(format string, args ...any) {
			violations = append(violations, fmt.Sprintf("rv %d %s %s: %s", e.rv, kindOf(e.obj), e.obj.GetName(), fmt.Sprintf(format, args...)))
		}
		switch o := e.obj.(type) {
		case *corev1.Pod:
			setOrDrop(pods, o.Name, o, e.deleted)
			byLease := map[string][]string{}
			for _, p := range pods {
				if p.Labels[leasev1.RoleLabel] == leasev1.RoleWriter && p.Annotations[leasev1.WriterLeaseAnnotation] != "" {
					byLease[p.Annotations[leasev1.WriterLeaseAnnotation]] = append(byLease[p.Annotations[leasev1.WriterLeaseAnnotation]], p.Name)
				}
			}
			for lease, ws := range byLease {
				if len(ws) > 1 {
					at("pods %v all labelled writer for Lease %s", ws, lease)
				}
			}
		case *coordinationv1.Lease:
			setOrDrop(leases, o.Name, o, e.deleted)
			if !e.deleted && ptr.Deref(o.Spec.HolderIdentity, "") == "" {
				at("a Lease without a holder")
			}
		case *leasev1.StatefulSetLock:
			if e.deleted || o.Status.ObservedGeneration == 0 {
				continue
			}
			// Only a status write is checked (a spec or metadata change repeats the last status).
			key := fmt.Sprintf("%v", o.Status)
			if lastStatus[o.Name] == key {
				continue
			}
			lastStatus[o.Name] = key
			statuses++
			for _, p := range lockStatusProblems(o, pods, leases) {
				at("%s", p)
			}
		}
	}
	return violations, statuses
}

func lockStatusProblems(lock *leasev1.StatefulSetLock, pods map[string]*corev1.Pod, leases map[string]*coordinationv1.Lease) []string {
	st := lock.Status
	out := testsupport.KstatusProblems(st.Conditions, st.ObservedGeneration)
	stalled := meta.IsStatusConditionTrue(st.Conditions, leasev1.ConditionStalled)
	reconciling := meta.IsStatusConditionTrue(st.Conditions, leasev1.ConditionReconciling)
	ready := meta.FindStatusCondition(st.Conditions, leasev1.ConditionReady)
	if ready == nil {
		return append(out, "no Ready condition")
	}
	var labelled []*corev1.Pod // the pods this lock labelled writer
	for _, p := range pods {
		if p.Labels[leasev1.LockLabel] == lock.Name && p.Labels[leasev1.RoleLabel] == leasev1.RoleWriter {
			labelled = append(labelled, p)
		}
	}
	switch {
	case ready.Status == metav1.ConditionFalse && !stalled && !reconciling:
		out = append(out, "Ready=False ("+ready.Reason+") with neither Stalled nor Reconciling: kstatus reads Current")
	case ready.Status == metav1.ConditionTrue:
		if len(labelled) != 1 || labelled[0].Name != st.WriterPod || string(labelled[0].UID) != st.WriterPodUID {
			out = append(out, fmt.Sprintf("Ready=True with writer %s, but the pods labelled writer are %v", st.WriterPod, names(labelled)))
		} else if epoch := labelled[0].Annotations[leasev1.WriterEpochAnnotation]; epoch != epochString(st.LeaseTransitions) {
			out = append(out, fmt.Sprintf("writer epoch %s, status leaseTransitions %d", epoch, st.LeaseTransitions))
		}
		lease := leases[lock.Spec.LeaseName]
		switch {
		case lease == nil:
			out = append(out, "Ready=True without a Lease")
		case !metav1.IsControlledBy(lease, lock):
			out = append(out, "Ready=True with a Lease it does not own")
		case ptr.Deref(lease.Spec.HolderIdentity, "") != st.WriterPod || ptr.Deref(lease.Spec.LeaseTransitions, 0) != st.LeaseTransitions:
			out = append(out, fmt.Sprintf("writer %s at %d, Lease holder %s at %d", st.WriterPod, st.LeaseTransitions,
				ptr.Deref(lease.Spec.HolderIdentity, ""), ptr.Deref(lease.Spec.LeaseTransitions, 0)))
		}
	case ready.Reason == leasev1.ReasonNoReadyPods || stalled:
		if len(labelled) != 0 {
			out = append(out, fmt.Sprintf("Ready=False %s, but it labelled %v writer", ready.Reason, names(labelled)))
		}
	}
	return out
}

func setOrDrop[T any](m map[string]*T, name string, obj *T, deleted bool) {
	if deleted {
		delete(m, name)
		return
	}
	m[name] = obj
}

func names(pods []*corev1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func kindOf(obj client.Object) string {
	switch obj.(type) {
	case *corev1.Pod:
		return "pod"
	case *coordinationv1.Lease:
		return "lease"
	}
	return "lock"
}
