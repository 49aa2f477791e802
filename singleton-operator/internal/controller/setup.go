package controller

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups="",resources=pods/status,verbs=patch;update
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// Namespaces: patched only to set or remove apps.statefulsingleton.com/enabled, which scopes the pod
// webhook; config/policy/namespaces.yaml refuses any other Namespace change for this ServiceAccount.
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;patch
// ReplicaSets and StatefulSets: read to rank held pods by revision; Deployments: read for the strategy audit
// (StrategyAdvice). Nothing of apps is written.
// +kubebuilder:rbac:groups=apps,resources=replicasets;statefulsets;deployments,verbs=get;list;watch

// Reconciler reconciles StatefulSingletons.
//
// Its Client writes pods, namespaces and StatefulSingletons; its Cache holds the managed pods
// (CacheOptions); its APIReader lists pods right before a release.
type Reconciler struct {
	opsutil.Access
	// caches holds, per StatefulSingleton selector, the pods of that selector Cache leaves out (no
	// managed label), and per namespace holding a StatefulSingleton the ReplicaSets and StatefulSets
	// that rank pods (caches.go).
	caches *namespaceCaches

	mu       sync.Mutex
	goneAt   map[types.NamespacedName]time.Time          // when a pod of the singleton was last seen deleted
	fallback map[types.NamespacedName]map[types.UID]bool // per singleton: pods whose hold fallback was reported
}

// Options configure the controller; the zero value is what production runs.
type Options struct {
	opsutil.Overrides
}

// Setup registers the StatefulSingleton controller with the manager. Managed pods come from
// the manager's cache (scoped by CacheOptions), the other pods a StatefulSingleton selects from the cache
// of its selector (caches.go); each pod maps to the StatefulSingletons of its namespace whose selector
// matches it.
func (opts *Options) Setup(_ context.Context, mgr ctrl.Manager) error {
	registerMetrics()
	caches := newNamespaceCaches(mgr)
	if err := mgr.Add(caches); err != nil {
		return err
	}
	r := &Reconciler{
		Access:   opsutil.NewAccess(mgr, "singleton-operator", opts.Overrides),
		caches:   caches,
		goneAt:   map[types.NamespacedName]time.Time{},
		fallback: map[types.NamespacedName]map[types.UID]bool{},
	}
	if err := setupOrphans(mgr, r); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("statefulsingleton").
		For(&singletonv1.StatefulSingleton{}).
		Watches(&corev1.Pod{}, r.podHandler()).
		WatchesRawSource(source.Channel(caches.events, r.podHandler())).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.singletonsOfNode)).
		Complete(r)
}

// podHandler enqueues the singletons selecting a pod and remembers when a pod went away — deleted, or
// seen as terminal (classify: also a pod being deleted whose exit was reported): the start of the
// handover duration metric.
func (r *Reconciler) podHandler() handler.EventHandler {
	enqueue := func(ctx context.Context, obj client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request], deleted bool) {
		for _, req := range r.singletonsOfPod(ctx, obj) {
			if deleted {
				r.mu.Lock()
				r.goneAt[req.NamespacedName] = r.Clock.Now()
				r.mu.Unlock()
			}
			q.Add(req)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.Object, q, false)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			// Terminal, or its exit reported while being deleted: it stopped counting as running.
			enqueue(ctx, e.ObjectNew, q, classify(e.ObjectNew.(*corev1.Pod)) == stateTerminal && classify(e.ObjectOld.(*corev1.Pod)) != stateTerminal)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.Object, q, true)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.Object, q, false)
		},
	}
}

func (r *Reconciler) singletonsOfPod(ctx context.Context, obj client.Object) []reconcile.Request {
	var list singletonv1.StatefulSingletonList
	if err := r.Cache.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		sel, err := metav1.LabelSelectorAsSelector(&list.Items[i].Spec.Selector)
		if err == nil && sel.Matches(labels.Set(obj.GetLabels())) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}

// singletonsOfNode enqueues the singletons whose last active pod ran on the node (fencing).
func (r *Reconciler) singletonsOfNode(ctx context.Context, obj client.Object) []reconcile.Request {
	var list singletonv1.StatefulSingletonList
	if err := r.Cache.List(ctx, &list); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if list.Items[i].Status.ActivePodNode == obj.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}
