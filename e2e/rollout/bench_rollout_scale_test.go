//go:build e2e && bench

package rollout

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// rolloutScaleLabel marks the scale bench's pods and PhasedRollouts, so one cluster-wide watch of each
// sees exactly them.
const rolloutScaleLabel = "statefulops.dev/bench-rollout-scale"

// rolloutScaleReplicas is the size of each StatefulSet: two pods, so that a rollout is two checked
// steps (partition 2 → 1 → 0, then held at 2 again) and "one pod at a time" means something (with
// one replica no instant could have two pods down, and the checker would be zero by construction).
const rolloutScaleReplicas = 2

// TestBenchRolloutScale measures rollout-operator with framework.ScaleSmall PhasedRollouts, then with
// framework.ScaleLarge, each rolling a 2-pod StatefulSet of kwok pods, every step gated by a query of a
// real Prometheus (framework.ScaleSize: the settle rate, one rollout while the others are at rest, 10 %
// rolling at once, memory per PhasedRollout, writes at rest). A change is one template change of the
// StatefulSet; it is done when the PhasedRollout is Updated and Ready on the new revision and both pods
// run it, Ready. The checker counts instants where one StatefulSet has more than one pod not Ready or
// being replaced (must be 0); its positive control (both pods of a plain StatefulSet deleted at once)
// shows it can count one.
func TestBenchRolloutScale(t *testing.T) {
	framework.ScaleWaitNoTerminating(t)
	startRolloutOperator(t)
	framework.ScaleNodes(t, 6) // 2,000 pods need more than the cluster's own kwok nodes
	op, token := framework.ScaleOperator(t, "rollout", "rollout-operator")

	// The gate of every step: a real Prometheus scraping an exporter of app_errors{namespace,pod} (0
	// for every pod of the bench), queried for the pod the step rolled; no sample passes (NoData).
	exp := newMetricsExporter(t)
	prom := startPrometheusFor(t, exp.srv.Listener.Addr().String())

	// Created and changed without a client-side rate limit: the settle rate and latencies are the
	// operator's.
	fast := framework.ScaleClient(t)
	clientset := framework.ResFastClient(t)
	pods := watchRolloutScalePods(t)
	prs := watchRolloutScalePRs(t, fast)

	control := rolloutScaleControl(t, clientset, pods)
	namespaces := []string{control.ns}
	// The baseline once the process has settled after its start (its first measurement, taken at once,
	// was above the one with 100 PhasedRollouts).
	framework.ResWaitRSSSteady(t, []*framework.ResOperator{op})
	rssEmpty := framework.ScaleRSS(t, op)

	var all []rolloutScaleObject
	var unseen atomic.Int64 // rollouts in which the checker did not see each pod replaced
	changes := 0
	size := func(n int) framework.ScaleSize {
		ns := framework.NewNamespace(t)
		namespaces = append(namespaces, ns)
		mine := rolloutScaleWorkloads(t, clientset, pods, exp, ns, n)
		all = append(all, mine...)
		return framework.ScaleSize{
			Op: op, Token: token, RSSEmpty: rssEmpty, Seed: 21, Total: len(all),
			Create: func() int {
				require.NoError(t, framework.ResParallel(n, func(i int) error {
					return fast.Create(t.Context(), rolloutScalePhasedRollout(ns, mine[i].name, prom.url))
				}))
				return n
			},
			Settled: func() bool { return rolloutScaleSettled(pods, prs, mine) == n },
			Change: func(idx []int) []float64 {
				objs := make([]rolloutScaleObject, len(idx))
				for i, j := range idx {
					objs[i] = all[j]
				}
				changes += len(objs)
				framework.ScaleWaitQueueEmpty(t, op, token) // the others at rest
				before, start := rolloutScaleScrape(t.Context(), op, token), time.Now()
				out, missed := rolloutScaleRollouts(t, clientset, pods, prs, objs)
				unseen.Add(int64(missed))
				if len(objs) > 1 {
					logRolloutScaleWork(t, len(objs), before, rolloutScaleScrape(t.Context(), op, token), time.Since(start))
				}
				return out
			},
		}
	}
	small := size(framework.ScaleSmall).Measure(t)
	large := size(framework.ScaleLarge - framework.ScaleSmall).Measure(t)

	doubles, replacements := pods.violations(control.ns)
	t.Logf("checker: %d instants with more than one pod down in one StatefulSet; %d single-pod replacements seen in %d rollouts (%d rollouts without both pods seen replaced); control: %d",
		doubles, replacements, changes, unseen.Load(), control.doubles)
	assert.Zero(t, unseen.Load(), "rollouts in which the checker did not see both pods replaced")
	require.Zero(t, doubles, "instants with more than one pod of one StatefulSet not Ready or being replaced")

	framework.RecordScaleFigures(t, framework.ScaleFigures{
		Operator: "rollout", Noun: "PhasedRollout", Plural: "PhasedRollouts",
		Change: "rollout of one 2-pod StatefulSet", Changes: "simultaneous StatefulSet rollouts",
		ChangeNote: "One merge patch of the StatefulSet's spec.template annotations (a new revision); each PhasedRollout gates " +
			"every step with a query of a real Prometheus (initialDelaySeconds 0, periodSeconds 1, successThreshold 1; " +
			"status times round up to the second). The clock starts at the test's clock just before the patch is sent and stops " +
			"at the later of two watch events of the test: the PhasedRollout's event showing status.updateRevision at the new " +
			"revision with phase Updated and conditions Ready and Updated True, and the pod event showing the StatefulSet's last " +
			"pod Ready on that revision (both pods on it, none being deleted). The next change waits until the partition is " +
			"held at 2 again and the StatefulSet's currentRevision is the new one, and starts with the operator's work queues empty.",
		TenthNote: fmt.Sprintf("The templates patched by 16 concurrent clients. rollout-operator runs %d reconcile workers "+
			"(MaxConcurrentReconciles) and reads the PhasedRollout, the StatefulSet and its pods from the API server at every "+
			"reconcile.", opsutil.Workers),
		SettleNote: "The PhasedRollouts created by 16 concurrent clients once their StatefulSets' 2 pods were Ready; one counts as " +
			"settled when the test's PhasedRollout watch shows it Updated and Ready at its generation (the operator holds the " +
			"partition at 2 before it writes that status) and its 2 pods are Ready.",
		MemoryNote: fmt.Sprintf("Each PhasedRollout comes with its StatefulSet and 2 pods (slim: identity, labels, owners, "+
			"deletion, readiness) in the operator's caches. Before any PhasedRollout: %.1f MiB.", rssEmpty),
		Invariant: fmt.Sprintf("Invariant: %d instants with more than one pod of one StatefulSet not Ready or being replaced "+
			"(the test's pod watch; it saw %d single-pod replacements in the %d rollouts, and counted %d such instant(s) in its "+
			"control, both pods of a plain StatefulSet deleted at once).", doubles, replacements, changes, control.doubles),
	}, small, large)
	framework.ScaleTeardown(t, namespaces...)
}

// rolloutScaleObject is one StatefulSet of the bench and its PhasedRollout, both named name; its
// pods carry the label app=name.
type rolloutScaleObject struct{ ns, name string }

func (o rolloutScaleObject) key() string { return o.ns + "/" + o.name }

// rolloutScaleQuery is the check of every step: the error gauge of the pod the step rolled.
const rolloutScaleQuery = `app_errors{namespace="{{namespace}}",pod="{{pod}}"} > 0`

// rolloutScalePhasedRollout is the PhasedRollout of StatefulSet name: one check per step, as fast as
// the API allows.
func rolloutScalePhasedRollout(ns, name, promURL string) *rolloutv1alpha1.PhasedRollout {
	return &rolloutv1alpha1.PhasedRollout{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{rolloutScaleLabel: "true"}},
		Spec: rolloutv1alpha1.PhasedRolloutSpec{
			TargetRef: name,
			Check: rolloutv1alpha1.Check{
				InitialDelaySeconds: ptr.To[int32](0), PeriodSeconds: 1, SuccessThreshold: 1,
				Query: &rolloutv1alpha1.PrometheusQuery{Expr: rolloutScaleQuery, URL: strings.TrimPrefix(promURL, "http://")},
			},
		},
	}
}

// rolloutScaleStatefulSet is a 2-pod StatefulSet (RollingUpdate, which a PhasedRollout requires) of
// pause pods labelled for the bench's watch, leaving at once when deleted.
func rolloutScaleStatefulSet(name string) *appsv1.StatefulSet {
	template := framework.PodTemplate(name)
	template.Labels[rolloutScaleLabel] = "true"
	template.Annotations = map[string]string{localcluster.TerminatingSecondsAnnotation: "0"}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](rolloutScaleReplicas), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: template, PodManagementPolicy: appsv1.ParallelPodManagement,
		},
	}
}

// rolloutScaleWorkloads creates n StatefulSets in ns (their pods' error gauges at 0) and waits until
// every pod is Ready.
func rolloutScaleWorkloads(t *testing.T, c kubernetes.Interface, pods *rolloutScalePods, exp *metricsExporter, ns string, n int) []rolloutScaleObject {
	t.Helper()
	out := make([]rolloutScaleObject, n)
	for i := range n {
		out[i] = rolloutScaleObject{ns: ns, name: fmt.Sprintf("db-%04d", i)}
		for p := range rolloutScaleReplicas {
			exp.setErrors(ns, fmt.Sprintf("%s-%d", out[i].name, p), 0)
		}
	}
	require.NoError(t, framework.ResParallel(n, func(i int) error {
		_, err := c.AppsV1().StatefulSets(ns).Create(t.Context(), rolloutScaleStatefulSet(out[i].name), metav1.CreateOptions{})
		return err
	}))
	require.Eventually(t, func() bool {
		ready := 0
		for _, o := range out {
			if _, _, ok := pods.steady(o.key()); ok {
				ready++
			}
		}
		return ready == n
	}, 15*time.Minute, time.Second, "the %d StatefulSets of %s have %d Ready pods", n, ns, rolloutScaleReplicas)
	return out
}

// rolloutScaleSettled counts the objects whose PhasedRollout is done (Updated and Ready) and whose
// pods are Ready.
func rolloutScaleSettled(pods *rolloutScalePods, prs *rolloutScalePRs, objs []rolloutScaleObject) int {
	n := 0
	for _, o := range objs {
		_, _, podsOK := pods.steady(o.key())
		_, _, prOK := prs.done(o.key())
		if podsOK && prOK {
			n++
		}
	}
	return n
}

// rolloutScaleSeq makes every template change a new revision.
var rolloutScaleSeq atomic.Int64

// rolloutScaleRollouts changes the template of each StatefulSet at once and returns, per object, the
// time from its patch (client time) to its rollout seen complete, in ms, once every one is at rest
// again (partition held at 2, the StatefulSet's current revision the new one); and the number of
// rollouts in which the pod watch did not see both pods replaced.
func rolloutScaleRollouts(t *testing.T, c kubernetes.Interface, pods *rolloutScalePods, prs *rolloutScalePRs, objs []rolloutScaleObject) ([]float64, int) {
	t.Helper()
	olds := make([]string, len(objs))
	episodes := make([]int, len(objs))
	for i, o := range objs {
		rev, _, ok := prs.done(o.key())
		require.True(t, ok, "%s is at rest", o.key())
		olds[i] = rev
		episodes[i] = pods.replacements(o.key())
	}
	starts := make([]time.Time, len(objs))
	require.NoError(t, framework.ResParallel(len(objs), func(i int) error {
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"e2e/rev":"%d"}}}}}`, rolloutScaleSeq.Add(1))
		starts[i] = time.Now()
		_, err := c.AppsV1().StatefulSets(objs[i].ns).Patch(t.Context(), objs[i].name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}))
	out := make([]float64, len(objs))
	revs := make([]string, len(objs))
	for i, o := range objs {
		require.Eventually(t, func() bool {
			rev, prAt, ok := prs.done(o.key())
			if !ok || rev == olds[i] {
				return false
			}
			podRev, podsAt, ok := pods.steady(o.key())
			if !ok || podRev != rev {
				return false
			}
			revs[i] = rev
			out[i] = framework.LeaseBenchMillis(rolloutScaleLater(prAt, podsAt).Sub(starts[i]))
			return true
		}, 10*time.Minute, 10*time.Millisecond, "%s rolls to its new revision", o.key())
	}
	missed := 0
	for i, o := range objs {
		if pods.replacements(o.key())-episodes[i] < rolloutScaleReplicas {
			missed++
		}
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			sts, err := c.AppsV1().StatefulSets(o.ns).Get(t.Context(), o.name, metav1.GetOptions{})
			require.NoError(ct, err)
			ru := sts.Spec.UpdateStrategy.RollingUpdate
			assert.True(ct, ru != nil && ptr.Deref(ru.Partition, 0) == rolloutScaleReplicas, "partition held at %d", rolloutScaleReplicas)
			assert.Equal(ct, sts.Generation, sts.Status.ObservedGeneration)
			assert.Equal(ct, revs[i], sts.Status.CurrentRevision)
			assert.Equal(ct, revs[i], sts.Status.UpdateRevision)
		}, 5*time.Minute, 100*time.Millisecond, "%s at rest again", o.key())
	}
	return out, missed
}

// rolloutScaleLater returns the later of two times.
func rolloutScaleLater(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}

// rolloutScaleCtl is the checker's positive control: a plain StatefulSet (no PhasedRollout) whose
// two pods the test deleted at once, and the instants the checker counted there.
type rolloutScaleCtl struct {
	ns      string
	doubles int
}

// rolloutScaleControl deletes both pods of a plain 2-pod StatefulSet at once and requires the checker
// to count it (up to three tries: the pods are deleted by one request, but the first one's replacement
// might in theory be Ready before the second one is marked).
func rolloutScaleControl(t *testing.T, c kubernetes.Interface, pods *rolloutScalePods) rolloutScaleCtl {
	t.Helper()
	ns := framework.NewNamespace(t)
	ctl := rolloutScaleObject{ns: ns, name: "control"}
	_, err := c.AppsV1().StatefulSets(ns).Create(t.Context(), rolloutScaleStatefulSet(ctl.name), metav1.CreateOptions{})
	require.NoError(t, err)
	for range 3 {
		require.Eventually(t, func() bool { _, _, ok := pods.steady(ctl.key()); return ok }, framework.Timeout, framework.Tick, "the control's pods are Ready")
		require.NoError(t, c.CoreV1().Pods(ns).DeleteCollection(t.Context(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app=" + ctl.name}))
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if n := pods.doubles(ctl.key()); n > 0 {
				t.Logf("checker control: both pods of %s deleted at once: %d instant(s) with 2 pods down counted", ctl.key(), n)
				return rolloutScaleCtl{ns: ns, doubles: n}
			}
		}
	}
	require.Fail(t, "the checker never counted the control's two pods down at once")
	return rolloutScaleCtl{}
}

// rolloutScalePods follows the bench's pods cluster-wide, per StatefulSet (namespace/app label): which
// pods exist, are Ready and not being deleted, on which revision; when the StatefulSet last became
// steady (every pod Ready on one revision); and, once it was first steady, the instants with one pod
// down (a replacement) and with more than one down at once.
type rolloutScalePods struct {
	mu     sync.Mutex
	groups map[string]*rolloutScaleGroup
}

type rolloutScaleGroup struct {
	pods      map[string]rolloutScalePod
	armed     bool // every pod was Ready once: from then on a missing pod is one being replaced
	down      int
	singles   int // instants entering one or more pods down
	double    int // instants entering more than one pod down
	steadyRev string
	steadyAt  time.Time
}

type rolloutScalePod struct {
	uid   types.UID
	ready bool // Ready and not being deleted
	rev   string
}

func watchRolloutScalePods(t *testing.T) *rolloutScalePods {
	t.Helper()
	m := &rolloutScalePods{groups: map[string]*rolloutScaleGroup{}}
	framework.WatchPods(t, "", rolloutScaleLabel+"=true", func(typ watch.EventType, pod *corev1.Pod) { m.observe(typ, pod, time.Now()) })
	return m
}

func (m *rolloutScalePods) observe(typ watch.EventType, pod *corev1.Pod, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := pod.Namespace + "/" + pod.Labels["app"]
	g := m.groups[key]
	if g == nil {
		g = &rolloutScaleGroup{pods: map[string]rolloutScalePod{}}
		m.groups[key] = g
	}
	if typ == watch.Deleted {
		if g.pods[pod.Name].uid == pod.UID {
			delete(g.pods, pod.Name)
		}
	} else {
		g.pods[pod.Name] = rolloutScalePod{uid: pod.UID, ready: pod.DeletionTimestamp == nil && opsutil.PodReady(pod),
			rev: pod.Labels[appsv1.ControllerRevisionHashLabelKey]}
	}
	available, rev, oneRev := 0, "", true
	for _, p := range g.pods {
		if p.ready {
			available++
		}
		if rev != "" && p.rev != rev {
			oneRev = false
		}
		rev = p.rev
	}
	if available == rolloutScaleReplicas && len(g.pods) == rolloutScaleReplicas && oneRev {
		if g.steadyRev != rev {
			g.steadyRev, g.steadyAt = rev, now
		}
	} else {
		g.steadyRev = ""
	}
	if !g.armed {
		g.armed = available == rolloutScaleReplicas
		return
	}
	down := rolloutScaleReplicas - available
	if down >= 1 && g.down == 0 {
		g.singles++
	}
	if down > 1 && g.down <= 1 {
		g.double++
	}
	g.down = down
}

// steady returns the revision every pod of the StatefulSet runs, Ready, and when that was first seen.
func (m *rolloutScalePods) steady(key string) (string, time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.groups[key]
	if g == nil || g.steadyRev == "" {
		return "", time.Time{}, false
	}
	return g.steadyRev, g.steadyAt, true
}

// replacements counts the instants the StatefulSet entered a state with a pod down.
func (m *rolloutScalePods) replacements(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g := m.groups[key]; g != nil {
		return g.singles
	}
	return 0
}

// doubles counts the instants the StatefulSet entered a state with more than one pod down.
func (m *rolloutScalePods) doubles(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g := m.groups[key]; g != nil {
		return g.double
	}
	return 0
}

// violations sums, over the StatefulSets outside the control's namespace, the instants with more
// than one pod down and those with a pod down.
func (m *rolloutScalePods) violations(controlNS string) (doubles, singles int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, g := range m.groups {
		if strings.HasPrefix(key, controlNS+"/") {
			continue
		}
		doubles += g.double
		singles += g.singles
	}
	return doubles, singles
}

// rolloutScalePRs follows the bench's PhasedRollouts cluster-wide: per PhasedRollout, the revision it
// last reported done (phase Updated, Ready and Updated True, at its generation) and when it was first
// seen so; nothing while it is not done.
type rolloutScalePRs struct {
	mu   sync.Mutex
	revs map[string]string
	at   map[string]time.Time
}

func watchRolloutScalePRs(t *testing.T, c client.WithWatch) *rolloutScalePRs {
	t.Helper()
	m := &rolloutScalePRs{revs: map[string]string{}, at: map[string]time.Time{}}
	var list rolloutv1alpha1.PhasedRolloutList
	require.NoError(t, c.List(t.Context(), &list, client.MatchingLabels{rolloutScaleLabel: "true"}))
	now := time.Now()
	for i := range list.Items {
		m.observe(watch.Added, &list.Items[i], now)
	}
	w, err := watchtools.NewRetryWatcherWithContext(t.Context(), list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			options.LabelSelector = rolloutScaleLabel + "=true"
			return c.Watch(ctx, &rolloutv1alpha1.PhasedRolloutList{}, &client.ListOptions{Raw: &options})
		},
	})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			if pr, ok := ev.Object.(*rolloutv1alpha1.PhasedRollout); ok {
				m.observe(ev.Type, pr, time.Now())
			}
		}
	}()
	return m
}

func (m *rolloutScalePRs) observe(typ watch.EventType, pr *rolloutv1alpha1.PhasedRollout, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := pr.Namespace + "/" + pr.Name
	st := pr.Status
	done := typ != watch.Deleted && st.Phase == rolloutv1alpha1.PhaseUpdated && st.ObservedGeneration == pr.Generation &&
		st.UpdateRevision != "" && apimeta.IsStatusConditionTrue(st.Conditions, rolloutv1alpha1.ConditionReady) &&
		apimeta.IsStatusConditionTrue(st.Conditions, rolloutv1alpha1.ConditionUpdated)
	if !done {
		delete(m.revs, key)
		return
	}
	if m.revs[key] != st.UpdateRevision {
		m.revs[key], m.at[key] = st.UpdateRevision, now
	}
}

// done returns the revision the PhasedRollout reports done and when that was first seen.
func (m *rolloutScalePRs) done(key string) (string, time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rev, ok := m.revs[key]
	return rev, m.at[key], ok
}

// rolloutScaleWork is what the operator's metrics say of its phasedrollout controller's work: reconciles
// run, seconds spent in them, seconds items waited in its work queue (and how many waited), and the API
// requests of its client (err: the scrape failed).
type rolloutScaleWork struct {
	reconciles, busy, queued, queuedN, requests float64
	err                                         error
}

func rolloutScaleScrape(ctx context.Context, op *framework.ResOperator, token string) rolloutScaleWork {
	text, err := framework.ResScrapeOperator(ctx, op, token)
	if err != nil {
		return rolloutScaleWork{err: err}
	}
	mine := map[string]string{"controller": "phasedrollout"}
	return rolloutScaleWork{
		reconciles: framework.ResMetricSum(text, "controller_runtime_reconcile_total", mine),
		busy:       framework.ResMetricSum(text, "controller_runtime_reconcile_time_seconds_sum", mine),
		queued:     framework.ResMetricSum(text, "workqueue_queue_duration_seconds_sum", mine),
		queuedN:    framework.ResMetricSum(text, "workqueue_queue_duration_seconds_count", mine),
		requests:   framework.ResMetricSum(text, "rest_client_requests_total", nil),
	}
}

// logRolloutScaleWork logs where the operator's time went during n simultaneous rollouts.
func logRolloutScaleWork(t *testing.T, n int, before, after rolloutScaleWork, wall time.Duration) {
	t.Helper()
	if before.err != nil || after.err != nil {
		t.Logf("operator metrics unavailable: %v %v", before.err, after.err)
		return
	}
	reconciles, busy := after.reconciles-before.reconciles, after.busy-before.busy
	waits := max(after.queuedN-before.queuedN, 1)
	t.Logf("%d rollouts at once: rollout-operator ran %.0f reconciles (%.1f per rollout) in %s, its %d workers busy %.1f s (%.0f%% of them, %.1f ms per reconcile); "+
		"an item waited %.0f ms on average in its queue; %.0f API requests (%.1f per reconcile)",
		n, reconciles, reconciles/float64(n), wall.Round(100*time.Millisecond), opsutil.Workers, busy,
		100*busy/wall.Seconds()/opsutil.Workers, 1000*busy/max(reconciles, 1),
		1000*(after.queued-before.queued)/waits, after.requests-before.requests, (after.requests-before.requests)/max(reconciles, 1))
}
