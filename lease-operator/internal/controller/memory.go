package controller

import (
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// What the operator keeps in memory between reconciles, besides its own writes (Reconciler.writes).

// observations remember, per pod UID, when the operator first saw the pod unable to serve (not
// Ready, terminating, gone) and, per node, when it first saw the node NotReady: the start of the
// failover-delay timer and of the failover-latency measurement. They live in memory: after a restart
// the delay starts again, which errs on the side of not failing over.
type observations struct {
	mu    sync.Mutex
	since map[string]time.Time
}

func newObservations() *observations { return &observations{since: map[string]time.Time{}} }

// maxObservations bounds the memory of observations about pods that are long gone.
const maxObservations = 10000

func (o *observations) mark(key string, now time.Time) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	if t, ok := o.since[key]; ok {
		return t
	}
	if len(o.since) >= maxObservations {
		for k, t := range o.since {
			if now.Sub(t) > 2*time.Hour {
				delete(o.since, k)
			}
		}
	}
	o.since[key] = now
	return now
}

func (o *observations) clear(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.since, key)
}

func (o *observations) get(key string) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t, ok := o.since[key]
	return t, ok
}

// notReadySince returns when the pod was first seen not Ready, marking it now if it was not yet.
func (o *observations) notReadySince(uid types.UID, now time.Time) time.Time {
	return o.mark("pod/"+string(uid), now)
}

// unusableSince returns when the old holder was first seen unusable, for the latency metric.
func (o *observations) unusableSince(holder Holder) (time.Time, bool) {
	if holder.UID != "" {
		if t, ok := o.get("pod/" + string(holder.UID)); ok {
			return t, true
		}
	}
	return time.Time{}, false
}

func podKey(pod *corev1.Pod) string { return "pod/" + string(pod.UID) }

// usable reports whether the pod, as far as the pod alone tells, can serve as the writer.
func usable(pod *corev1.Pod) bool { return opsutil.PodReady(pod) && pod.DeletionTimestamp.IsZero() }

// writtenConditions remembers, per lock, the conditions this process last wrote (or found written).
// The waiting Event compares the new conditions with these rather than with the lock as read: a
// reconcile may read the lock from a cache that does not show its own last status write yet, and
// would otherwise announce the same wait twice. After a restart the lock as read is the reference.
// The WriteTracker cannot stand in for it: it knows that the cached lock is behind the last status
// write (Behind), not what that write said, and the reconcile must go on from the lagging copy (the
// status write's own watch event is dropped, so waiting for it would stall the lock).
type writtenConditions struct {
	mu    sync.Mutex
	byUID map[types.UID][]metav1.Condition
}

func newWrittenConditions() *writtenConditions {
	return &writtenConditions{byUID: map[types.UID][]metav1.Condition{}}
}

// swap returns the conditions last recorded for the lock (read, when none was) and records the lock's
// current ones.
func (w *writtenConditions) swap(lock *leasev1.StatefulSetLock, read []metav1.Condition) []metav1.Condition {
	w.mu.Lock()
	defer w.mu.Unlock()
	before, ok := w.byUID[lock.UID]
	if !ok {
		before = read
	}
	w.byUID[lock.UID] = slices.Clone(lock.Status.Conditions)
	return before
}

func (w *writtenConditions) forget(lock *leasev1.StatefulSetLock) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.byUID, lock.UID)
}
