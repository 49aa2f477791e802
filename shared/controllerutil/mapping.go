package controllerutil

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// ControllerOfKind returns the namespace/name of obj's controller when it is of that kind.
func ControllerOfKind(obj metav1.Object, kind string) (types.NamespacedName, bool) {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.Kind != kind {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: obj.GetNamespace(), Name: ref.Name}, true
}

// NodeToPodOwners maps a node to the objects its pods belong to: it lists the pods on the node from
// reader through the field index podNodeIndex (spec.nodeName) and returns, without repeats, what
// owners says of each pod. visit, when not nil, sees every pod first (to note the node's state).
func NodeToPodOwners(reader client.Reader, podNodeIndex string, owners func(context.Context, *corev1.Pod) []reconcile.Request,
	visit func(*corev1.Node, *corev1.Pod)) handler.TypedMapFunc[*corev1.Node, reconcile.Request] {
	return func(ctx context.Context, node *corev1.Node) []reconcile.Request {
		var pods corev1.PodList
		if err := reader.List(ctx, &pods, client.MatchingFields{podNodeIndex: node.Name}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Failed to list pods", "node", node.Name)
			return nil
		}
		seen := map[reconcile.Request]bool{}
		var reqs []reconcile.Request
		for i := range pods.Items {
			pod := &pods.Items[i]
			if visit != nil {
				visit(node, pod)
			}
			for _, req := range owners(ctx, pod) {
				if !seen[req] {
					seen[req] = true
					reqs = append(reqs, req)
				}
			}
		}
		return reqs
	}
}

// PodHandler enqueues what owners maps a pod to on every create, update and delete event. seen, when
// not nil, sees a created or updated pod first, gone a deleted one: a controller keeps what it
// remembers of pods (readiness, when they became unusable) current there, before the reconcile runs.
func PodHandler(owners func(context.Context, *corev1.Pod) []reconcile.Request, seen, gone func(*corev1.Pod)) handler.TypedEventHandler[*corev1.Pod, reconcile.Request] {
	on := func(ctx context.Context, pod *corev1.Pod, hook func(*corev1.Pod), q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if hook != nil {
			hook(pod)
		}
		for _, req := range owners(ctx, pod) {
			q.Add(req)
		}
	}
	return handler.TypedFuncs[*corev1.Pod, reconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[*corev1.Pod], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			on(ctx, e.Object, seen, q)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[*corev1.Pod], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			on(ctx, e.ObjectNew, seen, q)
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[*corev1.Pod], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			on(ctx, e.Object, gone, q)
		},
	}
}
