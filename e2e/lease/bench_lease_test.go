//go:build e2e && bench

package lease

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/e2e/benchfmt"
	"github.com/statefulops/statefulops/e2e/framework"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

// leaseBenchFailovers is the number of failovers measured: each costs well under a second on kwok,
// and 50 samples make the p99 the second-largest value rather than the maximum.
const leaseBenchFailovers = 50

// TestBenchLeaseFailover measures lease-operator's failover on kwok pods: a writer made not Ready
// (through its readiness gate, as a failing probe would) until another pod is labelled writer, both
// as the test's watch sees them, and the API writes of each failover. The baseline is the native
// reaction of kube-controller-manager to the same event: its EndpointSlice controller marking the
// same pod's endpoint not ready in a Service's EndpointSlice (the routing change Kubernetes itself
// makes when a pod stops being Ready). The checker of TestLease counts instants with two writers.
func TestBenchLeaseFailover(t *testing.T) {
	op := startLeaseOperator(t)
	ns := framework.NewNamespace(t)
	readinessKeeper(t, ns)
	c := watchLease(t, ns)
	marks := watchLeaseBenchMarks(t, ns)
	leaseStatefulSet(t, ns, "db", 3)
	_, err := framework.Clientset.CoreV1().Services(ns).Create(t.Context(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "db"}, Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	// A long lease: renewals every 30s would otherwise fall into some failovers' write counts.
	createLock(t, ns, lockSpec{name: "db-lock", statefulSet: "db", lease: "db-lock-lease", duration: 60})
	require.Equal(t, "db-0", c.waitWriter(t))
	rolesSettled(t, ns)
	require.Eventually(t, func() bool { return marks.endpointsReady() == 3 }, framework.Timeout, framework.Tick, "3 ready endpoints in the EndpointSlice")

	var latencies, baseline, writes, roleWrites []float64
	var events int
	// CPU profiles of the operator and the kube-apiserver over the failovers (docs/performance.md).
	profiled := framework.CPUProfilesUntil(t, "lease-failover", op.Profiled())
	for i := range leaseBenchFailovers {
		old, before, p0, l0, k0 := c.snapshot()
		e0 := marks.eventCount()
		setGate(t, ns, old, false)
		w := c.waitNewWriter(t, old)
		// The failover's last write is the lock's status naming the new writer; wait for its watch event.
		require.Eventually(t, func() bool {
			_, _, _, _, k := c.snapshot()
			return k > k0 && leaseBenchStatusWriter(t, ns) == w
		}, framework.Timeout, 10*time.Millisecond, "status of failover %d", i+1)
		var notReady, endpointOff time.Time
		require.Eventually(t, func() bool {
			notReady, endpointOff = marks.transition(old)
			return !notReady.IsZero() && !endpointOff.IsZero()
		}, framework.Timeout, 10*time.Millisecond, "pod %s seen not Ready and its endpoint not ready", old)
		_, after, p, l, k := c.snapshot()
		require.Equal(t, before+1, after, "failover %d measured once", i+1)
		latencies = append(latencies, framework.LeaseBenchMillis(c.lastLatency()))
		baseline = append(baseline, framework.LeaseBenchMillis(endpointOff.Sub(notReady)))
		writes = append(writes, float64((p-p0)+(l-l0)+(k-k0)))
		roleWrites = append(roleWrites, float64((p-p0)+(l-l0)))
		events += marks.eventCount() - e0
		// Back to Ready, and to a quiet state, before the next failover: its writes are not this one's.
		setGate(t, ns, old, true)
		require.Eventually(t, func() bool { return marks.ready(old) && marks.endpointReady(old) }, framework.Timeout, 10*time.Millisecond, "%s Ready again", old)
		rolesSettled(t, ns)
	}
	profiled()
	_, transitions := leaseState(t, ns, "db-lock-lease")
	assert.EqualValues(t, leaseBenchFailovers+1, transitions, "one Lease transition per failover, plus the initial election")

	framework.RecordFigure(t, benchfmt.Figure{
		Operator: "lease", Name: "failover (writer observed not Ready -> new writer labelled)", Unit: "ms", Where: "kwok",
		Samples: latencies, Baseline: "EndpointSlice controller marking the same pod's endpoint not ready", BaselineSamples: baseline,
		Targets: []benchfmt.Target{benchfmt.AtMost("p99", 100)},
		Note: fmt.Sprintf("%d failovers of a 3-pod StatefulSet, failoverDelaySeconds=0, one after another; both clocks start at the test's "+
			"watch event of the writer's Ready=False (set through its readiness gate) and stop at the watch event of the new writer's label, "+
			"resp. of the EndpointSlice update. Invariant: %d instants with two writers.", leaseBenchFailovers, c.doublesNow()),
	})
	framework.RecordFigure(t, benchfmt.Figure{
		Operator: "lease", Name: "API writes per failover (pod labels + Lease + lock status)", Unit: "writes", Where: "kwok",
		Samples: writes, Targets: []benchfmt.Target{benchfmt.AtMost("max", 3)},
		Note: fmt.Sprintf("Counted per failover from the watches of pods (role label or epoch changes), the Lease and the lock; no Lease "+
			"renewal falls in a window (leaseDurationSeconds=60). Pod labels + Lease alone (demote, move, promote): p50 %.0f, max %.0f. "+
			"Besides these, %d Events (events.k8s.io) were recorded for %d failovers (WriterDemoted, WriterElected). No baseline: "+
			"Kubernetes has no writer election.", benchfmt.Percentile(roleWrites, 50), benchfmt.Percentile(roleWrites, 100), events, leaseBenchFailovers),
	})
}

// leaseBenchStatusWriter returns the lock db-lock's status.writerPod.
func leaseBenchStatusWriter(t *testing.T, ns string) string {
	lock := &leasev1.StatefulSetLock{}
	if err := framework.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "db-lock"}, lock); err != nil {
		return ""
	}
	return lock.Status.WriterPod
}

// lastLatency is the checker's latest failover latency.
func (c *checker) lastLatency() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.latencies[len(c.latencies)-1]
}

// doublesNow is the checker's count of instants with two writers so far.
func (c *checker) doublesNow() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.doubles
}

// leaseBenchMarks timestamps, per pod, the last watch event that showed it turn not Ready and the
// last EndpointSlice event that showed its endpoint turn not ready, and counts the lease-operator's
// Events of the namespace.
type leaseBenchMarks struct {
	mu          sync.Mutex
	podReady    map[string]bool
	notReadyAt  map[string]time.Time
	epReady     map[string]bool
	epOffAt     map[string]time.Time
	operatorEvs int
}

func watchLeaseBenchMarks(t *testing.T, ns string) *leaseBenchMarks {
	t.Helper()
	m := &leaseBenchMarks{podReady: map[string]bool{}, notReadyAt: map[string]time.Time{}, epReady: map[string]bool{}, epOffAt: map[string]time.Time{}}
	pw, err := framework.Clientset.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	ew, err := framework.Clientset.DiscoveryV1().EndpointSlices(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	vw, err := framework.Clientset.EventsV1().Events(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { pw.Stop(); ew.Stop(); vw.Stop() })
	go func() {
		for ev := range pw.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			now, ready := time.Now(), usablePod(pod)
			m.mu.Lock()
			if was, seen := m.podReady[pod.Name]; seen && was && !ready {
				m.notReadyAt[pod.Name] = now
			}
			m.podReady[pod.Name] = ready
			m.mu.Unlock()
		}
	}()
	go func() {
		for ev := range ew.ResultChan() {
			slice, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			now := time.Now()
			m.mu.Lock()
			for _, ep := range slice.Endpoints {
				if ep.TargetRef == nil {
					continue
				}
				ready := ptr.Deref(ep.Conditions.Ready, false)
				if was, seen := m.epReady[ep.TargetRef.Name]; seen && was && !ready {
					m.epOffAt[ep.TargetRef.Name] = now
				}
				m.epReady[ep.TargetRef.Name] = ready
			}
			m.mu.Unlock()
		}
	}()
	go func() {
		for ev := range vw.ResultChan() {
			if e, ok := ev.Object.(*eventsv1.Event); ok && ev.Type == watch.Added && e.ReportingController == "lease-operator" {
				m.mu.Lock()
				m.operatorEvs++
				m.mu.Unlock()
			}
		}
	}()
	return m
}

// transition returns when pod was last seen turning not Ready and its endpoint turning not ready,
// and forgets both, so the next failover of that pod is timed afresh.
func (m *leaseBenchMarks) transition(pod string) (notReady, endpointOff time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	notReady, endpointOff = m.notReadyAt[pod], m.epOffAt[pod]
	if !notReady.IsZero() && !endpointOff.IsZero() {
		delete(m.notReadyAt, pod)
		delete(m.epOffAt, pod)
	}
	return notReady, endpointOff
}

func (m *leaseBenchMarks) ready(pod string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.podReady[pod]
}

func (m *leaseBenchMarks) endpointReady(pod string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.epReady[pod]
}

// endpointsReady counts the ready endpoints.
func (m *leaseBenchMarks) endpointsReady() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, r := range m.epReady {
		if r {
			n++
		}
	}
	return n
}

func (m *leaseBenchMarks) eventCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.operatorEvs
}
