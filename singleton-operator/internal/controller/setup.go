package controller

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
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

	// exits and released connect the controller to the grant server of the same process (Options).
	exits    ExitReports
	released func(*corev1.Pod)

	mu       sync.Mutex
	goneAt   map[types.NamespacedName]time.Time          // when a pod of the singleton was last seen deleted
	fallback map[types.NamespacedName]map[types.UID]bool // per singleton: pods whose hold fallback was reported
}

// ExitReports are the exit reports the grant server of this process accepted (grant.Exits): a pod
// whose report is accepted counts as stopped as soon as the report is, and a release waits only for
// its record (the annotation) to be written, so the live list and the epoch reservation overlap the
// annotation's write instead of following its watch event.
type ExitReports interface {
	// Accepted reports whether a report of the pod UID was accepted (pod terminating, every app
	// container's exit reported) and its annotation is being written or was written.
	Accepted(uid types.UID) bool
	// Recorded waits until that annotation is written, or says why it was not.
	Recorded(ctx context.Context, uid types.UID) error
	// Events carries each accepted report's pod, to reconcile its singletons at once.
	Events() <-chan event.GenericEvent
}

// Options configure the controller; the zero value runs it on its own (the annotations' watch events
// only). main connects it to the grant server of the same process.
type Options struct {
	opsutil.Overrides
	// Exits, when set, are the exit reports the grant server of this process accepted.
	Exits ExitReports
	// Released, when set, is told of each pod the controller released (the pod as patched), so the
	// grant server answers a Wrapper pod's long poll without waiting for the patch's watch event.
	Released func(*corev1.Pod)
	// Successors, when set, is connected to the manager's cache: it answers the grant server's
	// stopping notices (spec.successorWait).
	Successors *Successors
}

// Setup registers the StatefulSingleton controller with the manager. Managed pods come from
// the manager's cache (scoped by CacheOptions), the other pods a StatefulSingleton selects from the cache
// of its selector (caches.go); each pod maps to the StatefulSingletons of its namespace whose selector
// matches it.
func (opts *Options) Setup(ctx context.Context, mgr ctrl.Manager) error {
	registerMetrics()
	if opts.Successors != nil {
		if err := opts.Successors.start(ctx, mgr); err != nil {
			return err
		}
	}
	caches := newNamespaceCaches(mgr)
	if err := mgr.Add(caches); err != nil {
		return err
	}
	r := &Reconciler{
		Access:   opsutil.NewAccess(mgr, "singleton-operator", opts.Overrides),
		caches:   caches,
		goneAt:   map[types.NamespacedName]time.Time{},
		fallback: map[types.NamespacedName]map[types.UID]bool{},
		exits:    opts.Exits,
		released: opts.Released,
	}
	if err := setupOrphans(mgr, r); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("statefulsingleton").
		For(&singletonv1.StatefulSingleton{}).
		Watches(&corev1.Pod{}, r.podHandler()).
		WatchesRawSource(source.Channel(caches.events, r.podHandler())).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.singletonsOfNode), builder.WithPredicates(nodeFencingChanged())).
		WithOptions(controller.Options{MaxConcurrentReconciles: opsutil.Workers})
	if opts.Exits != nil {
		// An accepted exit report: the pod stopped counting as running (the handover's clock starts).
		b = b.WatchesRawSource(source.Channel(opts.Exits.Events(), handler.Funcs{
			GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				r.enqueuePod(ctx, e.Object, q, true)
			},
		}))
	}
	return b.Complete(r)
}

// exitAccepted reports whether pod is being deleted and this process's grant server accepted its exit
// report (ExitReports), whatever the pod's annotations say yet.
func (r *Reconciler) exitAccepted(pod *corev1.Pod) bool {
	return r.exits != nil && !pod.DeletionTimestamp.IsZero() && r.exits.Accepted(pod.UID)
}

// enqueuePod enqueues the singletons selecting obj; gone: it stopped counting as running (deleted,
// terminal, or its exit reported), the start of the handover duration metric.
func (r *Reconciler) enqueuePod(ctx context.Context, obj client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request], gone bool) {
	for _, req := range r.singletonsOfPod(ctx, obj) {
		if gone {
			r.mu.Lock()
			r.goneAt[req.NamespacedName] = r.Clock.Now()
			r.mu.Unlock()
		}
		q.Add(req)
	}
}

// podHandler enqueues the singletons selecting a pod and remembers when a pod went away — deleted, or
// seen as terminal (classify: also a pod being deleted whose exit was reported): the start of the
// handover duration metric.
func (r *Reconciler) podHandler() handler.EventHandler {
	enqueue := r.enqueuePod
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.Object, q, false)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			// Terminal, or its exit reported while being deleted: it stopped counting as running (unless
			// that was already known from the report's acceptance, exitAccepted).
			pod := e.ObjectNew.(*corev1.Pod)
			enqueue(ctx, pod, q, classify(pod) == stateTerminal && classify(e.ObjectOld.(*corev1.Pod)) != stateTerminal && !r.exitAccepted(pod))
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
	// Read only, so without the cache's deep copies: this runs at every pod event and lists the
	// namespace's every StatefulSingleton (TestBenchSingletonScale's profile at 1,000).
	if err := r.Cache.List(ctx, &list, client.InNamespace(obj.GetNamespace()), client.UnsafeDisableDeepCopy); err != nil {
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

// nodeFencingChanged lets through the node changes that can change nodeFenced's answer: its readiness
// and its taints (the out-of-service taint), and its creation and deletion. Not the kubelet's heartbeats:
// each one queued every singleton whose active pod ran on the node (at 1,000 singletons on 7 kwok nodes,
// bursts of ~140 reconciles with nothing to do; TestBenchSingletonScale).
func nodeFencingChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		old, okOld := e.ObjectOld.(*corev1.Node)
		node, okNew := e.ObjectNew.(*corev1.Node)
		if !okOld || !okNew {
			return true
		}
		return opsutil.NodeReady(old) != opsutil.NodeReady(node) || !equality.Semantic.DeepEqual(old.Spec.Taints, node.Spec.Taints)
	}}
}

// singletonsOfNode enqueues the singletons whose last active pod ran on the node, and those of the pods
// released on the exit of a pod that ran there (fencing).
func (r *Reconciler) singletonsOfNode(ctx context.Context, obj client.Object) []reconcile.Request {
	var list singletonv1.StatefulSingletonList
	if err := r.Cache.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil { // read only
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if list.Items[i].Status.ActivePodNode == obj.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	var pods corev1.PodList // managed pods only: every pod released on exit is one
	if err := r.Cache.List(ctx, &pods); err != nil {
		return reqs
	}
	for i := range pods.Items {
		if cond, ok := singletonv1.PodStartOnExit(&pods.Items[i]); ok && cond.Node == obj.GetName() {
			reqs = append(reqs, r.singletonsOfPod(ctx, &pods.Items[i])...)
		}
	}
	return reqs
}
