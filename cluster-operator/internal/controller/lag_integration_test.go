//go:build integration

package controller

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// The operator's cache lags the API server by however long its pod watch events take to arrive; under
// load (CI's TestStatefulClusterScale500 at load average 18) that is seconds. These tests hold the
// operator's pod watch stream back (podEventGate, on the manager's transport), so its cache and its pod
// event handler see exactly the same, older, prefix of the pod events as a loaded operator does, and
// release it at the moment that matters.

// gatedEvent is what the gate knows of one pod watch event.
type gatedEvent struct {
	typ, name string
	deleting  bool // the pod has a deletionTimestamp
}

// podEventGate holds the operator's pod watch events while hold says so; events are released in
// order, so the cache always shows a prefix of the server's history, as a slow watch does.
type podEventGate struct {
	mu   sync.Mutex
	cond *sync.Cond
	hold func(gatedEvent) bool
}

func newPodEventGate() *podEventGate {
	g := &podEventGate{}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// set replaces what is held (nil: nothing) and wakes the held streams.
func (g *podEventGate) set(hold func(gatedEvent) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hold = hold
	g.cond.Broadcast()
}

func holdAll(gatedEvent) bool { return true }

func (g *podEventGate) wait(ev gatedEvent) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.hold != nil && g.hold(ev) {
		g.cond.Wait()
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// wrap puts the gate on the pod watch streams of a transport.
func (g *podEventGate) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		w := req.URL.Query().Get("watch")
		if err != nil || req.Method != http.MethodGet || (w != "true" && w != "1") || !strings.HasSuffix(req.URL.Path, "/pods") {
			return resp, err
		}
		resp.Body = g.pump(resp.Body)
		return resp, nil
	})
}

// pump passes a JSON watch stream through, one event at a time, each when the gate lets it.
func (g *podEventGate) pump(body io.ReadCloser) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		defer body.Close()
		dec := json.NewDecoder(body)
		for {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				pw.CloseWithError(err)
				return
			}
			var ev struct {
				Type   string `json:"type"`
				Object struct {
					Metadata struct {
						Name              string  `json:"name"`
						DeletionTimestamp *string `json:"deletionTimestamp"`
					} `json:"metadata"`
				} `json:"object"`
			}
			_ = json.Unmarshal(raw, &ev)
			g.wait(gatedEvent{typ: ev.Type, name: ev.Object.Metadata.Name, deleting: ev.Object.Metadata.DeletionTimestamp != nil})
			if _, err := pw.Write(append(raw, '\n')); err != nil {
				return
			}
		}
	}()
	return &pumpedBody{PipeReader: pr, body: body}
}

type pumpedBody struct {
	*io.PipeReader
	body io.Closer
}

func (b *pumpedBody) Close() error {
	_ = b.PipeReader.Close()
	return b.body.Close()
}

// podListHook runs hook after each List of pods through the manager's client (the operator's cache
// reads), with the list just read.
type podListHook struct {
	client.Client
	hook func(ctx context.Context, cached client.Client, listed *corev1.PodList, opts *client.ListOptions)
}

func (h *podListHook) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := h.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	if pods, ok := list.(*corev1.PodList); ok && h.hook != nil {
		h.hook(ctx, h.Client, pods, (&client.ListOptions{}).ApplyOptions(opts))
	}
	return nil
}

// startGatedOperator runs the controller with its pod watch behind gate (JSON, so the gate can read
// the events; production's protobuf carries the same events) and, when onPodList is set, a hook
// after each of its cached pod Lists.
func startGatedOperator(t *testing.T, gate *podEventGate, onPodList func(context.Context, client.Client, *corev1.PodList, *client.ListOptions)) {
	t.Helper()
	cfg := rest.CopyConfig(suite.Config)
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.Wrap(gate.wrap)
	opts := Options{}
	suite.StartManagerAs(t, cfg, opts.Setup, func(o *ctrl.Options) {
		CacheOptions(&o.Cache)
		o.NewClient = func(c *rest.Config, co client.Options) (client.Client, error) {
			cl, err := client.New(c, co)
			if err != nil {
				return nil, err
			}
			return &podListHook{Client: cl, hook: onPodList}, nil
		}
	})
	t.Cleanup(func() { gate.set(nil) }) // runs before the manager stops: no stream stays held
}

func sortedPodNames(pods map[string]*corev1.Pod) []string {
	names := slices.Collect(maps.Keys(pods))
	slices.Sort(names)
	return names
}

// reconciledGeneration waits until the operator has written the status of the StatefulCluster's
// current generation.
func (f *fixture) reconciledGeneration(name string) {
	f.t.Helper()
	require.Eventually(f.t, func() bool {
		sc := f.get(name)
		return sc.Generation != 0 && sc.Status.ObservedGeneration == sc.Generation
	}, wait, tick, "status of generation observed")
}

// TestNoOverCreationWhenPodEventsArriveDuringTheList: a reconcile reads the cache, and the watch
// events of pods the operator created arrive before it reads its expectations (CI: 3 extra pods at
// 500 replicas under load). Those pods must still count, from the expectations, since the list did
// not show them: the expectations are read before the cache.
func TestNoOverCreationWhenPodEventsArriveDuringTheList(t *testing.T) {
	f := newFixture(t)
	gate := newPodEventGate()
	var armed, fired atomic.Bool
	startGatedOperator(t, gate, func(ctx context.Context, cached client.Client, listed *corev1.PodList, lo *client.ListOptions) {
		if lo.Namespace != f.ns || !armed.CompareAndSwap(true, false) {
			return
		}
		// This reconcile's list does not show the pods created by the last one; their events arrive
		// now, before it reads its expectations: the cache and the pod handler see them.
		server := f.pods("b")
		if len(listed.Items) >= len(server) {
			return
		}
		fired.Store(true)
		gate.set(nil)
		assert.Eventually(t, func() bool {
			var now corev1.PodList
			return cached.List(ctx, &now, client.InNamespace(f.ns)) == nil && len(now.Items) >= len(server)
		}, wait, tick, "the cache shows the pods")
		// The pod handler runs right after the cache is updated (observed): let it.
		time.Sleep(500 * time.Millisecond)
	})
	f.statefulCluster("b", 0)
	f.reconciledGeneration("b")

	gate.set(holdAll)
	f.update("b", func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.Replicas = ptr.To[int32](5) })
	require.Eventually(t, func() bool { return len(f.pods("b")) == 5 && f.get("b").Status.NextIdentity == 5 }, wait, tick, "5 pods created")
	f.reconciledGeneration("b")

	// The next reconcile (a spec change that does not touch the pods) meets the pod events mid-way.
	armed.Store(true)
	f.update("b", func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.RevisionHistoryLimit = ptr.To[int32](11) })
	require.Eventually(t, fired.Load, wait, tick, "the pod events arrived during a reconcile's list")
	testsupport.NeverWithin(t, 3*time.Second, tick, func() bool {
		names := sortedPodNames(f.pods("b"))
		if len(names) > 5 {
			t.Logf("pods: %v", names)
		}
		return len(names) > 5
	}, "over-creation")
	assert.LessOrEqual(t, f.maxLiveOf("b"), 5)
	f.waitPods("b", "b-0", "b-1", "b-2", "b-3", "b-4")
}

// TestNoOverDeletionWhileTheCacheLagsTheOperatorsDeletes: a scale-down retires the newest pods the
// cache shows; the next reconcile sees pods created before those deletions but not yet the deletions
// (CI: big-497..499 retired, then big-500..502 too). A pod the operator deleted is terminating,
// whatever the cache says, so it is not counted live again and nothing more is deleted.
func TestNoOverDeletionWhileTheCacheLagsTheOperatorsDeletes(t *testing.T) {
	f := newFixture(t)
	gate := newPodEventGate()
	startGatedOperator(t, gate, nil)
	f.statefulCluster("d", 3)
	f.waitPods("d", "d-0", "d-1", "d-2")
	require.Eventually(t, func() bool { return f.get("d").Status.ReadyReplicas == 3 }, wait, tick, "the cache shows 3 Ready pods")

	// Scale to 5 while the cache sees no pod event: d-3 and d-4 count from the expectations.
	gate.set(holdAll)
	f.update("d", func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.Replicas = ptr.To[int32](5) })
	require.Eventually(t, func() bool { return len(f.liveNames("d")) == 5 && f.get("d").Status.NextIdentity == 5 }, wait, tick, "5 pods created")
	f.waitPods("d", "d-0", "d-1", "d-2", "d-3", "d-4")

	// Back to 3: the newest pods the cache shows (d-2, d-1) are retired; d-3 and d-4 it has not seen.
	f.update("d", func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.Replicas = ptr.To[int32](3) })
	require.Eventually(t, func() bool { return len(f.liveNames("d")) == 3 }, wait, tick, "2 pods retired")
	require.Equal(t, []string{"d-0", "d-3", "d-4"}, f.liveNames("d"))

	// The cache catches up to just before the deletions: it shows d-3 and d-4, and d-1, d-2 as
	// they were. The next reconcile must not count them live again and retire two more.
	gate.set(func(ev gatedEvent) bool { return ev.deleting || ev.typ == "DELETED" })
	testsupport.NeverWithin(t, 3*time.Second, tick, func() bool {
		live := f.liveNames("d")
		if len(live) < 3 {
			t.Logf("live pods: %v", live)
		}
		return len(live) < 3
	}, "over-deletion")
	gate.set(nil)
	f.waitPods("d", "d-0", "d-3", "d-4")
	testsupport.NeverWithin(t, time.Second, tick, func() bool { return len(f.liveNames("d")) != 3 }, "pods replaced")
}
