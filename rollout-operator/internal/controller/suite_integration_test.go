//go:build integration

package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// The integration tests run the controller in a manager against envtest's kube-apiserver and etcd.
// Nothing runs StatefulSets there: the tests play the StatefulSet controller themselves (revision
// labels and Ready conditions of the pods, status revisions) and decide each check's verdict.

// suite is the envtest API server and its client.
var suite testsupport.Suite

const (
	wait = 30 * time.Second
	tick = 20 * time.Millisecond
)

func TestMain(m *testing.M) {
	os.Exit(testsupport.RunSuite(m, &suite, filepath.Join("..", "..", "config", "crd", "bases"), rolloutv1alpha1.AddToScheme, leasev1.AddToScheme))
}

// fakeChecker returns the verdict the test sets and records every query it was asked.
type fakeChecker struct {
	mu      sync.Mutex
	verdict Verdict
	queries []Query
	times   []time.Time
}

func newFakeChecker(v Verdict) *fakeChecker { return &fakeChecker{verdict: v} }

func (c *fakeChecker) Check(_ context.Context, q Query) CheckResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queries = append(c.queries, q)
	c.times = append(c.times, time.Now())
	return CheckResult{Verdict: c.verdict, Message: "fake " + c.verdict.String()}
}

func (c *fakeChecker) set(v Verdict) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.verdict = v
}

func (c *fakeChecker) recorded() []Query {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Query(nil), c.queries...)
}

// startOperator runs the controller with checker until the test ends or stop is called.
func startOperator(t *testing.T, checker Checker) (stop func()) {
	t.Helper()
	return startOperatorWith(t, suite.Config, checker)
}

// startOperatorWith runs the controller against the API server as the user of c (e.g. impersonating
// the manifest's ServiceAccount).
func startOperatorWith(t *testing.T, c *rest.Config, checker Checker) (stop func()) {
	t.Helper()
	return suite.StartManagerAs(t, c, (&Options{Checker: checker}).Setup, func(o *ctrl.Options) { CacheOptions(&o.Cache) }) // as main.go does
}

// fixture is a namespace with a StatefulSet "web" whose pods the test creates.
type fixture struct {
	t     *testing.T
	ns    string
	start int32
	n     int32
}

func newFixture(t *testing.T, replicas, start int32) *fixture {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rollout-"}}
	require.NoError(t, suite.Client.Create(t.Context(), ns))
	f := &fixture{t: t, ns: ns.Name, start: start, n: replicas}
	// The PhasedRollout "pr" goes when the test ends, after every other cleanup (the failure reports
	// read it): the operators of later tests reconcile every namespace, and a rollout left mid-step
	// would have them run its checks through their checkers (a scripted checker's answers spent on
	// another test's rollout). envtest has no namespace controller to do it.
	t.Cleanup(func() {
		pr := &rolloutv1alpha1.PhasedRollout{ObjectMeta: metav1.ObjectMeta{Name: "pr", Namespace: f.ns}}
		_ = client.IgnoreNotFound(suite.Client.Delete(context.Background(), pr))
	})
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: f.ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
			},
		},
	}
	if start != 0 {
		sts.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: start}
	}
	require.NoError(t, suite.Client.Create(t.Context(), sts))
	f.setRevisions("web-r1", "web-r1")
	for i := range replicas {
		f.createPod(start+i, "web-r1")
	}
	return f
}

func (f *fixture) sts() *appsv1.StatefulSet {
	f.t.Helper()
	sts := &appsv1.StatefulSet{}
	require.NoError(f.t, suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "web"}, sts))
	return sts
}

// partition returns the StatefulSet's partition, -1 when unset.
func (f *fixture) partition() int32 {
	sts := f.sts()
	if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		return *ru.Partition
	}
	return -1
}

// setRevisions plays the StatefulSet controller's status write.
func (f *fixture) setRevisions(current, update string) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sts := f.sts()
		sts.Status.ObservedGeneration = sts.Generation
		sts.Status.Replicas = *sts.Spec.Replicas
		sts.Status.CurrentRevision = current
		sts.Status.UpdateRevision = update
		return suite.Client.Status().Update(context.Background(), sts)
	}))
}

func (f *fixture) createPod(ordinal int32, revision string) {
	f.t.Helper()
	sts := f.sts()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("web-%d", ordinal), Namespace: f.ns,
			Labels:          map[string]string{"app": "web", appsv1.ControllerRevisionHashLabelKey: revision},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	require.NoError(f.t, suite.Client.Create(context.Background(), pod))
	f.setReady(pod.Name, true)
}

func (f *fixture) setReady(name string, ready bool) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod := &corev1.Pod{}
		if err := suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, pod); err != nil {
			return err
		}
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
		return suite.Client.Status().Update(context.Background(), pod)
	}))
}

// setPodRevision relabels a pod, as the StatefulSet controller's recreate would.
func (f *fixture) setPodRevision(name, revision string) {
	f.t.Helper()
	pod := &corev1.Pod{}
	require.NoError(f.t, suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, pod))
	orig := pod.DeepCopy()
	pod.Labels[appsv1.ControllerRevisionHashLabelKey] = revision
	require.NoError(f.t, suite.Client.Patch(context.Background(), pod, client.MergeFrom(orig)))
}

// simulateStatefulSetController rolls pods at or above the partition to the update revision (and
// marks every pod on it current) until the test ends; its log (watchPartitions) holds every partition value.
func (f *fixture) simulateStatefulSetController() *partitionLog {
	log := f.watchPartitions()
	ctx := f.t.Context()
	go func() {
		for ctx.Err() == nil {
			time.Sleep(tick)
			sts, p, ok := readStatefulSet(ctx, f.ns)
			if !ok {
				continue
			}
			all := true
			for i := range f.n {
				name := fmt.Sprintf("web-%d", f.start+i)
				pod := &corev1.Pod{}
				if err := suite.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, pod); err != nil {
					all = false
					continue
				}
				want := sts.Status.CurrentRevision
				if i >= p {
					want = sts.Status.UpdateRevision
				}
				if pod.Labels[appsv1.ControllerRevisionHashLabelKey] != want {
					orig := pod.DeepCopy()
					pod.Labels[appsv1.ControllerRevisionHashLabelKey] = want
					_ = suite.Client.Patch(ctx, pod, client.MergeFrom(orig))
				}
				if want != sts.Status.UpdateRevision {
					all = false
				}
			}
			syncStatefulSetStatus(ctx, sts, all)
		}
	}()
	return log
}

// partitionLog is every partition value the API server stored for the StatefulSet "web" while the
// operator managed it, in order, with the time the watch delivered it. A watch, not the simulators'
// polls: a poll every tick missed a value the operator kept for less than a tick (the idle partition
// of a rollout whose first move needs no check, under a loaded CI machine).
type partitionLog struct {
	mu     sync.Mutex
	values []int32
	at     []time.Time
}

// watchPartitions starts the partition log of the fixture's StatefulSet; it stops with the test.
func (f *fixture) watchPartitions() *partitionLog {
	f.t.Helper()
	l := &partitionLog{}
	var list appsv1.StatefulSetList
	require.NoError(f.t, suite.Client.List(f.t.Context(), &list, client.InNamespace(f.ns)))
	last := int32(-1)
	record := func(sts *appsv1.StatefulSet) {
		if _, managed := sts.Annotations[rolloutv1alpha1.ManagedByAnnotation]; sts.Name == "web" && managed && partitionOf(sts) != last {
			last = partitionOf(sts)
			l.add(last)
		}
	}
	for i := range list.Items {
		record(&list.Items[i])
	}
	w, err := watchtools.NewRetryWatcherWithContext(f.t.Context(), list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			return suite.Client.Watch(ctx, &appsv1.StatefulSetList{}, &client.ListOptions{Namespace: f.ns, Raw: &options})
		},
	})
	require.NoError(f.t, err)
	f.t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			if sts, ok := ev.Object.(*appsv1.StatefulSet); ok && ev.Type != watch.Deleted {
				record(sts)
			}
		}
	}()
	return l
}

func (l *partitionLog) add(p int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.values = append(l.values, p)
	l.at = append(l.at, time.Now())
}

func (l *partitionLog) get() ([]int32, []time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int32(nil), l.values...), append([]time.Time(nil), l.at...)
}

// createRollout creates the PhasedRollout "pr" for web with a fast check (newFixture deletes it when the
// test ends).
func (f *fixture) createRollout(mods ...func(*rolloutv1alpha1.PhasedRollout)) *rolloutv1alpha1.PhasedRollout {
	f.t.Helper()
	pr := &rolloutv1alpha1.PhasedRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "pr", Namespace: f.ns},
		Spec: rolloutv1alpha1.PhasedRolloutSpec{
			TargetRef: "web",
			Check: rolloutv1alpha1.Check{
				InitialDelaySeconds: ptr.To[int32](0),
				PeriodSeconds:       1,
				SuccessThreshold:    2,
				Query:               &rolloutv1alpha1.PrometheusQuery{Expr: `errors{pod="{{pod}}"} > 0`, URL: "prom:9090"},
			},
		},
	}
	for _, m := range mods {
		m(pr)
	}
	require.NoError(f.t, suite.Client.Create(context.Background(), pr))
	return pr
}

func (f *fixture) rollout() *rolloutv1alpha1.PhasedRollout {
	f.t.Helper()
	pr := &rolloutv1alpha1.PhasedRollout{}
	require.NoError(f.t, suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "pr"}, pr))
	return pr
}

func (f *fixture) waitPhase(phase rolloutv1alpha1.PhasedRolloutPhase) *rolloutv1alpha1.PhasedRollout {
	f.t.Helper()
	var pr *rolloutv1alpha1.PhasedRollout
	require.Eventually(f.t, func() bool {
		pr = f.rollout()
		return pr.Status.Phase == phase
	}, wait, tick, "phase %s", phase)
	return pr
}

// updateRollout changes the spec of the PhasedRollout "pr" (retrying on conflicts).
func (f *fixture) updateRollout(mod func(*rolloutv1alpha1.PhasedRollout)) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pr := f.rollout()
		mod(pr)
		return suite.Client.Update(context.Background(), pr)
	}))
}

// waitRolledTo waits for phase Updated at revision rev: the rollout to rev finished (idle before it is
// Updated too, at the previous revision).
func (f *fixture) waitRolledTo(rev string) *rolloutv1alpha1.PhasedRollout {
	f.t.Helper()
	var pr *rolloutv1alpha1.PhasedRollout
	require.Eventually(f.t, func() bool {
		pr = f.rollout()
		return pr.Status.Phase == rolloutv1alpha1.PhaseUpdated && pr.Status.UpdateRevision == rev
	}, wait, tick, "phase Updated at revision %s", rev)
	return pr
}

func (f *fixture) waitPartition(p int32) {
	f.t.Helper()
	require.Eventually(f.t, func() bool { return f.partition() == p }, wait, tick, "partition %d", p)
}

// events returns the reasons of the Events about regarding.
func (f *fixture) eventReasons(name string) []string {
	f.t.Helper()
	var list eventsv1.EventList
	require.NoError(f.t, suite.Client.List(context.Background(), &list, client.InNamespace(f.ns)))
	var reasons []string
	for _, e := range list.Items {
		if e.Regarding.Name == name {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

// waitEventReason waits until an Event about name has reason: the recorder writes Events
// asynchronously, so the phase or partition a test waited for can be read before its Event exists.
func (f *fixture) waitEventReason(name, reason string) {
	f.t.Helper()
	assert.Eventually(f.t, func() bool { return slices.Contains(f.eventReasons(name), reason) }, wait, tick,
		"an Event %s about %s", reason, name)
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
