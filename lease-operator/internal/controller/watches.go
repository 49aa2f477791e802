package controller

import (
	"context"
	"slices"

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

// forgetDeleted drops what the process remembers about a lock once it is deleted: a lock has no
// finalizer, so its reconcile never sees it go.
func (r *Reconciler) forgetDeleted() predicate.Predicate {
	return predicate.Funcs{DeleteFunc: func(e event.DeleteEvent) bool {
		if lock, ok := e.Object.(*leasev1.StatefulSetLock); ok {
			r.forget(lock)
		}
		return true
	}}
}

// lockDeleted lets through only the deletion of a lock (and the start of it: a lock held by another
// finalizer while the garbage collector runs still manages nothing new).
func lockDeleted() predicate.TypedPredicate[*leasev1.StatefulSetLock] {
	return predicate.TypedFuncs[*leasev1.StatefulSetLock]{
		CreateFunc:  func(event.TypedCreateEvent[*leasev1.StatefulSetLock]) bool { return false },
		GenericFunc: func(event.TypedGenericEvent[*leasev1.StatefulSetLock]) bool { return false },
		UpdateFunc: func(e event.TypedUpdateEvent[*leasev1.StatefulSetLock]) bool {
			return e.ObjectOld.DeletionTimestamp.IsZero() && !e.ObjectNew.DeletionTimestamp.IsZero()
		},
	}
}

// siblingHandler maps a lock to the other locks naming the same StatefulSet: the ones waiting in
// StatefulSetConflict behind it.
func (r *Reconciler) siblingHandler() handler.TypedEventHandler[*leasev1.StatefulSetLock, reconcile.Request] {
	return handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, lock *leasev1.StatefulSetLock) []reconcile.Request {
		reqs := r.locksNaming(ctx, lock.Namespace, indexLockStatefulSet, lock.Spec.StatefulSetName)
		return slices.DeleteFunc(reqs, func(req reconcile.Request) bool { return req.Name == lock.Name })
	})
}

// podChanged lets through what can change the election, the labels or the operator-written endpoints:
// readiness, deletion, node, IP, role label and epoch. The operator's own label patches are dropped before it (opsutil.IgnoreOwnWrites).
func podChanged() predicate.TypedPredicate[*corev1.Pod] {
	return predicate.TypedFuncs[*corev1.Pod]{UpdateFunc: func(e event.TypedUpdateEvent[*corev1.Pod]) bool {
		o, n := e.ObjectOld, e.ObjectNew
		return opsutil.PodReady(o) != opsutil.PodReady(n) || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero() ||
			o.Spec.NodeName != n.Spec.NodeName || o.Status.PodIP != n.Status.PodIP ||
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

// locksOfPod maps a pod to the locks naming its StatefulSet and to the lock that labelled it: when that
// one no longer exists its reconcile removes the labels (reconcileGone), so an operator started after
// a lock was deleted (a re-install) cleans up after it.
func (r *Reconciler) locksOfPod(ctx context.Context, pod *corev1.Pod) []reconcile.Request {
	var reqs []reconcile.Request
	if sts, ok := opsutil.ControllerOfKind(pod, "StatefulSet"); ok {
		reqs = r.locksNaming(ctx, pod.Namespace, indexLockStatefulSet, sts.Name)
	}
	if name := pod.Labels[leasev1.LockLabel]; name != "" {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pod.Namespace, Name: name}})
	}
	return reqs
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
