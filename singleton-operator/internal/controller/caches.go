package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// What the operator caches, and why.
//
// The manager's cache holds only the pods labelled apps.statefulsingleton.com/managed=true (CacheOptions,
// cache.go):
// the webhook labels every pod it admits for a singleton, so the pods the operator holds, releases and
// grants are all there, and the unrelated pods of the cluster are not — an operator that cached every pod
// would grow with the cluster, not with its singletons.
//
// A pod admitted around the webhook (webhook down, namespace label removed, a pod created before the
// StatefulSingleton) carries no managed label, yet the operator must see it at once: it may run beside
// the active pod. For that, each StatefulSingleton's selector gets a small cache of its own
// (namespaceCaches): the pods of its namespace that the selector matches and that lack the managed label.
// The API server filters that watch by both, so a pod that no StatefulSingleton selects is in no cache of
// the operator, also when it lives beside the singletons in their namespace. StatefulSingletons with the
// same selector (same canonical string) share one such cache. Besides, each namespace that holds a
// StatefulSingleton gets one cache of the ReplicaSets (metadata only) and StatefulSets that rank held pods
// by revision, and of the Deployments whose strategy the operator audits (strategy.go); it holds no pods.
//
// A selector's cache starts with the first reconcile of a StatefulSingleton that uses it. When a
// StatefulSingleton's deletion finishes (finish), the caches of its namespace are compared with the
// selectors of the StatefulSingletons left there, as the API server lists them (those being deleted do
// not count; their next reconcile starts their cache again): a selector cache no one uses stops, and the
// namespace's ranking cache stops with the last StatefulSingleton. Being computed from that list, this
// also stops the cache of a StatefulSingleton that went without finish (its finalizer removed by hand) at
// the next deletion in its namespace. The selector cannot change (a CEL rule on spec.selector), so a
// cache never has to follow a StatefulSingleton to another selector. Memory thus
// follows the singletons and their own pods (plus the ReplicaSets, StatefulSets and Deployments of their namespaces),
// not the pods of the cluster or of the singletons' namespaces. Like the manager's cache, these caches
// strip managedFields, and they share the manager's HTTP client (connections), not one each.
//
// Safety does not depend on these caches: right before a release the operator lists the singleton's
// pods from the API server, managed or not.

// unmanagedPods selects the pods that sel selects and the manager's cache leaves out.
func unmanagedPods(sel labels.Selector) labels.Selector {
	req, err := labels.NewRequirement(singletonv1.LabelManaged, selection.NotEquals, []string{"true"})
	if err != nil {
		panic(err) // a constant, valid requirement
	}
	return sel.Add(*req)
}

// namespaceCaches runs the caches of the pods the manager's cache leaves out, one per StatefulSingleton
// selector, and one cache of the ranking kinds per namespace holding a StatefulSingleton (see above).
// Pod events of the selector caches are sent to events, which the controller watches.
type namespaceCaches struct {
	// newCache makes a cache of namespace: with pods set, of the pods that pods selects (a selector
	// cache); with pods nil, of ReplicaSet metadata, StatefulSets and Deployments (the namespace's ranking cache).
	// The unit tests replace it.
	newCache func(namespace string, pods labels.Selector) (cache.Cache, error)
	events   chan event.GenericEvent

	base   context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	caches map[string]*runningCache // by key: namespace (ranking cache), podCacheKey (selector caches)
}

// runningCache is one running cache of namespaceCaches.
type runningCache struct {
	cache     cache.Cache
	namespace string
	cancel    context.CancelFunc
	synced    atomic.Bool
}

// onNewCaches, when set, is given every namespaceCaches newNamespaceCaches makes: the integration tests
// use it to look into the caches of the operator they run. The operator leaves it nil.
var onNewCaches func(*namespaceCaches)

func newNamespaceCaches(mgr ctrl.Manager) *namespaceCaches {
	base, cancel := context.WithCancel(context.Background())
	n := &namespaceCaches{
		// Private caches (cache.New), not the manager's: which namespaces and selectors they hold changes
		// at run time, as StatefulSingletons come and go, whereas the manager's cache is scoped once at
		// start (CacheOptions; the rule is in shared/manager's package documentation).
		newCache: func(namespace string, pods labels.Selector) (cache.Cache, error) {
			opts := cache.Options{
				// One connection pool for all of them, the manager's: not one per selector.
				HTTPClient:        mgr.GetHTTPClient(),
				Scheme:            mgr.GetScheme(),
				Mapper:            mgr.GetRESTMapper(),
				DefaultNamespaces: map[string]cache.Config{namespace: {}},
				// Not the manager's cache: its default transform (strip managedFields) does not apply here.
				DefaultTransform: cache.TransformStripManagedFields(),
			}
			if pods != nil {
				opts.ByObject = map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: pods}}
			}
			return cache.New(mgr.GetConfig(), opts)
		},
		events: make(chan event.GenericEvent, 1024),
		base:   base,
		cancel: cancel,
		caches: map[string]*runningCache{},
	}
	if onNewCaches != nil {
		onNewCaches(n)
	}
	return n
}

// Start implements manager.Runnable: the caches live until the manager stops.
func (n *namespaceCaches) Start(ctx context.Context) error {
	<-ctx.Done()
	n.cancel()
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the leader reconciles.
func (n *namespaceCaches) NeedLeaderElection() bool { return true }

// podCacheKey names the selector cache of sel in namespace: namespace + "/" + the canonical selector
// string, its requirements (each with its values sorted) in sorted order — whatever the order of
// spec.selector's matchLabels map and matchExpressions, so equal selectors share a cache and a
// StatefulSingleton always finds its own. Namespace names hold no "/": a key never collides with a
// namespace's ranking cache (keyed by the bare namespace).
func podCacheKey(namespace string, sel labels.Selector) string {
	reqs, _ := sel.Requirements() // selectable: false only for labels.Nothing, which has none
	parts := make([]string, len(reqs))
	for i := range reqs {
		parts[i] = reqs[i].String()
	}
	slices.Sort(parts)
	return namespace + "/" + strings.Join(parts, ",")
}

// reader returns the synced ranking cache of namespace (ReplicaSet metadata, StatefulSets and Deployments, no pods),
// starting it if needed.
func (n *namespaceCaches) reader(ctx context.Context, namespace string) (client.Reader, error) {
	return n.start(ctx, namespace, namespace, nil)
}

// podReader returns the synced cache of the pods of namespace that sel (a StatefulSingleton's selector)
// selects and that lack the managed label, starting it if needed.
func (n *namespaceCaches) podReader(ctx context.Context, namespace string, sel labels.Selector) (client.Reader, error) {
	return n.start(ctx, podCacheKey(namespace, sel), namespace, unmanagedPods(sel))
}

// start returns the synced cache under key, making and starting it first if there is none: a selector
// cache of the pods that pods selects (their events go to n.events), or with pods nil the ranking cache.
func (n *namespaceCaches) start(ctx context.Context, key, namespace string, pods labels.Selector) (client.Reader, error) {
	n.mu.Lock()
	sc := n.caches[key]
	if sc == nil {
		c, err := n.newCache(namespace, pods)
		if err != nil {
			n.mu.Unlock()
			return nil, err
		}
		if err := n.informers(ctx, c, pods != nil); err != nil {
			n.mu.Unlock()
			return nil, err
		}
		cctx, cancel := context.WithCancel(n.base)
		sc = &runningCache{cache: c, namespace: namespace, cancel: cancel}
		n.caches[key] = sc
		go func() {
			if err := c.Start(cctx); err != nil {
				logf.Log.WithName("namespace-cache").Error(err, "Cache stopped", "namespace", namespace, "key", key)
			}
		}()
		if pods != nil {
			logf.FromContext(ctx).V(1).Info("Following the unmanaged pods of a selector", "namespace", namespace, "selector", pods.String())
		} else {
			logf.FromContext(ctx).V(1).Info("Following the namespace's ReplicaSets, StatefulSets and Deployments", "namespace", namespace)
		}
	}
	n.mu.Unlock()
	if !sc.synced.Load() {
		if !sc.cache.WaitForCacheSync(ctx) {
			return nil, fmt.Errorf("the cache %s did not sync", key)
		}
		sc.synced.Store(true)
	}
	return sc.cache, nil
}

// informers creates the informers of a cache before it starts: for a selector cache the pod informer,
// whose events go to n.events; for a ranking cache those of the ranking kinds, so that they start with
// the cache, not at the first read.
func (n *namespaceCaches) informers(ctx context.Context, c cache.Cache, pods bool) error {
	if !pods {
		for _, obj := range []client.Object{revisionMeta(), &appsv1.StatefulSet{}, &appsv1.Deployment{}} {
			if _, err := c.GetInformer(ctx, obj); err != nil {
				return err
			}
		}
		return nil
	}
	informer, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return err
	}
	send := func(obj any) {
		if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			select {
			case n.events <- event.GenericEvent{Object: pod}:
			case <-n.base.Done(): // the manager stopped: nobody reads the events any more
			}
		}
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    send,
		UpdateFunc: func(_, obj any) { send(obj) },
		DeleteFunc: send,
	})
	return err
}

// retain stops the caches of namespace that selectors — those of the StatefulSingletons left in it —
// no longer need: the selector cache of every other selector, and the ranking cache when none is left.
func (n *namespaceCaches) retain(ctx context.Context, namespace string, selectors []labels.Selector) {
	keep := map[string]bool{}
	for _, sel := range selectors {
		keep[podCacheKey(namespace, sel)] = true
	}
	if len(selectors) > 0 {
		keep[namespace] = true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for key, sc := range n.caches {
		if sc.namespace == namespace && !keep[key] {
			sc.cancel()
			delete(n.caches, key)
			logf.FromContext(ctx).V(1).Info("Stopped a cache no StatefulSingleton needs any more", "namespace", namespace, "key", key)
		}
	}
}

// revisionMeta is a ReplicaSet read as metadata only: the revision annotation is all the ranking needs.
func revisionMeta() *metav1.PartialObjectMetadata {
	rs := &metav1.PartialObjectMetadata{}
	rs.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
	return rs
}
