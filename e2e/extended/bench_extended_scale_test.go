//go:build e2e && bench

package extended

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// extendedScaleLabel marks the scale bench's ExtendedStatefulSets and their pods, so one cluster-wide
// watch of each sees exactly them.
const extendedScaleLabel = "statefulops.dev/bench-extended-scale"

// TestBenchExtendedScale measures extended-operator with framework.ScaleSmall ExtendedStatefulSets,
// then with framework.ScaleLarge, each a one-replica ExtendedStatefulSet of kwok pods with
// updateOnEnvChange, reading its own ConfigMap through envFrom (framework.ScaleSize: the settle rate, one
// config restart while the others are at rest, 10 % restarting at once, memory per ExtendedStatefulSet,
// writes at rest). A config restart is a data change of the ConfigMap, with configChangeQuietPeriod 0s.
// The restart checker counts pods that ran beyond one per data change of their ExtendedStatefulSet
// (spurious restarts) and pods of a version other than 1 (a config restart rolls in place); both must
// be 0, and it must have seen every planned restart.
func TestBenchExtendedScale(t *testing.T) {
	framework.ScaleWaitNoTerminating(t)
	startExtendedOperator(t)
	require.True(t, extendedBenchHasQuietField(t), "the ExtendedStatefulSet CRD has spec.updateStrategy.configChangeQuietPeriod")
	framework.ScaleNodes(t, 4) // 1,000 pods and their replacements need more than the cluster's own kwok nodes
	op, token := framework.ScaleOperator(t, "extended", "extended-operator")
	rssEmpty := framework.ScaleRSS(t, op)
	marks := watchExtendedScale(t)

	// Created and changed without a client-side rate limit: the settle rate and latencies are the operator's.
	fast := framework.ResFastClient(t)
	fastCR := framework.ScaleClient(t)
	var all []extendedScaleObject
	var namespaces []string
	size := func(n int) framework.ScaleSize {
		ns := framework.NewNamespace(t)
		namespaces = append(namespaces, ns)
		for i := range n {
			all = append(all, extendedScaleObject{ns: ns, name: fmt.Sprintf("db-%04d", i)})
		}
		mine := all[len(all)-n:]
		// Each ExtendedStatefulSet's ConfigMap exists before it (and before the settle clock starts).
		require.NoError(t, framework.ResParallel(n, func(i int) error {
			_, err := fast.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: mine[i].configMap()}, Data: map[string]string{"level": "0"}}, metav1.CreateOptions{})
			return err
		}))
		return framework.ScaleSize{
			Op: op, Token: token, RSSEmpty: rssEmpty, Seed: 21, Total: len(all),
			Create: func() int {
				require.NoError(t, framework.ResParallel(n, func(i int) error {
					return fastCR.Create(t.Context(), newExtendedScaleESTS(ns, mine[i]))
				}))
				return n
			},
			Settled: func() bool { return marks.settled(ns) == n },
			Change: func(idx []int) []float64 {
				objs := make([]extendedScaleObject, len(idx))
				for i, j := range idx {
					objs[i] = all[j]
				}
				return extendedScaleRestarts(t, fast, marks, objs)
			},
		}
	}
	small := size(framework.ScaleSmall).Measure(t)
	large := size(framework.ScaleLarge - framework.ScaleSmall).Measure(t)

	planned, seen, spurious, otherVersion, forced := marks.restarts()
	t.Logf("restart checker: %d config restarts planned, %d seen, %d spurious, %d pods of a version other than 1 "+
		"(%d pods removed by the kwok simulator's duplicate delete left out)", planned, seen, spurious, otherVersion, forced)
	require.Equal(t, planned, seen, "the checker saw every planned config restart")
	require.Zero(t, spurious, "spurious restarts (pods that ran beyond one per data change)")
	require.Zero(t, otherVersion, "pods of a version other than 1 (a config restart rolls in place)")

	framework.RecordScaleFigures(t, framework.ScaleFigures{
		Operator: "extended", Noun: "ExtendedStatefulSet", Plural: "ExtendedStatefulSets",
		Change: "config restart of one ExtendedStatefulSet", Changes: "simultaneous config restarts",
		ChangeNote: "A data change of the ConfigMap a one-replica ExtendedStatefulSet reads (envFrom; updateOnEnvChange, " +
			"configChangeQuietPeriod 0s: the default 2s debounce would add 2 s to every sample); the operator puts the new " +
			"config hash into its StatefulSet's pod template and the StatefulSet controller replaces the pod (it leaves at " +
			"once: kwok terminating seconds 0). The clock starts on the test's clock just before the ConfigMap's merge patch " +
			"is sent and stops at the later of two of the test's watch events: the replacement pod (a new UID) Ready, and " +
			"the ExtendedStatefulSet Ready=True with the new status.configHash.",
		TenthNote: "The ConfigMaps patched by 16 concurrent clients, each sample clocked from its own patch.",
		SettleNote: "The ExtendedStatefulSets (their ConfigMaps created beforehand) created by 16 concurrent clients without " +
			"a client-side rate limit; the clock stops when the test's watches show every one Ready=True (observed " +
			"generation current) with a Ready pod.",
		MemoryNote: fmt.Sprintf("Each ExtendedStatefulSet comes with its StatefulSet (both cached whole) and its ConfigMap "+
			"(cached as slim metadata); pods are not cached. Before any ExtendedStatefulSet: %.1f MiB.", rssEmpty),
		Invariant: fmt.Sprintf("Invariant: %d spurious restarts (pods that ran beyond one per ConfigMap data change of their "+
			"ExtendedStatefulSet, of %d config restarts seen) and %d pods of a version other than 1.", spurious, seen, otherVersion),
	}, small, large)
	framework.ScaleTeardown(t, namespaces...)
}

// extendedScaleObject is one ExtendedStatefulSet of the bench.
type extendedScaleObject struct{ ns, name string }

func (o extendedScaleObject) key() string       { return o.ns + "/" + o.name }
func (o extendedScaleObject) configMap() string { return o.name + "-conf" }

// newExtendedScaleESTS is the bench's ExtendedStatefulSet: one replica of a kwok pod (labelled for the
// bench's pod watch, leaving at once when deleted) that reads its ConfigMap through envFrom, with
// updateOnEnvChange and configChangeQuietPeriod 0s.
func newExtendedScaleESTS(ns string, o extendedScaleObject) *extendedv1alpha1.ExtendedStatefulSet {
	e := framework.NewESTS(o.name, 1)
	e.Namespace = ns
	e.Labels = map[string]string{extendedScaleLabel: "true"}
	e.Spec.UpdateStrategy.ConfigChangeQuietPeriod = &metav1.Duration{}
	tmpl := &e.Spec.Template.Spec.Template
	tmpl.Labels[extendedScaleLabel] = "true"
	tmpl.Annotations = map[string]string{localcluster.TerminatingSecondsAnnotation: "0"}
	tmpl.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: o.configMap()}}}}
	return e
}

// extendedScaleRestarts changes the ConfigMap data of each ExtendedStatefulSet at once and returns, per
// ExtendedStatefulSet, the time from its patch sent to the later of its replacement pod seen Ready and
// itself seen Ready with the new config hash, in ms, once every one of them is (at rest again).
func extendedScaleRestarts(t *testing.T, fast kubernetes.Interface, marks *extendedScaleMarks, objs []extendedScaleObject) []float64 {
	t.Helper()
	oldPods, oldHashes, levels := make([]string, len(objs)), make([]string, len(objs)), make([]int, len(objs))
	for i, o := range objs {
		oldPods[i], oldHashes[i] = marks.readyPod(o.key()), marks.readyHash(o.key())
		require.NotEmpty(t, oldPods[i], "%s has a Ready pod", o.key())
		require.NotEmpty(t, oldHashes[i], "%s is Ready with a config hash", o.key())
		levels[i] = marks.plan(o.key())
	}
	starts := make([]time.Time, len(objs))
	require.NoError(t, framework.ResParallel(len(objs), func(i int) error {
		patch := fmt.Appendf(nil, `{"data":{"level":%q}}`, fmt.Sprint(levels[i]))
		starts[i] = time.Now()
		_, err := fast.CoreV1().ConfigMaps(objs[i].ns).Patch(t.Context(), objs[i].configMap(), types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}))
	out := make([]float64, len(objs))
	for i, o := range objs {
		require.Eventually(t, func() bool {
			stop, ok := marks.restarted(o.key(), oldPods[i], oldHashes[i])
			out[i] = framework.LeaseBenchMillis(stop.Sub(starts[i]))
			return ok
		}, 5*time.Minute, 10*time.Millisecond, "%s replaces pod %s and is Ready again with a new config hash", o.key(), oldPods[i])
	}
	return out
}

// extendedScaleMarks follows the bench's ExtendedStatefulSets and pods cluster-wide: per
// ExtendedStatefulSet whether it is Ready, its status.configHash and when it was first seen Ready with
// each hash; per pod when it was first seen and first seen Ready, and whether it is gone; and the
// restart invariants.
type extendedScaleMarks struct {
	mu      sync.Mutex
	sets    map[string]*extendedScaleSet // ns/ExtendedStatefulSet
	pods    map[string]*extendedScalePod // pod UID
	live    map[string]map[string]bool   // ns/ExtendedStatefulSet -> UIDs of its pods not gone
	planned map[string]int               // ns/ExtendedStatefulSet -> the ConfigMap data changes made
	other   int                          // pods of a version other than 1
}

type extendedScaleSet struct {
	ready   bool
	hash    string
	readyAt map[string]time.Time // config hash -> first seen Ready with it
}

type extendedScalePod struct {
	group              string
	firstSeen, readyAt time.Time
	stopping, gone     bool
	forced             bool // removed by the simulator (see restartChecker): left out of the counts
}

func watchExtendedScale(t *testing.T) *extendedScaleMarks {
	t.Helper()
	m := &extendedScaleMarks{sets: map[string]*extendedScaleSet{}, pods: map[string]*extendedScalePod{},
		live: map[string]map[string]bool{}, planned: map[string]int{}}
	framework.WatchPods(t, "", extendedScaleLabel+"=true", func(typ watch.EventType, pod *corev1.Pod) { m.observePod(typ, pod, time.Now()) })

	// The ExtendedStatefulSets as WatchPods watches pods: listed, then watched from the list's
	// resourceVersion, the watch resumed when the API server closes it.
	selector := extendedScaleLabel + "=true"
	var list extendedv1alpha1.ExtendedStatefulSetList
	require.NoError(t, framework.Client.List(t.Context(), &list, client.MatchingLabels{extendedScaleLabel: "true"}))
	for i := range list.Items {
		m.observeSet(watch.Added, &list.Items[i], time.Now())
	}
	w, err := watchtools.NewRetryWatcherWithContext(t.Context(), list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			options.LabelSelector = selector
			return framework.Client.Watch(ctx, &extendedv1alpha1.ExtendedStatefulSetList{}, &client.ListOptions{Raw: &options})
		},
	})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			if e, ok := ev.Object.(*extendedv1alpha1.ExtendedStatefulSet); ok && e.Name != "" {
				m.observeSet(ev.Type, e, time.Now())
			}
		}
	}()
	return m
}

func (m *extendedScaleMarks) observeSet(typ watch.EventType, e *extendedv1alpha1.ExtendedStatefulSet, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := e.Namespace + "/" + e.Name
	if typ == watch.Deleted {
		delete(m.sets, key)
		return
	}
	s := m.sets[key]
	if s == nil {
		s = &extendedScaleSet{readyAt: map[string]time.Time{}}
		m.sets[key] = s
	}
	s.ready = estsCondition(e, extendedv1alpha1.ConditionReady) == metav1.ConditionTrue && e.Status.ObservedGeneration == e.Generation
	s.hash = e.Status.ConfigHash
	if _, seen := s.readyAt[s.hash]; s.ready && !seen {
		s.readyAt[s.hash] = now
	}
}

func (m *extendedScaleMarks) observePod(typ watch.EventType, pod *corev1.Pod, now time.Time) {
	uid := string(pod.UID)
	if uid == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pods[uid]
	if p == nil {
		p = &extendedScalePod{group: pod.Namespace + "/" + pod.Labels[extendedv1alpha1.NameLabel], firstSeen: now}
		m.pods[uid] = p
		if pod.Labels[extendedv1alpha1.VersionLabel] != "1" {
			m.other++
		}
	}
	if p.gone {
		return
	}
	if typ == watch.Deleted {
		p.gone = true
		delete(m.live[p.group], uid)
		// Gone without a graceful deletion first, or within simulatorDeleteWindow of its creation: the
		// kwok simulator's duplicate delete (restartChecker), not a restart of the operator's.
		p.forced = !p.stopping || now.Sub(p.firstSeen) < simulatorDeleteWindow
		return
	}
	if m.live[p.group] == nil {
		m.live[p.group] = map[string]bool{}
	}
	m.live[p.group][uid] = true
	if pod.DeletionTimestamp != nil {
		p.stopping = true
	}
	if p.readyAt.IsZero() && opsutil.PodReady(pod) && pod.DeletionTimestamp == nil {
		p.readyAt = now
	}
}

// settled counts the ExtendedStatefulSets of ns that are Ready with a Ready pod.
func (m *extendedScaleMarks) settled(ns string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for key, s := range m.sets {
		if s.ready && strings.HasPrefix(key, ns+"/") && m.readyPodLocked(key) != "" {
			n++
		}
	}
	return n
}

// readyPod is the UID of a live Ready pod of the ExtendedStatefulSet, or "".
func (m *extendedScaleMarks) readyPod(key string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.readyPodLocked(key)
}

func (m *extendedScaleMarks) readyPodLocked(key string) string {
	for uid := range m.live[key] {
		if p := m.pods[uid]; !p.readyAt.IsZero() && !p.stopping {
			return uid
		}
	}
	return ""
}

// readyHash is the ExtendedStatefulSet's config hash while it is Ready, or "".
func (m *extendedScaleMarks) readyHash(key string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.sets[key]; s != nil && s.ready {
		return s.hash
	}
	return ""
}

// plan counts one more ConfigMap data change of the ExtendedStatefulSet and returns their number (the
// next data value).
func (m *extendedScaleMarks) plan(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.planned[key]++
	return m.planned[key]
}

// restarted returns, once a pod of the ExtendedStatefulSet other than oldPod is Ready and the
// ExtendedStatefulSet is Ready with a config hash other than oldHash, the later of the two moments they
// were first seen so.
func (m *extendedScaleMarks) restarted(key, oldPod, oldHash string) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sets[key]
	if s == nil || !s.ready || s.hash == oldHash {
		return time.Time{}, false
	}
	for uid := range m.live[key] {
		if p := m.pods[uid]; uid != oldPod && !p.readyAt.IsZero() && !p.stopping {
			stop := s.readyAt[s.hash]
			if p.readyAt.After(stop) {
				stop = p.readyAt
			}
			return stop, true
		}
	}
	return time.Time{}, false
}

// restarts sums the restart checker's counts over the ExtendedStatefulSets: the planned restarts (one
// per ConfigMap data change), those seen (pods that became Ready beyond the first, up to the planned
// ones), the spurious ones (beyond the planned), the pods of a version other than 1 and the pods the
// simulator removed (left out).
func (m *extendedScaleMarks) restarts() (planned, seen, spurious, otherVersion, forced int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ran := map[string]int{}
	for _, p := range m.pods {
		switch {
		case p.forced:
			forced++
		case !p.readyAt.IsZero():
			ran[p.group]++
		}
	}
	for key := range m.sets {
		restarts := max(ran[key]-1, 0)
		planned += m.planned[key]
		seen += min(restarts, m.planned[key])
		spurious += max(restarts-m.planned[key], 0)
	}
	return planned, seen, spurious, m.other, forced
}
