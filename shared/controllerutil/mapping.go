package controllerutil

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
