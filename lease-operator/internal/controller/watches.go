package controller

import (
	"context"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

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

// lockChanged lets through the lock's creation, deletion and changes of its spec or annotations (the
// switchover annotation). The operator's own writes (status, finalizer, annotation) are dropped before
// it (opsutil.IgnoreOwnWrites).
func lockChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
			e.ObjectOld.GetAnnotations()[leasev1.SwitchoverAnnotation] != e.ObjectNew.GetAnnotations()[leasev1.SwitchoverAnnotation] ||
			e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
	}}
}

// podChanged lets through what can change the election or the labels: readiness, deletion, node, role
// label and epoch. The operator's own label patches are dropped before it (opsutil.IgnoreOwnWrites).
func podChanged() predicate.TypedPredicate[*corev1.Pod] {
	return predicate.TypedFuncs[*corev1.Pod]{UpdateFunc: func(e event.TypedUpdateEvent[*corev1.Pod]) bool {
		o, n := e.ObjectOld, e.ObjectNew
		return opsutil.PodReady(o) != opsutil.PodReady(n) || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero() ||
			o.Spec.NodeName != n.Spec.NodeName ||
			o.Labels[leasev1.RoleLabel] != n.Labels[leasev1.RoleLabel] ||
			o.Annotations[leasev1.WriterEpochAnnotation] != n.Annotations[leasev1.WriterEpochAnnotation]
	}}
}

// podHandler maps a pod to the locks naming its StatefulSet, and notes when a pod stops being usable
// (the start of the failover-latency measurement) as soon as the event arrives.
func (r *Reconciler) podHandler() handler.TypedEventHandler[*corev1.Pod, reconcile.Request] {
	seen := func(pod *corev1.Pod) {
		if usable(pod) {
			r.obs.clear(podKey(pod))
		} else {
			r.obs.mark(podKey(pod), r.Clock.Now())
		}
	}
	gone := func(pod *corev1.Pod) {
		r.obs.mark(podKey(pod), r.Clock.Now())
		r.writes.Forget(pod)
	}
	return opsutil.PodHandler(r.locksOfPod, seen, gone)
}

func (r *Reconciler) locksOfPod(ctx context.Context, pod *corev1.Pod) []reconcile.Request {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "StatefulSet" {
		return nil
	}
	return r.locksNaming(ctx, pod.Namespace, indexLockStatefulSet, ref.Name)
}

// locksNaming returns the locks of the namespace whose indexed field has that value.
func (r *Reconciler) locksNaming(ctx context.Context, namespace, index, value string) []reconcile.Request {
	var locks leasev1.StatefulSetLockList
	if err := r.Cache.List(ctx, &locks, client.InNamespace(namespace), client.MatchingFields{index: value}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list StatefulSetLocks", "namespace", namespace, index, value)
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(locks.Items))
	for _, l := range locks.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: l.Namespace, Name: l.Name}})
	}
	return reqs
}

// leaseHandler maps a Lease to every lock naming it: its owner, and any lock waiting in LeaseConflict.
func (r *Reconciler) leaseHandler() handler.TypedEventHandler[*coordinationv1.Lease, reconcile.Request] {
	return handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, lease *coordinationv1.Lease) []reconcile.Request {
		return r.locksNaming(ctx, lease.Namespace, indexLockLease, lease.Name)
	})
}

// statefulSetPredicate lets through creations and deletions: a lock waits for a missing StatefulSet.
// Scaling and rollouts show up as pod events.
func statefulSetPredicate() predicate.TypedPredicate[*metav1.PartialObjectMetadata] {
	return predicate.TypedFuncs[*metav1.PartialObjectMetadata]{
		UpdateFunc: func(event.TypedUpdateEvent[*metav1.PartialObjectMetadata]) bool { return false },
	}
}

func (r *Reconciler) statefulSetHandler() handler.TypedEventHandler[*metav1.PartialObjectMetadata, reconcile.Request] {
	return handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, sts *metav1.PartialObjectMetadata) []reconcile.Request {
		return r.locksNaming(ctx, sts.Namespace, indexLockStatefulSet, sts.Name)
	})
}

// nodePredicate lets through changes of a node's readiness.
func (r *Reconciler) nodePredicate() predicate.TypedPredicate[*corev1.Node] {
	return predicate.TypedFuncs[*corev1.Node]{
		CreateFunc: func(event.TypedCreateEvent[*corev1.Node]) bool { return false },
		UpdateFunc: func(e event.TypedUpdateEvent[*corev1.Node]) bool {
			return opsutil.NodeReady(e.ObjectOld) != opsutil.NodeReady(e.ObjectNew)
		},
	}
}

// nodeHandler maps a node to the locks of the StatefulSet pods on it, noting when those pods became
// unusable because of their node.
func (r *Reconciler) nodeHandler() handler.TypedEventHandler[*corev1.Node, reconcile.Request] {
	return handler.TypedEnqueueRequestsFromMapFunc(opsutil.NodeToPodOwners(r.Cache, indexPodNode, r.locksOfPod,
		func(node *corev1.Node, pod *corev1.Pod) {
			if !opsutil.NodeReady(node) {
				r.obs.mark(podKey(pod), r.Clock.Now())
			}
		}))
}

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
