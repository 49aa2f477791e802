//go:build e2e && bench

package singleton

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/e2e/benchfmt"
	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// singletonScaleLabel marks the scale bench's pods, so one cluster-wide watch sees exactly them.
const singletonScaleLabel = "statefulops.dev/bench-singleton-scale"

// TestBenchSingletonScale measures singleton-operator with framework.ScaleSmall StatefulSingletons,
// then with framework.ScaleLarge, each a Wrapper-mode StatefulSingleton selecting a one-replica
// Deployment of kwok pods (framework.ScaleSize: the settle rate, one handover after a pod deletion
// while the others are at rest, 10 % deleted at once, memory per singleton, writes at rest). The
// operator and the webhook-server run as local processes, as in TestBenchSingletonHandover. The
// checker counts instants with two released pods of one singleton not yet deleted (must be 0).
func TestBenchSingletonScale(t *testing.T) {
	framework.ScaleWaitNoTerminating(t)
	// As TestBenchSingletonHandover: the manifest first, then the webhook pointed at the local process
	// (its in-cluster pods parked before the operator's, whose name label they share).
	require.NoError(t, framework.InstallManifestOnce("singleton-operator"))
	startBenchLocalWebhook(t)
	framework.StartLocalOperator(t, "singleton-operator")
	framework.ScaleNodes(t, 4) // 1,000 pods and their replacements need more than the cluster's own kwok nodes
	op, token := framework.ScaleOperator(t, "singleton", "singleton-operator")
	rssEmpty := framework.ScaleRSS(t, op)
	marks := watchSingletonScalePods(t)

	// Created without a client-side rate limit: the settle rate is the cluster's and the operator's.
	fast := framework.ScaleClient(t)
	clientset := framework.ResFastClient(t)
	var all []singletonScaleObject
	var splits singletonScaleSplits
	var namespaces []string
	size := func(n int) framework.ScaleSize {
		ns := framework.NewNamespace(t)
		namespaces = append(namespaces, ns)
		// Removed while the operator still runs: their finalizers need it (registered after
		// framework.StartLocalOperator, so this cleanup runs before it stops the process).
		t.Cleanup(func() { singletonScaleDelete(t, fast, ns) })
		for i := range n {
			all = append(all, singletonScaleObject{ns: ns, name: fmt.Sprintf("db-%04d", i)})
		}
		mine := all[len(all)-n:]
		return framework.ScaleSize{
			Op: op, Token: token, RSSEmpty: rssEmpty, Seed: 21, Total: len(all),
			Create: func() int {
				require.NoError(t, framework.ResParallel(n, func(i int) error {
					return singletonScaleCreate(t.Context(), fast, clientset, mine[i])
				}))
				return n
			},
			Settled: func() bool { return marks.serving(ns) == n },
			Change: func(idx []int) []float64 {
				objs := make([]singletonScaleObject, len(idx))
				for i, j := range idx {
					objs[i] = all[j]
				}
				framework.ScaleWaitQueueEmpty(t, op, token)
				return singletonScaleHandovers(t, fast, clientset, marks, objs, &splits)
			},
		}
	}
	small := size(framework.ScaleSmall).Measure(t)
	splits.log(t, framework.ScaleSmall)
	large := size(framework.ScaleLarge - framework.ScaleSmall).Measure(t)
	splits.log(t, framework.ScaleLarge)
	doubles, releases, releasedGone, examples := marks.counts()
	t.Logf("invariant checker: %d releases seen, %d released pods seen deleted, %d instants with two released pods of one singleton %v",
		releases, releasedGone, doubles, examples)
	// Not trivially zero: every singleton's first release and every handover's went through the checker.
	handovers := 2*framework.ScaleSingles + framework.ScaleSmall/10 + framework.ScaleLarge/10
	require.GreaterOrEqual(t, releases, framework.ScaleLarge+handovers, "releases seen by the checker")
	require.GreaterOrEqual(t, releasedGone, handovers, "released pods seen deleted by the checker")
	require.Zero(t, doubles, "instants with two released pods of one singleton")

	framework.RecordScaleFigures(t, framework.ScaleFigures{
		Operator: "singleton", Noun: "singleton", Plural: "singletons",
		Change: "handover after a pod deletion of one singleton", Changes: "simultaneous pod deletions, one per singleton",
		ChangeNote: "The active pod of a Wrapper-mode StatefulSingleton's one-replica Deployment (RollingUpdate) deleted; kwok " +
			"removes it at once (terminating seconds 0, no exit report on kwok, so the operator waits for the pod to be gone from the " +
			"API), the ReplicaSet's replacement is admitted held. The clock runs from the test's cluster-wide pod watch's DELETED " +
			"event of the old pod (not its first event with a deletionTimestamp: kwok's removal is not in the figure) to the first " +
			"event of the replacement released (epoch annotation) and Ready (the readiness gate the operator sets after the " +
			"release, then kwok's Ready). Each change starts with the operator's work queues empty and waits for every changed singleton " +
			"at rest (one pod, the StatefulSingleton Running and Ready with it as its active pod) before the next. " + fmt.Sprintf("singleton-operator runs %d reconcile workers (MaxConcurrentReconciles).", opsutil.Workers),
		TenthNote: "The active pods deleted by 16 concurrent clients.",
		SettleNote: "The Deployments cannot exist before their StatefulSingletons: the webhook holds only pods of a namespace the " +
			"operator labelled for a StatefulSingleton, selected by one the webhook has in its cache; a pod created before is " +
			"admitted without a hold (and adopted later). So within the timed creation, 16 concurrent clients each create a " +
			"StatefulSingleton (Wrapper mode), wait until a dry-run pod creation of its selector is admitted held by the " +
			"webhook, then create its one-replica Deployment; the clock stops when the test's pod watch shows a released, Ready " +
			"pod in each. The rate includes the Deployment and ReplicaSet controllers, the scheduler and kwok.",
		MemoryNote: fmt.Sprintf("Each singleton comes with a Deployment, its ReplicaSet and one Wrapper pod (status-sidecar, "+
			"readiness gate). %s Before any singleton: %.1f MiB.", resSingletonCaches["singleton-operator"], rssEmpty),
		Invariant: fmt.Sprintf("Invariant: %d instants with two released pods of one singleton (a pod counts from its first "+
			"watch event with the epoch annotation to its DELETED event; %d releases and %d deletions of released pods seen).",
			doubles, releases, releasedGone),
	}, small, large)
	for _, ns := range namespaces {
		singletonScaleDelete(t, fast, ns) // while the operator runs: the finalizers need it
	}
	framework.ScaleTeardown(t, namespaces...)
}

// singletonScaleObject is one StatefulSingleton of the bench and its Deployment, both named name; its
// pods carry the label app=name.
type singletonScaleObject struct{ ns, name string }

func (o singletonScaleObject) group() string { return o.ns + "/" + o.name }

// singletonScaleCreate creates the object's StatefulSingleton (Wrapper mode, selector app=name), waits
// until the webhook admits a pod of that selector held by it (a dry-run creation: nothing persists),
// then creates its one-replica Deployment.
func singletonScaleCreate(ctx context.Context, fast client.Client, c kubernetes.Interface, o singletonScaleObject) error {
	if err := fast.Create(ctx, &singletonv1.StatefulSingleton{
		ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: o.name},
		Spec: singletonv1.StatefulSingletonSpec{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": o.name}},
			HoldMode: singletonv1.HoldModeWrapper, TerminationGracePeriod: 10,
		},
	}); err != nil {
		return err
	}
	deadline := time.Now().Add(framework.Timeout)
	for {
		probe, err := c.CoreV1().Pods(o.ns).Create(ctx, appPod("probe-", o.name), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil && probe.Labels[singletonv1.LabelSingleton] == o.name {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("a pod of %s/%s is not admitted held (last error: %v)", o.ns, o.name, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	pod := appPod("", o.name)
	pod.Labels[singletonScaleLabel] = "true"
	pod.Annotations = map[string]string{localcluster.TerminatingSecondsAnnotation: "0"}
	_, err := c.AppsV1().Deployments(o.ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: o.name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": o.name}},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec},
		},
	}, metav1.CreateOptions{})
	return err
}

// singletonScaleSplits collects, beside the figures, where each handover's time went.
type singletonScaleSplits struct {
	kwok, release, ready []float64 // ms: old pod terminating → DELETED; DELETED → released; released → Ready
}

func (s *singletonScaleSplits) log(t *testing.T, n int) {
	t.Helper()
	p := func(v []float64) string {
		return fmt.Sprintf("p50 %.1f p99 %.1f", benchfmt.Percentile(v, 50), benchfmt.Percentile(v, 99))
	}
	t.Logf("BENCH singleton scale, %d singletons, handover splits (ms, all changes of this size): old pod first seen terminating → DELETED %s; "+
		"DELETED → replacement released %s; released → Ready %s", n, p(s.kwok), p(s.release), p(s.ready))
	*s = singletonScaleSplits{}
}

// singletonScaleHandovers waits until the singletons are at rest, deletes the active pod of each at
// once and returns, per singleton, the time from its old pod's DELETED event to its replacement's
// first event released and Ready, in ms, once every one of them is at rest again.
func singletonScaleHandovers(t *testing.T, fast client.Client, c kubernetes.Interface, marks *singletonScalePods,
	objs []singletonScaleObject, splits *singletonScaleSplits) []float64 {
	t.Helper()
	singletonScaleWaitAtRest(t, fast, marks, objs)
	olds := make([]string, len(objs))
	for i, o := range objs {
		olds[i] = marks.servingPod(o.group())
		require.NotEmpty(t, olds[i], "%s has a released, Ready pod", o.group())
	}
	require.NoError(t, framework.ResParallel(len(objs), func(i int) error {
		return c.CoreV1().Pods(objs[i].ns).Delete(t.Context(), olds[i], metav1.DeleteOptions{})
	}))
	out := make([]float64, len(objs))
	for i, o := range objs {
		var h singletonScaleHandover
		require.Eventually(t, func() bool {
			var ok bool
			h, ok = marks.handover(o, olds[i])
			return ok
		}, 5*time.Minute, 10*time.Millisecond, "%s releases another pod than %s, Ready", o.group(), olds[i])
		out[i] = framework.LeaseBenchMillis(h.serving.Sub(h.deleted))
		if !h.terminating.IsZero() {
			splits.kwok = append(splits.kwok, framework.LeaseBenchMillis(h.deleted.Sub(h.terminating)))
		}
		splits.release = append(splits.release, framework.LeaseBenchMillis(h.released.Sub(h.deleted)))
		splits.ready = append(splits.ready, framework.LeaseBenchMillis(h.serving.Sub(h.released)))
		if len(objs) == 1 { // where one change's time went, beside the operator's "Released pod" line
			t.Logf("handover of %s: old pod terminating → DELETED %.1f ms (kwok); terminating → replacement first seen %.1f ms "+
				"(the ReplicaSet controller, the webhook); DELETED → released %.1f ms; released → Ready %.1f ms",
				o.group(), framework.LeaseBenchMillis(h.deleted.Sub(h.terminating)), framework.LeaseBenchMillis(h.seen.Sub(h.terminating)),
				framework.LeaseBenchMillis(h.released.Sub(h.deleted)), framework.LeaseBenchMillis(h.serving.Sub(h.released)))
		}
	}
	singletonScaleWaitAtRest(t, fast, marks, objs)
	return out
}

// singletonScaleWaitAtRest waits until each singleton has one pod (seen on the watch), released and
// Ready, and its StatefulSingleton is Running and Ready with that pod as its active pod.
func singletonScaleWaitAtRest(t *testing.T, fast client.Client, marks *singletonScalePods, objs []singletonScaleObject) {
	t.Helper()
	namespaces := map[string]bool{}
	for _, o := range objs {
		namespaces[o.ns] = true
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		status := map[string]*singletonv1.StatefulSingleton{}
		if len(objs) == 1 {
			// One change reads its one StatefulSingleton. A List of the namespace's 1,000 costs the API
			// server about 0.2 s of CPU, and polled around every single change it loaded the API server
			// the next handover needed (the profile slices of 2026-12-07 23:47, docs/performance.md).
			ss := &singletonv1.StatefulSingleton{}
			if !assert.NoError(c, fast.Get(t.Context(), client.ObjectKey{Namespace: objs[0].ns, Name: objs[0].name}, ss)) {
				return
			}
			status[objs[0].group()] = ss
		} else {
			for ns := range namespaces {
				var list singletonv1.StatefulSingletonList
				if !assert.NoError(c, fast.List(t.Context(), &list, client.InNamespace(ns))) {
					return
				}
				for i := range list.Items {
					status[ns+"/"+list.Items[i].Name] = &list.Items[i]
				}
			}
		}
		for _, o := range objs {
			pod, alone := marks.atRest(o.group())
			if !assert.True(c, alone, "%s: one pod, released and Ready", o.group()) {
				return
			}
			ss := status[o.group()]
			if !assert.NotNil(c, ss, "StatefulSingleton %s", o.group()) {
				return
			}
			ready := meta.FindStatusCondition(ss.Status.Conditions, singletonv1.ConditionReady)
			if !assert.Equal(c, pod, ss.Status.ActivePod, "%s: active pod", o.group()) ||
				!assert.Equal(c, singletonv1.PhaseRunning, ss.Status.Phase, "%s: phase", o.group()) ||
				!assert.True(c, ready != nil && ready.Status == metav1.ConditionTrue, "%s: Ready", o.group()) {
				return
			}
		}
	}, 5*time.Minute, 100*time.Millisecond, "the %d singletons at rest", len(objs))
}

// singletonScaleDelete deletes the StatefulSingletons of ns and waits until their finalizers let them go.
func singletonScaleDelete(t *testing.T, fast client.Client, ns string) {
	ctx := context.WithoutCancel(t.Context())
	if err := fast.DeleteAllOf(ctx, &singletonv1.StatefulSingleton{}, client.InNamespace(ns)); err != nil {
		t.Logf("deleting the StatefulSingletons of %s: %v", ns, err)
	}
	assert.Eventually(t, func() bool {
		var list singletonv1.StatefulSingletonList
		return fast.List(ctx, &list, client.InNamespace(ns)) == nil && len(list.Items) == 0
	}, 10*time.Minute, time.Second, "the StatefulSingletons of %s are gone", ns)
}

// singletonScaleHandover is what the watch saw of one handover, in the test's clock.
type singletonScaleHandover struct {
	terminating, deleted    time.Time // the old pod: first event with a deletionTimestamp, DELETED event
	seen, released, serving time.Time // the replacement: first event, first with the epoch annotation, first released and Ready
}

// singletonScalePods follows the bench's pods cluster-wide: per singleton (its Deployment's pods,
// ns/app) its pods not yet deleted, those released, its pod released, Ready and not terminating, and
// when each pod reached each state; and it counts instants with two released pods of one singleton.
type singletonScalePods struct {
	mu            sync.Mutex
	live          map[string]map[string]bool // ns/app -> its pods not yet DELETED
	released      map[string]map[string]bool // ns/app -> its pods seen with the epoch annotation, not yet DELETED
	servingPods   map[string]string          // ns/app -> its pod released, Ready and without deletionTimestamp
	seenAt        map[string]time.Time       // ns/pod: first event
	terminatingAt map[string]time.Time       // ns/pod: first event with a deletionTimestamp
	deletedAt     map[string]time.Time       // ns/pod: DELETED event
	releasedAt    map[string]time.Time       // ns/pod: first event with the epoch annotation
	servingAt     map[string]time.Time       // ns/pod: first event released and Ready, without deletionTimestamp
	releases      int                        // pods seen becoming released
	releasedGone  int                        // released pods seen DELETED
	double        int                        // instants with two released pods of one singleton
	examples      []string                   // the first doubles
}

func watchSingletonScalePods(t *testing.T) *singletonScalePods {
	t.Helper()
	m := &singletonScalePods{live: map[string]map[string]bool{}, released: map[string]map[string]bool{},
		servingPods: map[string]string{}, seenAt: map[string]time.Time{}, terminatingAt: map[string]time.Time{}, deletedAt: map[string]time.Time{},
		releasedAt: map[string]time.Time{}, servingAt: map[string]time.Time{}}
	framework.WatchPods(t, "", singletonScaleLabel+"=true", func(typ watch.EventType, pod *corev1.Pod) { m.observe(typ, pod, time.Now()) })
	return m
}

func (m *singletonScalePods) observe(typ watch.EventType, pod *corev1.Pod, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key, group := pod.Namespace+"/"+pod.Name, pod.Namespace+"/"+pod.Labels["app"]
	if m.live[group] == nil {
		m.live[group], m.released[group] = map[string]bool{}, map[string]bool{}
	}
	hasEpoch := pod.Annotations[singletonv1.AnnotationEpoch] != ""
	if typ == watch.Deleted {
		delete(m.live[group], pod.Name)
		if m.released[group][pod.Name] {
			m.releasedGone++
		}
		delete(m.released[group], pod.Name)
		if m.deletedAt[key].IsZero() {
			m.deletedAt[key] = now
		}
	} else {
		m.live[group][pod.Name] = true
		if m.seenAt[key].IsZero() {
			m.seenAt[key] = now
		}
		if hasEpoch && !m.released[group][pod.Name] {
			if len(m.released[group]) > 0 {
				m.double++
				if len(m.examples) < 5 {
					m.examples = append(m.examples, fmt.Sprintf("%s released beside %v", key, singletonScaleKeys(m.released[group])))
				}
			}
			m.released[group][pod.Name] = true
			m.releases++
			m.releasedAt[key] = now
		}
		if pod.DeletionTimestamp != nil && m.terminatingAt[key].IsZero() {
			m.terminatingAt[key] = now
		}
	}
	serving := typ != watch.Deleted && pod.DeletionTimestamp == nil && hasEpoch &&
		framework.PodCondition(pod, corev1.PodReady) == corev1.ConditionTrue
	if serving {
		if m.servingAt[key].IsZero() {
			m.servingAt[key] = now
		}
		m.servingPods[group] = pod.Name
	} else if m.servingPods[group] == pod.Name {
		delete(m.servingPods, group)
	}
}

func singletonScaleKeys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	return out
}

// serving counts the singletons of ns with a released, Ready pod.
func (m *singletonScalePods) serving(ns string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for group := range m.servingPods {
		if strings.HasPrefix(group, ns+"/") {
			n++
		}
	}
	return n
}

// servingPod is the singleton's released, Ready pod, or "".
func (m *singletonScalePods) servingPod(group string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.servingPods[group]
}

// atRest returns the singleton's released, Ready pod, and whether it is the only pod of the singleton.
func (m *singletonScalePods) atRest(group string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	pod := m.servingPods[group]
	return pod, pod != "" && len(m.live[group]) == 1
}

// handover returns, once the old pod was seen DELETED and another pod of the singleton is released and
// Ready, the times of that handover.
func (m *singletonScalePods) handover(o singletonScaleObject, old string) (singletonScaleHandover, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	oldKey := o.ns + "/" + old
	next := m.servingPods[o.group()]
	if m.deletedAt[oldKey].IsZero() || next == "" || next == old {
		return singletonScaleHandover{}, false
	}
	nextKey := o.ns + "/" + next
	return singletonScaleHandover{terminating: m.terminatingAt[oldKey], deleted: m.deletedAt[oldKey],
		seen: m.seenAt[nextKey], released: m.releasedAt[nextKey], serving: m.servingAt[nextKey]}, true
}

// counts returns the instants with two released pods of one singleton, the releases and the
// deletions of released pods seen, and the first doubles.
func (m *singletonScalePods) counts() (doubles, releases, releasedGone int, examples []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.double, m.releases, m.releasedGone, append([]string(nil), m.examples...)
}
