//go:build e2e && bench

package cluster

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// clusterScaleLabel marks the scale bench's pods, so one cluster-wide watch sees exactly them.
const clusterScaleLabel = "statefulops.dev/bench-cluster-scale"

// TestBenchClusterScale measures cluster-operator with framework.ScaleSmall StatefulClusters, then
// with framework.ScaleLarge, each a one-replica StatefulCluster of kwok pods (framework.ScaleSize:
// the settle rate, one pod replacement while the others are at rest, 10 % replaced at once, memory per
// StatefulCluster, writes at rest). The identity checker counts names used twice and instants with
// more live pods than replicas in one StatefulCluster (must be 0).
func TestBenchClusterScale(t *testing.T) {
	framework.ScaleWaitNoTerminating(t)
	startClusterOperator(t)
	framework.ScaleNodes(t, 4) // 1,000 pods and their replacements need more than the cluster's own kwok nodes
	op, token := framework.ScaleOperator(t, "cluster", "cluster-operator")
	rssEmpty := framework.ScaleRSS(t, op)
	marks := watchClusterScalePods(t)

	// Created without a client-side rate limit: the settle rate is the operator's.
	fast := framework.ScaleClient(t)
	var all []clusterScaleObject
	var namespaces []string
	size := func(n int) framework.ScaleSize {
		ns := framework.NewNamespace(t)
		namespaces = append(namespaces, ns)
		for i := range n {
			all = append(all, clusterScaleObject{ns: ns, name: fmt.Sprintf("db-%04d", i)})
		}
		mine := all[len(all)-n:]
		return framework.ScaleSize{
			Op: op, Token: token, RSSEmpty: rssEmpty, Seed: 21, Total: len(all),
			Create: func() int {
				require.NoError(t, framework.ResParallel(n, func(i int) error {
					sc := framework.NewStatefulCluster(mine[i].name, 1)
					sc.Namespace = ns
					sc.Spec.Template.Labels[clusterScaleLabel] = "true"
					sc.Spec.Template.Annotations = map[string]string{localcluster.TerminatingSecondsAnnotation: "0"}
					return fast.Create(t.Context(), sc)
				}))
				return n
			},
			Settled: func() bool { return marks.ready(ns) == n },
			Change: func(idx []int) []float64 {
				objs := make([]clusterScaleObject, len(idx))
				for i, j := range idx {
					objs[i] = all[j]
				}
				return clusterScaleReplacements(t, marks, objs)
			},
		}
	}
	small := size(framework.ScaleSmall).Measure(t)
	large := size(framework.ScaleLarge - framework.ScaleSmall).Measure(t)
	reused, over := marks.violations()
	require.Zero(t, reused, "pod names used twice")
	require.Zero(t, over, "instants with more live pods than replicas in one StatefulCluster")

	framework.RecordScaleFigures(t, framework.ScaleFigures{
		Operator: "cluster", Noun: "StatefulCluster", Plural: "StatefulClusters",
		Change: "replacement of one deleted pod", Changes: "simultaneous pod replacements",
		ChangeNote: "The pod of a one-replica StatefulCluster deleted (it leaves at once: kwok terminating seconds 0); the clock " +
			"runs from the test's watch event of the pod gone to that of its replacement's creation (a new identity), as in the " +
			"replacement row above.",
		TenthNote: "The pods deleted by concurrent requests.",
		SettleNote: "The StatefulClusters created by 16 concurrent clients; the clock stops when the test's pod watch shows a Ready " +
			"pod in each.",
		MemoryNote: fmt.Sprintf("Each StatefulCluster comes with its pod (and the operator's own objects for it), all in the "+
			"operator's caches. Before any StatefulCluster: %.1f MiB.", rssEmpty),
		Invariant: fmt.Sprintf("Invariant: %d pod names used twice, %d instants with more live pods than replicas.", reused, over),
	}, small, large)
	framework.ScaleTeardown(t, namespaces...)
}

// clusterScaleObject is one StatefulCluster of the bench; its pods carry the label app=name.
type clusterScaleObject struct{ ns, name string }

// clusterScaleReplacements deletes the pod of each StatefulCluster at once and returns, per
// StatefulCluster, the time from its pod seen gone to its replacement seen created, in ms, once every
// replacement is Ready.
func clusterScaleReplacements(t *testing.T, marks *clusterScalePods, objs []clusterScaleObject) []float64 {
	t.Helper()
	olds := make([]string, len(objs))
	for i, o := range objs {
		olds[i] = marks.podOf(o.ns, o.name)
		require.NotEmpty(t, olds[i], "%s/%s has a pod", o.ns, o.name)
	}
	require.NoError(t, framework.ResParallel(len(objs), func(i int) error {
		return framework.Clientset.CoreV1().Pods(objs[i].ns).Delete(t.Context(), olds[i], metav1.DeleteOptions{})
	}))
	out := make([]float64, len(objs))
	for i, o := range objs {
		require.Eventually(t, func() bool {
			d, ok := marks.replaced(o.ns, o.name, olds[i])
			out[i] = framework.LeaseBenchMillis(d)
			return ok
		}, 5*time.Minute, 10*time.Millisecond, "%s/%s replaces %s with a Ready pod", o.ns, o.name, olds[i])
	}
	return out
}

// clusterScalePods follows the bench's pods cluster-wide: per StatefulCluster its live pods, when each
// pod was seen created, gone and Ready; and the identity invariants.
type clusterScalePods struct {
	mu        sync.Mutex
	live      map[string]map[string]bool // ns/StatefulCluster -> its pods not yet gone
	names     map[string]string          // ns/pod -> UID of the pod that used that name
	createdAt map[string]time.Time       // ns/pod
	goneAt    map[string]time.Time       // ns/pod
	readyPods map[string]bool            // ns/pod: Ready
	reused    int
	over      int
}

func watchClusterScalePods(t *testing.T) *clusterScalePods {
	t.Helper()
	m := &clusterScalePods{live: map[string]map[string]bool{}, names: map[string]string{}, createdAt: map[string]time.Time{},
		goneAt: map[string]time.Time{}, readyPods: map[string]bool{}}
	framework.WatchPods(t, "", clusterScaleLabel+"=true", func(typ watch.EventType, pod *corev1.Pod) { m.observe(typ, pod, time.Now()) })
	return m
}

func (m *clusterScalePods) observe(typ watch.EventType, pod *corev1.Pod, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key, group := pod.Namespace+"/"+pod.Name, pod.Namespace+"/"+pod.Labels["app"]
	if uid, seen := m.names[key]; !seen {
		m.names[key], m.createdAt[key] = string(pod.UID), now
	} else if uid != string(pod.UID) {
		m.reused++
		m.names[key], m.createdAt[key] = string(pod.UID), now
	}
	if m.live[group] == nil {
		m.live[group] = map[string]bool{}
	}
	if typ == watch.Deleted {
		delete(m.live[group], pod.Name)
		m.goneAt[key] = now
		delete(m.readyPods, key)
		return
	}
	if !m.live[group][pod.Name] {
		m.live[group][pod.Name] = true
		if len(m.live[group]) > 1 { // every StatefulCluster of the bench has one replica
			m.over++
		}
	}
	m.readyPods[key] = opsutil.PodReady(pod)
}

// ready counts the StatefulClusters of ns with a Ready pod.
func (m *clusterScalePods) ready(ns string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for group, pods := range m.live {
		if !strings.HasPrefix(group, ns+"/") {
			continue
		}
		for pod := range pods {
			if m.readyPods[ns+"/"+pod] {
				n++
				break
			}
		}
	}
	return n
}

// podOf is the live pod of the StatefulCluster, or "".
func (m *clusterScalePods) podOf(ns, name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for pod := range m.live[ns+"/"+name] {
		return pod
	}
	return ""
}

// replaced returns, once a pod other than old of the StatefulCluster is Ready, the time from old seen
// gone to that pod seen created.
func (m *clusterScalePods) replaced(ns, name, old string) (time.Duration, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	gone := m.goneAt[ns+"/"+old]
	if gone.IsZero() {
		return 0, false
	}
	for pod := range m.live[ns+"/"+name] {
		if pod != old && m.readyPods[ns+"/"+pod] {
			return m.createdAt[ns+"/"+pod].Sub(gone), true
		}
	}
	return 0, false
}

func (m *clusterScalePods) violations() (reused, over int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reused, m.over
}
