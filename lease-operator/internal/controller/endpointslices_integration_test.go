//go:build integration

package controller

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

// SL-11, spec.services.endpoints: Operator. The Services have no selector and the operator writes their
// EndpointSlices: through four writer changes (two failovers, two switchovers) a recorder of every watch
// event of the namespace's EndpointSlices, pods and locks, replayed in resourceVersion order (envtest's
// single etcd: one revision counter for all kinds), finds at every event that the writer slice holds at
// most one endpoint and, when it holds one, that its pod (targetRef name and UID) is labelled writer at
// that revision and is status.writerPod, or is the writer the next status write names: the slice is set
// in the promotion step and the status is written at the end of that same reconcile, so it may lead the
// status by that one write, never the other way (it is emptied before the old writer's demotion, which
// precedes the status write naming the new one). Then a slice changed by someone else is put back,
// switching to Selector and back recreates the Services and deletes and writes the slices again, and
// deleting the lock deletes the Services and slices.
func TestOperatorWrittenEndpointSlices(t *testing.T) {
	f := newFixture(t)
	f.createPods(3)
	for i := range 3 {
		f.setPodIP(fmt.Sprintf("db-%d", i), fmt.Sprintf("10.0.0.%d", 10+i))
	}
	rec := recordTimeline(t, f.ns)
	startOperator(t, nil)
	lock := f.createLock("lock", 10, func(l *leasev1.StatefulSetLock) {
		l.Spec.Services = &leasev1.LockServices{
			Ports:     []leasev1.LockServicePort{{Name: "pg", Port: 5432}, {Name: "metrics", Port: 80, TargetPort: 9187}},
			Endpoints: leasev1.EndpointsOperator,
		}
	})
	f.waitRoutes("lock", "db-0")

	f.setReady("db-0", false) // failover
	f.waitRoutes("lock", "db-1")
	f.switchover("lock", "db-2")
	f.waitRoutes("lock", "db-2")
	f.setReady("db-0", true)
	f.setReady("db-2", false) // failover, to db-0 or db-1
	var next string
	require.Eventually(t, func() bool {
		next = f.lock("lock").Status.WriterPod
		return next != "" && next != "db-2"
	}, wait, tick)
	f.waitRoutes("lock", next)
	other := "db-0"
	if next == "db-0" {
		other = "db-1"
	}
	f.switchover("lock", other)
	f.waitRoutes("lock", other)

	events := rec.stop()
	checkWriterSliceTimeline(t, events, "lock-rw")
	require.GreaterOrEqual(t, countKind(events, "slice"), 8, "the writer slice was emptied and set at each of the 4 changes")

	// Someone routes the writer Service to a reader: put back.
	require.NoError(t, suite.Client.Patch(t.Context(), &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "lock-rw"}},
		client.RawPatch(types.MergePatchType, []byte(`{"endpoints":[{"addresses":["10.0.0.99"],"targetRef":{"kind":"Pod","name":"intruder"}}]}`))))
	f.waitRoutes("lock", other)

	// Selector and back: new Services each time, the operator's slices deleted, then written again.
	uid := f.service("lock-rw").UID
	f.setEndpoints("lock", leasev1.EndpointsSelector)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, name := range []string{"lock-rw", "lock-ro"} {
			svc := &corev1.Service{}
			if assert.NoError(c, suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, svc)) {
				assert.NotEmpty(c, svc.Spec.Selector, "Service %s selects the role labels", name)
			}
		}
		assert.Empty(c, f.slices(), "the operator's EndpointSlices are deleted")
	}, wait, tick)
	assert.NotEqual(t, uid, f.service("lock-rw").UID, "the Service was recreated")
	f.setEndpoints("lock", leasev1.EndpointsOperator)
	f.waitRoutes("lock", other)

	// Deleting the lock deletes the Services and the slices (envtest runs no garbage collector).
	require.NoError(t, suite.Client.Delete(t.Context(), lock))
	require.Eventually(t, func() bool {
		for _, name := range []string{"lock-rw", "lock-ro"} {
			if !apierrors.IsNotFound(suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, &corev1.Service{})) {
				return false
			}
		}
		return len(f.slices()) == 0
	}, wait, tick, "Services and EndpointSlices deleted with the lock")
}

// setPodIP sets the pod's IP, as the kubelet would.
func (f *fixture) setPodIP(name, ip string) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod := f.pod(name)
		pod.Status.PodIP, pod.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		return suite.Client.Status().Update(f.t.Context(), pod)
	}))
}

func (f *fixture) setEndpoints(lock string, mode leasev1.ServiceEndpoints) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l := f.lock(lock)
		l.Spec.Services.Endpoints = mode
		return suite.Client.Update(f.t.Context(), l)
	}))
}

func (f *fixture) service(name string) *corev1.Service {
	f.t.Helper()
	svc := &corev1.Service{}
	require.NoError(f.t, suite.Client.Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, svc))
	return svc
}

// slices returns the namespace's EndpointSlices by name (envtest runs no EndpointSlice controller:
// every one is the operator's).
func (f *fixture) slices() map[string]*discoveryv1.EndpointSlice {
	var list discoveryv1.EndpointSliceList
	require.NoError(f.t, suite.Client.List(f.t.Context(), &list, client.InNamespace(f.ns)))
	out := map[string]*discoveryv1.EndpointSlice{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out
}

// waitRoutes waits until status.writerPod is writer, the selector-less Services <lock>-rw and <lock>-ro
// exist, and their slices route to exactly the writer and exactly the other pods, by address, with the
// Services' target ports, labelled for kube-proxy and owned by the lock.
func (f *fixture) waitRoutes(lock, writer string) {
	f.t.Helper()
	require.EventuallyWithT(f.t, func(c *assert.CollectT) {
		l := f.lock(lock)
		assert.Equal(c, writer, l.Status.WriterPod)
		var pods corev1.PodList
		require.NoError(c, suite.Client.List(f.t.Context(), &pods, client.InNamespace(f.ns)))
		want := map[string][]string{}
		for _, p := range pods.Items {
			name := lock + readerServiceSuffix
			if p.Name == writer {
				name = lock + writerServiceSuffix
			}
			want[name] = append(want[name], p.Name+"="+p.Status.PodIP)
		}
		got := f.slices()
		for _, name := range []string{lock + writerServiceSuffix, lock + readerServiceSuffix} {
			svc := &corev1.Service{}
			if assert.NoError(c, suite.Client.Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, svc)) {
				assert.Empty(c, svc.Spec.Selector, "Service %s selects nothing", name)
			}
			slice := got[name]
			if !assert.NotNil(c, slice, "EndpointSlice %s", name) {
				continue
			}
			assert.True(c, metav1.IsControlledBy(slice, l), "EndpointSlice %s is controlled by the lock", name)
			assert.Equal(c, name, slice.Labels[discoveryv1.LabelServiceName])
			assert.Equal(c, endpointSliceManagedBy, slice.Labels[discoveryv1.LabelManagedBy])
			assert.Equal(c, []discoveryv1.EndpointPort{
				{Name: ptr.To("pg"), Port: ptr.To[int32](5432), Protocol: ptr.To(corev1.ProtocolTCP)},
				{Name: ptr.To("metrics"), Port: ptr.To[int32](9187), Protocol: ptr.To(corev1.ProtocolTCP)},
			}, slice.Ports)
			var endpoints []string
			for _, e := range slice.Endpoints {
				endpoints = append(endpoints, e.TargetRef.Name+"="+e.Addresses[0])
			}
			assert.ElementsMatch(c, want[name], endpoints, "EndpointSlice %s", name)
		}
		if slice := got[lock+writerServiceSuffix]; slice != nil && len(slice.Endpoints) == 1 {
			assert.True(c, *slice.Endpoints[0].Conditions.Ready, "the writer's endpoint is ready")
		}
	}, wait, tick, "routes to writer %s", writer)
}

// timelineEvent is one watch event: an EndpointSlice's, a pod's or a lock's, at its resourceVersion.
type timelineEvent struct {
	rv    int64
	kind  string // slice, pod, lock
	typ   watch.EventType
	slice *discoveryv1.EndpointSlice
	pod   *corev1.Pod
	lock  *leasev1.StatefulSetLock
}

type timelineRecorder struct {
	mu      sync.Mutex
	events  []timelineEvent
	watches []watch.Interface
	done    sync.WaitGroup
}

// recordTimeline watches the namespace's EndpointSlices, pods and locks until stop, which returns the
// events in resourceVersion order.
func recordTimeline(t *testing.T, ns string) *timelineRecorder {
	t.Helper()
	rec := &timelineRecorder{}
	for kind, list := range map[string]client.ObjectList{"slice": &discoveryv1.EndpointSliceList{}, "pod": &corev1.PodList{}, "lock": &leasev1.StatefulSetLockList{}} {
		w, err := suite.Client.Watch(t.Context(), list, client.InNamespace(ns))
		require.NoError(t, err)
		rec.watches = append(rec.watches, w)
		rec.done.Add(1)
		go func() {
			defer rec.done.Done()
			for ev := range w.ResultChan() {
				obj, ok := ev.Object.(client.Object)
				if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified && ev.Type != watch.Deleted) {
					continue
				}
				rv, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
				if err != nil {
					continue
				}
				e := timelineEvent{rv: rv, kind: kind, typ: ev.Type}
				switch o := obj.(type) {
				case *discoveryv1.EndpointSlice:
					e.slice = o
				case *corev1.Pod:
					e.pod = o
				case *leasev1.StatefulSetLock:
					e.lock = o
				}
				rec.mu.Lock()
				rec.events = append(rec.events, e)
				rec.mu.Unlock()
			}
		}()
	}
	t.Cleanup(func() {
		for _, w := range rec.watches {
			w.Stop()
		}
	})
	return rec
}

func (rec *timelineRecorder) stop() []timelineEvent {
	for _, w := range rec.watches {
		w.Stop()
	}
	rec.done.Wait()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	slices.SortStableFunc(rec.events, func(a, b timelineEvent) int { return int(a.rv - b.rv) })
	return rec.events
}

func countKind(events []timelineEvent, kind string) int {
	n := 0
	for _, e := range events {
		if e.kind == kind {
			n++
		}
	}
	return n
}

// checkWriterSliceTimeline replays the events and checks the writer slice's invariant after each (see
// TestOperatorWrittenEndpointSlices).
func checkWriterSliceTimeline(t *testing.T, events []timelineEvent, writerSlice string) {
	t.Helper()
	type podState struct {
		uid  types.UID
		role string
	}
	pods := map[string]podState{}
	var endpoints []discoveryv1.Endpoint
	status := ""
	// nextStatus returns the writerPod of the first status after event i that names another one.
	nextStatus := func(i int) string {
		for _, e := range events[i+1:] {
			if e.kind == "lock" && e.lock.Status.WriterPod != status {
				return e.lock.Status.WriterPod
			}
		}
		return status
	}
	violations, routed := 0, 0
	for i, e := range events {
		switch e.kind {
		case "pod":
			if e.typ == watch.Deleted {
				delete(pods, e.pod.Name)
			} else {
				pods[e.pod.Name] = podState{uid: e.pod.UID, role: e.pod.Labels[leasev1.RoleLabel]}
			}
		case "lock":
			status = e.lock.Status.WriterPod
		case "slice":
			if e.slice.Name != writerSlice {
				continue
			}
			endpoints = nil
			if e.typ != watch.Deleted {
				endpoints = e.slice.Endpoints
			}
		}
		if len(endpoints) > 1 {
			violations++
			t.Errorf("rv %d: the writer slice holds %d endpoints", e.rv, len(endpoints))
			continue
		}
		if len(endpoints) == 0 {
			continue
		}
		routed++
		ref := endpoints[0].TargetRef
		if p, ok := pods[ref.Name]; !ok || p.uid != ref.UID || p.role != leasev1.RoleWriter {
			violations++
			t.Errorf("rv %d (%s event): the writer slice names pod %s, which is not labelled writer (%+v)", e.rv, e.kind, ref.Name, p)
		}
		if status != ref.Name && nextStatus(i) != ref.Name {
			violations++
			t.Errorf("rv %d (%s event): the writer slice names pod %s, status.writerPod is %q and its next value %q", e.rv, e.kind, ref.Name, status, nextStatus(i))
		}
	}
	t.Logf("writer slice invariant: %d events replayed (%d slice events), %d with the slice routing to a pod, %d violations",
		len(events), countKind(events, "slice"), routed, violations)
}
