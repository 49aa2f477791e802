//go:build e2e && bench

package lease

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

// leaseScaleLabel marks the scale bench's pods, so one cluster-wide watch sees exactly them.
const leaseScaleLabel = "statefulops.dev/bench-lease-scale"

// TestBenchLeaseScale measures lease-operator with framework.ScaleSmall StatefulSetLocks, then with
// framework.ScaleLarge, each lock guarding a 2-pod StatefulSet of kwok pods (framework.ScaleSize: the
// settle rate, one failover while the others are at rest, 10 % failing over at once, memory per lock,
// writes at rest). A failover is the writer's readiness gate set False. The writer checker counts
// instants with two writers in one StatefulSet (must be 0).
func TestBenchLeaseScale(t *testing.T) {
	framework.ScaleWaitNoTerminating(t)
	startLeaseOperator(t)
	framework.ScaleNodes(t, 6) // 2,000 pods need more than the cluster's own kwok nodes
	op, token := framework.ScaleOperator(t, "lease", "lease-operator")
	rssEmpty := framework.ScaleRSS(t, op)
	marks := watchLeaseScalePods(t)

	// The locks are created without a client-side rate limit: the settle rate is the operator's.
	fast := framework.ScaleClient(t)
	var all []leaseScaleLock
	var namespaces []string
	size := func(n int) framework.ScaleSize {
		ns := framework.NewNamespace(t)
		namespaces = append(namespaces, ns)
		readinessKeeper(t, ns)
		locks := leaseScaleWorkloads(t, ns, n)
		all = append(all, locks...)
		return framework.ScaleSize{
			Op: op, Token: token, RSSEmpty: rssEmpty, Seed: 21, Total: len(all),
			Create: func() int {
				require.NoError(t, framework.ResParallel(n, func(i int) error {
					l := locks[i]
					return fast.Create(t.Context(), &leasev1.StatefulSetLock{
						ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: l.sts + "-lock"},
						Spec: leasev1.StatefulSetLockSpec{StatefulSetName: l.sts, LeaseName: l.sts + "-lease",
							LeaseDurationSeconds: 60, FailoverDelaySeconds: 0},
					})
				}))
				return n
			},
			Settled: func() bool { return marks.writers(ns) == n },
			Change: func(idx []int) []float64 {
				locks := make([]leaseScaleLock, len(idx))
				for i, j := range idx {
					locks[i] = all[j]
				}
				return leaseScaleFailovers(t, marks, locks)
			},
		}
	}
	small := size(framework.ScaleSmall).Measure(t)
	large := size(framework.ScaleLarge - framework.ScaleSmall).Measure(t)
	require.Zero(t, marks.doubles(), "instants with two writers in one StatefulSet")

	framework.RecordScaleFigures(t, framework.ScaleFigures{
		Operator: "lease", Noun: "lock", Plural: "locks", Change: "failover of one lock", Changes: "simultaneous failovers",
		ChangeNote: "The writer's readiness gate set False; each 2-pod StatefulSet's lock has failoverDelaySeconds 0 and " +
			"leaseDurationSeconds 60; the clock runs from the test's watch event of the writer not Ready to that of its successor's " +
			"writer label.",
		TenthNote: "The writers made not Ready by concurrent status patches. The operator runs 4 workers (MaxConcurrentReconciles).",
		SettleNote: "The locks created by 16 concurrent clients once their StatefulSets' pods were Ready; the clock stops when the " +
			"test's pod watch shows a writer label in each of their StatefulSets.",
		MemoryNote: fmt.Sprintf("Each lock comes with its StatefulSet, 2 pods and a Lease, all in the operator's caches. Before any "+
			"lock: %.1f MiB.", rssEmpty),
		Invariant: fmt.Sprintf("Invariant: %d instants with two writers in one StatefulSet.", marks.doubles()),
	}, small, large)
	framework.ScaleTeardown(t, namespaces...)
}

// leaseScaleLock is one StatefulSet of the bench, guarded by the lock named after it.
type leaseScaleLock struct{ ns, sts string }

// leaseScaleWorkloads creates n 2-pod StatefulSets (pause pods with the readiness gate, leaving at once
// when deleted) in ns and waits until all their pods are Ready.
func leaseScaleWorkloads(t *testing.T, ns string, n int) []leaseScaleLock {
	t.Helper()
	c := framework.ResFastClient(t)
	out := make([]leaseScaleLock, n)
	require.NoError(t, framework.ResParallel(n, func(i int) error {
		name := fmt.Sprintf("db-%04d", i)
		out[i] = leaseScaleLock{ns: ns, sts: name}
		template := framework.PodTemplate(name)
		template.Labels[leaseScaleLabel] = "true"
		template.Annotations = map[string]string{localcluster.TerminatingSecondsAnnotation: "0"}
		template.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: leaseGate}}
		_, err := c.AppsV1().StatefulSets(ns).Create(t.Context(), &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: appsv1.StatefulSetSpec{
				Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				Template: template, PodManagementPolicy: appsv1.ParallelPodManagement,
			},
		}, metav1.CreateOptions{})
		return err
	}))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		list, err := c.AppsV1().StatefulSets(ns).List(t.Context(), metav1.ListOptions{})
		require.NoError(ct, err)
		ready := 0
		for _, s := range list.Items {
			if s.Status.ReadyReplicas == 2 {
				ready++
			}
		}
		assert.Equal(ct, n, ready, "StatefulSets with 2 Ready pods")
	}, 15*time.Minute, time.Second)
	return out
}

// leaseScaleFailovers makes the writers of locks not Ready at once and returns, per lock, the time from
// its writer seen not Ready to its successor seen labelled writer, in ms; then makes the old writers
// Ready again.
func leaseScaleFailovers(t *testing.T, marks *leaseScalePods, locks []leaseScaleLock) []float64 {
	t.Helper()
	olds := make([]string, len(locks))
	for i, l := range locks {
		olds[i] = marks.writerOf(l.ns, l.sts)
		require.NotEmpty(t, olds[i], "%s/%s has a writer", l.ns, l.sts)
	}
	require.NoError(t, framework.ResParallel(len(locks), func(i int) error {
		return patchGate(t.Context(), locks[i].ns, olds[i], false)
	}))
	out := make([]float64, len(locks))
	for i, l := range locks {
		require.Eventually(t, func() bool {
			d, ok := marks.failover(l.ns, l.sts, olds[i])
			out[i] = framework.LeaseBenchMillis(d)
			return ok
		}, 5*time.Minute, 10*time.Millisecond, "%s/%s elects another writer than %s", l.ns, l.sts, olds[i])
	}
	require.NoError(t, framework.ResParallel(len(locks), func(i int) error {
		return patchGate(t.Context(), locks[i].ns, olds[i], true)
	}))
	return out
}

// leaseScalePods follows the bench's pods cluster-wide: per StatefulSet its writer, when each pod was
// last seen turning not Ready and when each was seen labelled writer; and it counts instants with two
// writers in one StatefulSet.
type leaseScalePods struct {
	mu         sync.Mutex
	ready      map[string]bool            // ns/pod
	notReadyAt map[string]time.Time       // ns/pod
	writerAt   map[string]time.Time       // ns/pod: when it was last seen becoming writer
	byGroup    map[string]map[string]bool // ns/StatefulSet -> its pods labelled writer
	double     int
}

func watchLeaseScalePods(t *testing.T) *leaseScalePods {
	t.Helper()
	m := &leaseScalePods{ready: map[string]bool{}, notReadyAt: map[string]time.Time{}, writerAt: map[string]time.Time{},
		byGroup: map[string]map[string]bool{}}
	framework.WatchPods(t, "", leaseScaleLabel+"=true", func(typ watch.EventType, pod *corev1.Pod) { m.observe(typ, pod, time.Now()) })
	return m
}

func (m *leaseScalePods) observe(typ watch.EventType, pod *corev1.Pod, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key, group := pod.Namespace+"/"+pod.Name, pod.Namespace+"/"+pod.Labels["app"]
	if m.byGroup[group] == nil {
		m.byGroup[group] = map[string]bool{}
	}
	writer := typ != watch.Deleted && pod.Labels[leasev1.RoleLabel] == leasev1.RoleWriter
	if writer && !m.byGroup[group][pod.Name] {
		m.writerAt[key] = now
		if len(m.byGroup[group]) > 0 {
			m.double++
		}
	}
	if writer {
		m.byGroup[group][pod.Name] = true
	} else {
		delete(m.byGroup[group], pod.Name)
	}
	ready := typ != watch.Deleted && usablePod(pod)
	if m.ready[key] && !ready {
		m.notReadyAt[key] = now
	}
	m.ready[key] = ready
}

// writers counts the StatefulSets of ns that have a writer.
func (m *leaseScalePods) writers(ns string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for group, w := range m.byGroup {
		if len(w) > 0 && strings.HasPrefix(group, ns+"/") {
			n++
		}
	}
	return n
}

// writerOf is the writer pod of the StatefulSet, or "".
func (m *leaseScalePods) writerOf(ns, sts string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for pod := range m.byGroup[ns+"/"+sts] {
		return pod
	}
	return ""
}

// failover returns, once a pod other than old is the StatefulSet's writer, the time from old seen not
// Ready to that pod seen labelled writer.
func (m *leaseScalePods) failover(ns, sts, old string) (time.Duration, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for pod := range m.byGroup[ns+"/"+sts] {
		if pod == old {
			continue
		}
		off, on := m.notReadyAt[ns+"/"+old], m.writerAt[ns+"/"+pod]
		if off.IsZero() || on.Before(off) {
			return 0, false
		}
		return on.Sub(off), true
	}
	return 0, false
}

func (m *leaseScalePods) doubles() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.double
}
