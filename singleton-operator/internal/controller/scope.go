package controller

import (
	"context"
	"fmt"
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
// The manager's cache holds only the pods labelled apps.statefulsingleton.com/managed=true (CacheOptions):
// the webhook labels every pod it admits for a singleton, so the pods the operator holds, releases and
// grants are all there, and the unrelated pods of the cluster are not — an operator that cached every pod
// would grow with the cluster, not with its singletons.
//
// A pod admitted around the webhook (webhook down, namespace label removed, a pod created before the
// StatefulSingleton) carries no managed label, yet the operator must see it at once: it may run beside
// the active pod. For that, each namespace that holds a StatefulSingleton gets a small cache of its own
// (namespaceCaches): the pods of that namespace without the managed label, and the ReplicaSets (metadata
// only) and StatefulSets that rank held pods by revision. It starts with the first StatefulSingleton of
// the namespace and stops with the last, so memory follows the singletons' namespaces.
//
// Safety does not depend on these caches: right before a release the operator lists the singleton's
// pods from the API server, managed or not.

// CacheOptions scopes the manager's cache: pods only with the managed label. main passes it to
// shared/manager (Options.Cache); the integration tests use it too.
func CacheOptions(o *cache.Options) {
	if o.ByObject == nil {
		o.ByObject = map[client.Object]cache.ByObject{}
	}
	o.ByObject[&corev1.Pod{}] = cache.ByObject{Label: labels.SelectorFromSet(labels.Set{singletonv1.LabelManaged: "true"})}
}

// unmanagedPodSelector selects the pods the manager's cache leaves out.
func unmanagedPodSelector() labels.Selector {
	req, err := labels.NewRequirement(singletonv1.LabelManaged, selection.NotEquals, []string{"true"})
	if err != nil {
		panic(err) // a constant, valid requirement
	}
	return labels.NewSelector().Add(*req)
}

// namespaceCaches runs one cache per namespace that holds a StatefulSingleton (see above). Pod events of
// those caches are sent to events, which the controller watches.
type namespaceCaches struct {
	newCache func(namespace string) (cache.Cache, error)
	events   chan event.GenericEvent

	base   context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	caches map[string]*namespaceCache
}

type namespaceCache struct {
	cache  cache.Cache
	cancel context.CancelFunc
	synced atomic.Bool
}

func newNamespaceCaches(mgr ctrl.Manager) *namespaceCaches {
	base, cancel := context.WithCancel(context.Background())
	return &namespaceCaches{
		newCache: func(namespace string) (cache.Cache, error) {
			return cache.New(mgr.GetConfig(), cache.Options{
				Scheme:            mgr.GetScheme(),
				Mapper:            mgr.GetRESTMapper(),
				DefaultNamespaces: map[string]cache.Config{namespace: {}},
				// Not the manager's cache: its default transform (strip managedFields) does not apply here.
				DefaultTransform: cache.TransformStripManagedFields(),
				ByObject: map[client.Object]cache.ByObject{
					&corev1.Pod{}: {Label: unmanagedPodSelector()},
				},
			})
		},
		events: make(chan event.GenericEvent, 1024),
		base:   base,
		cancel: cancel,
		caches: map[string]*namespaceCache{},
	}
}

// Start implements manager.Runnable: the namespace caches live until the manager stops.
func (n *namespaceCaches) Start(ctx context.Context) error {
	<-ctx.Done()
	n.cancel()
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the leader reconciles.
func (n *namespaceCaches) NeedLeaderElection() bool { return true }

// reader returns the synced cache of namespace, starting it if needed.
func (n *namespaceCaches) reader(ctx context.Context, namespace string) (client.Reader, error) {
	n.mu.Lock()
	nc := n.caches[namespace]
	if nc == nil {
		c, err := n.newCache(namespace)
		if err != nil {
			n.mu.Unlock()
			return nil, err
		}
		nc = &namespaceCache{cache: c}
		informer, err := c.GetInformer(ctx, &corev1.Pod{})
		if err != nil {
			n.mu.Unlock()
			return nil, err
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
		if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    send,
			UpdateFunc: func(_, obj any) { send(obj) },
			DeleteFunc: send,
		}); err != nil {
			n.mu.Unlock()
			return nil, err
		}
		// Informers for the ranking kinds start with the cache, not at the first read.
		for _, obj := range []client.Object{revisionMeta(), &appsv1.StatefulSet{}} {
			if _, err := c.GetInformer(ctx, obj); err != nil {
				n.mu.Unlock()
				return nil, err
			}
		}
		cctx, cancel := context.WithCancel(n.base)
		nc.cancel = cancel
		n.caches[namespace] = nc
		go func() {
			if err := c.Start(cctx); err != nil {
				logf.Log.WithName("namespace-cache").Error(err, "Namespace cache stopped", "namespace", namespace)
			}
		}()
		logf.FromContext(ctx).V(1).Info("Following the namespace's unmanaged pods, ReplicaSets and StatefulSets", "namespace", namespace)
	}
	n.mu.Unlock()
	if !nc.synced.Load() {
		if !nc.cache.WaitForCacheSync(ctx) {
			return nil, fmt.Errorf("the cache of namespace %s did not sync", namespace)
		}
		nc.synced.Store(true)
	}
	return nc.cache, nil
}

// drop stops the cache of namespace (its last StatefulSingleton is gone).
func (n *namespaceCaches) drop(namespace string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if nc := n.caches[namespace]; nc != nil {
		nc.cancel()
		delete(n.caches, namespace)
	}
}

// revisionMeta is a ReplicaSet read as metadata only: the revision annotation is all the ranking needs.
func revisionMeta() *metav1.PartialObjectMetadata {
	rs := &metav1.PartialObjectMetadata{}
	rs.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
	return rs
}
