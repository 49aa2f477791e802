package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// Watches: a StatefulCluster's spec changes and deletion; its pods (and orphans its selector
// matches) on every change that can alter a decision; its claims; node readiness and taints, mapped to
// the StatefulClusters with pods on that node. The operator's own status writes do not wake it (but for
// one a reconcile waits for, ownwrites.go).

// clusterPredicate lets through creation, deletion and spec (generation) changes, and the update that
// catches the cache up with a status write a reconcile stopped for (ownwrites.go).
func (r *Reconciler) clusterPredicate() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		if e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
			e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero() {
			return true
		}
		sc, ok := e.ObjectNew.(*clusterv1alpha1.StatefulCluster)
		return ok && r.writes.caughtUp(sc)
	}}
}

// podPredicate lets through what can change a decision: phase, readiness, deletion, node, labels,
// owners.
func podPredicate() predicate.TypedPredicate[*corev1.Pod] {
	return predicate.TypedFuncs[*corev1.Pod]{UpdateFunc: func(e event.TypedUpdateEvent[*corev1.Pod]) bool {
		o, n := e.ObjectOld, e.ObjectNew
		return opsutil.PodReady(o) != opsutil.PodReady(n) || o.Status.Phase != n.Status.Phase || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero() ||
			o.Spec.NodeName != n.Spec.NodeName || !labels.Equals(o.Labels, n.Labels) ||
			len(o.OwnerReferences) != len(n.OwnerReferences)
	}}
}

// podHandler maps a pod to its StatefulCluster (its controller, or for an orphan every StatefulCluster
// of the namespace whose selector matches it) and keeps the operator's memory of pods current.
func (r *Reconciler) podHandler() handler.TypedEventHandler[*corev1.Pod, reconcile.Request] {
	seen := func(pod *corev1.Pod) {
		if opsutil.PodReady(pod) {
			r.mem.markReady(pod.UID)
		}
		if key, ok := opsutil.ControllerOfKind(pod, "StatefulCluster"); ok {
			r.mem.observed(key, pod.Name)
		}
	}
	gone := func(pod *corev1.Pod) {
		if key, ok := opsutil.ControllerOfKind(pod, "StatefulCluster"); ok {
			r.mem.podGone(key, gonePod{name: pod.Name, uid: pod.UID, node: pod.Spec.NodeName, created: pod.CreationTimestamp.Time}, r.Clock.Now())
		}
	}
	return opsutil.PodHandler(r.clustersOfPod, seen, gone)
}

func (r *Reconciler) clustersOfPod(ctx context.Context, pod *corev1.Pod) []reconcile.Request {
	if ref := metav1.GetControllerOf(pod); ref != nil {
		if ref.Kind != "StatefulCluster" || ref.APIVersion != clusterv1alpha1.GroupVersion.String() {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name}}}
	}
	if !pod.DeletionTimestamp.IsZero() {
		return nil
	}
	var list clusterv1alpha1.StatefulClusterList
	if err := r.Cache.List(ctx, &list, client.InNamespace(pod.Namespace)); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list StatefulClusters", "namespace", pod.Namespace)
		return nil
	}
	var reqs []reconcile.Request
	for _, sc := range list.Items {
		sel, err := metav1.LabelSelectorAsSelector(sc.Spec.Selector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(pod.Labels)) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: sc.Namespace, Name: sc.Name}})
		}
	}
	return reqs
}

// claimPredicate lets through deletions and label changes of the operator's claims (creation too:
// a claim whose pod is gone must be retired).
func claimPredicate() predicate.TypedPredicate[*corev1.PersistentVolumeClaim] {
	return predicate.TypedFuncs[*corev1.PersistentVolumeClaim]{UpdateFunc: func(e event.TypedUpdateEvent[*corev1.PersistentVolumeClaim]) bool {
		return !labels.Equals(e.ObjectOld.Labels, e.ObjectNew.Labels) ||
			e.ObjectOld.DeletionTimestamp.IsZero() != e.ObjectNew.DeletionTimestamp.IsZero()
	}}
}

func claimHandler() handler.TypedEventHandler[*corev1.PersistentVolumeClaim, reconcile.Request] {
	return handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, c *corev1.PersistentVolumeClaim) []reconcile.Request {
		name := c.Labels[clusterv1alpha1.ClusterNameLabel]
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: name}}}
	})
}

// nodePredicate lets through changes of a node's readiness and taints.
func nodePredicate() predicate.TypedPredicate[*corev1.Node] {
	return predicate.TypedFuncs[*corev1.Node]{
		CreateFunc: func(event.TypedCreateEvent[*corev1.Node]) bool { return false },
		UpdateFunc: func(e event.TypedUpdateEvent[*corev1.Node]) bool {
			return opsutil.NodeReadyStatus(e.ObjectOld) != opsutil.NodeReadyStatus(e.ObjectNew) || len(e.ObjectOld.Spec.Taints) != len(e.ObjectNew.Spec.Taints)
		},
	}
}

// nodeHandler maps a node to the StatefulClusters of the pods on it.
func (r *Reconciler) nodeHandler() handler.TypedEventHandler[*corev1.Node, reconcile.Request] {
	return handler.TypedEnqueueRequestsFromMapFunc(opsutil.NodeToPodOwners(r.Cache, indexPodNode,
		func(_ context.Context, pod *corev1.Pod) []reconcile.Request {
			if key, ok := opsutil.ControllerOfKind(pod, "StatefulCluster"); ok {
				return []reconcile.Request{{NamespacedName: key}}
			}
			return nil
		}, nil))
}
