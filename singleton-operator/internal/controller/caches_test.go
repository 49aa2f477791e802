package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// The unit tests of namespaceCaches' keys and lifecycle run it with a recording cache constructor: which
// caches it makes (namespace, pod selector), which informers they get, when they start and stop. What the
// caches hold on a real API server is the integration tests' part (caches_integration_test.go).

// recordedCache is a cache.Cache that records what namespaceCaches does with it. Only the methods
// namespaceCaches calls are implemented; the embedded nil interface panics on any other.
type recordedCache struct {
	cache.Cache
	namespace string
	pods      string // the pod selector the cache was made with, "" for a ranking cache

	mu        sync.Mutex
	informers []string // kinds, in the order requested
	handlers  []toolscache.ResourceEventHandler
	started   bool
	stopped   bool
}

func (c *recordedCache) GetInformer(_ context.Context, obj client.Object, _ ...cache.InformerGetOption) (cache.Informer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kind := fmt.Sprintf("%T", obj)
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		kind += "/" + m.Kind
	}
	c.informers = append(c.informers, kind)
	return &recordedInformer{cache: c}, nil
}

func (c *recordedCache) Start(ctx context.Context) error {
	c.mu.Lock()
	c.started = true
	c.mu.Unlock()
	<-ctx.Done()
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	return nil
}

func (c *recordedCache) WaitForCacheSync(context.Context) bool { return true }

func (c *recordedCache) state() (started, stopped bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started, c.stopped
}

// recordedInformer records the event handlers added to a recordedCache's informer.
type recordedInformer struct {
	cache.Informer
	cache *recordedCache
}

func (i *recordedInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	i.cache.mu.Lock()
	defer i.cache.mu.Unlock()
	i.cache.handlers = append(i.cache.handlers, h)
	return nil, nil
}

// recordingScopes is a namespaceCaches whose caches are recordedCaches, in the order made.
func recordingScopes(t *testing.T) (*namespaceCaches, func() []*recordedCache) {
	t.Helper()
	base, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var mu sync.Mutex
	var made []*recordedCache
	n := &namespaceCaches{
		newCache: func(namespace string, pods labels.Selector) (cache.Cache, error) {
			c := &recordedCache{namespace: namespace}
			if pods != nil {
				c.pods = pods.String()
			}
			mu.Lock()
			made = append(made, c)
			mu.Unlock()
			return c, nil
		},
		events: make(chan event.GenericEvent, 16),
		base:   base,
		cancel: cancel,
		caches: map[string]*runningCache{},
	}
	return n, func() []*recordedCache {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(made)
	}
}

// keys lists the keys of the running caches of namespace, sorted.
func (n *namespaceCaches) keys(namespace string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var keys []string
	for key, sc := range n.caches {
		if sc.namespace == namespace {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	return keys
}

func selector(t *testing.T, ls metav1.LabelSelector) labels.Selector {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(&ls)
	require.NoError(t, err)
	return sel
}

// stopWait and stopTick bound the waits for a cache's goroutine to see its context end.
const (
	stopWait = 10 * time.Second
	stopTick = 5 * time.Millisecond
)

func waitStopped(t *testing.T, c *recordedCache, why string) {
	t.Helper()
	require.Eventually(t, func() bool { _, stopped := c.state(); return stopped }, stopWait, stopTick, why)
}

// The key of a selector cache is the namespace and the canonical selector: the order of matchLabels and
// matchExpressions (and of an expression's values) does not matter, the selector's content does.
func TestPodCacheKeyIsCanonical(t *testing.T) {
	a := metav1.LabelSelector{
		MatchLabels: map[string]string{"app": "db", "tier": "x", "zone": "1"},
		MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "app", Operator: metav1.LabelSelectorOpExists},
			{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"prod", "dev"}},
		},
	}
	b := metav1.LabelSelector{
		MatchLabels: map[string]string{"zone": "1", "tier": "x", "app": "db"},
		MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"dev", "prod"}},
			{Key: "app", Operator: metav1.LabelSelectorOpExists},
		},
	}
	const want = "ns/app,app=db,env in (dev,prod),tier=x,zone=1"
	for range 20 { // matchLabels is a map: each conversion may meet its keys in another order
		assert.Equal(t, want, podCacheKey("ns", selector(t, a)))
		assert.Equal(t, want, podCacheKey("ns", selector(t, b)))
	}
	assert.NotEqual(t, want, podCacheKey("other", selector(t, a)), "one cache per namespace and selector")
	other := selector(t, metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}})
	assert.NotEqual(t, want, podCacheKey("ns", other))
	assert.NotEqual(t, "ns", podCacheKey("ns", other), "never the key of the namespace's ranking cache")
}

// One cache per (namespace, selector), of that selector's pods without the managed label, shared by
// equal selectors; one ranking cache per namespace, without pods. Only selector caches feed events.
func TestNamespaceCachesOneCachePerSelector(t *testing.T) {
	n, made := recordingScopes(t)
	ctx := t.Context()
	db := selector(t, metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}})
	dbAgain := selector(t, metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"db"}}}})
	web := selector(t, metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}})

	r1, err := n.podReader(ctx, "ns", db)
	require.NoError(t, err)
	r2, err := n.podReader(ctx, "ns", selector(t, metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}))
	require.NoError(t, err)
	assert.Same(t, r1, r2, "an equal selector shares the cache")
	_, err = n.podReader(ctx, "ns", dbAgain) // the same pods, another selector string: a cache of its own
	require.NoError(t, err)
	_, err = n.podReader(ctx, "ns", web)
	require.NoError(t, err)
	_, err = n.podReader(ctx, "elsewhere", db)
	require.NoError(t, err)
	rank, err := n.reader(ctx, "ns")
	require.NoError(t, err)
	rankAgain, err := n.reader(ctx, "ns")
	require.NoError(t, err)
	assert.Same(t, rank, rankAgain)

	caches := made()
	require.Len(t, caches, 5)
	var got []string
	for _, c := range caches {
		got = append(got, c.namespace+" "+c.pods)
	}
	managed := singletonv1.LabelManaged + "!=true"
	assert.Equal(t, []string{
		"ns app=db," + managed,
		"ns app in (db)," + managed,
		"ns app=web," + managed,
		"elsewhere app=db," + managed,
		"ns ",
	}, got, "namespace and pod selector of each cache made")
	assert.Equal(t, []string{"ns", "ns/app in (db)", "ns/app=db", "ns/app=web"}, n.keys("ns"))
	assert.Equal(t, []string{"elsewhere/app=db"}, n.keys("elsewhere"))

	for _, c := range caches[:4] {
		assert.Equal(t, []string{"*v1.Pod"}, c.informers, "a selector cache has the pod informer only")
		assert.Len(t, c.handlers, 1, "its events feed the controller")
	}
	assert.Equal(t, []string{"*v1.PartialObjectMetadata/ReplicaSet", "*v1.StatefulSet", "*v1.Deployment"}, caches[4].informers,
		"the ranking cache holds ReplicaSet metadata, StatefulSets and Deployments, no pods")
	assert.Empty(t, caches[4].handlers)
	for _, c := range caches {
		require.Eventually(t, func() bool { started, _ := c.state(); return started }, stopWait, stopTick, "cache %s %s started", c.namespace, c.pods)
	}

	// A selector cache's pod events reach the controller's channel, tombstones unwrapped.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rogue"}}
	caches[0].handlers[0].OnAdd(pod, false)
	caches[0].handlers[0].OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/rogue", Obj: pod})
	for range 2 {
		assert.Same(t, pod, (<-n.events).Object)
	}
}

// retain keeps the caches the StatefulSingletons left in a namespace need and stops the others; the
// ranking cache goes with the last one; other namespaces are not touched.
func TestNamespaceCachesRetain(t *testing.T) {
	n, made := recordingScopes(t)
	ctx := t.Context()
	db := selector(t, metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}})
	web := selector(t, metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}})
	for _, sel := range []labels.Selector{db, web} {
		_, err := n.podReader(ctx, "ns", sel)
		require.NoError(t, err)
	}
	_, err := n.reader(ctx, "ns")
	require.NoError(t, err)
	_, err = n.podReader(ctx, "elsewhere", db)
	require.NoError(t, err)
	caches := made()
	require.Len(t, caches, 4)
	dbCache, webCache, rankCache, elsewhere := caches[0], caches[1], caches[2], caches[3]

	// Two StatefulSingletons still select app=web (a shared cache), none app=db.
	n.retain(ctx, "ns", []labels.Selector{web, selector(t, metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}})})
	assert.Equal(t, []string{"ns", "ns/app=web"}, n.keys("ns"))
	waitStopped(t, dbCache, "the cache of a selector no StatefulSingleton uses stops")

	// Nothing changed: nothing stops.
	n.retain(ctx, "ns", []labels.Selector{web})
	assert.Equal(t, []string{"ns", "ns/app=web"}, n.keys("ns"))

	// A later reader of app=db starts a new cache.
	_, err = n.podReader(ctx, "ns", db)
	require.NoError(t, err)
	assert.Len(t, made(), 5)
	assert.Equal(t, []string{"ns", "ns/app=db", "ns/app=web"}, n.keys("ns"))

	// The last StatefulSingleton of the namespace is gone: every cache of it stops.
	n.retain(ctx, "ns", nil)
	assert.Empty(t, n.keys("ns"))
	waitStopped(t, webCache, "selector cache stops with the namespace's last StatefulSingleton")
	waitStopped(t, rankCache, "ranking cache stops with the namespace's last StatefulSingleton")
	waitStopped(t, made()[4], "the restarted selector cache stops too")
	assert.Equal(t, []string{"elsewhere/app=db"}, n.keys("elsewhere"), "other namespaces keep their caches")
	_, stopped := elsewhere.state()
	assert.False(t, stopped)

	// The manager stops: so do the caches left.
	require.NoError(t, func() error {
		ctx, stop := context.WithCancel(ctx)
		stop()
		return n.Start(ctx)
	}())
	waitStopped(t, elsewhere, "caches stop with the manager")
}

// The pods of a selector cache: the selector's, without the managed label (whatever the selector says
// about that label).
func TestUnmanagedPodsSelector(t *testing.T) {
	sel := unmanagedPods(selector(t, metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}))
	assert.True(t, sel.Matches(labels.Set{"app": "db"}))
	assert.True(t, sel.Matches(labels.Set{"app": "db", singletonv1.LabelManaged: "false"}))
	assert.False(t, sel.Matches(labels.Set{"app": "db", singletonv1.LabelManaged: "true"}), "the manager's cache has those")
	assert.False(t, sel.Matches(labels.Set{"app": "web"}), "another selector's")
	assert.False(t, sel.Matches(labels.Set{}))
}
