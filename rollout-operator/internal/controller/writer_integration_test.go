//go:build integration

package controller

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// The rollout-aware writer (writer.go), with the lease-operator's part played by the test: the
// StatefulSetLock CRD is installed (or removed) by the test itself, as the suite installs only the
// PhasedRollout CRD, and a fake lease-operator moves the lock's writer when the switchover annotation
// asks for it.

var leaseCRDs = envtest.CRDInstallOptions{Paths: []string{filepath.Join("..", "..", "..", "lease-operator", "config", "crd", "bases")}, ErrorIfPathMissing: true}

// installLeaseCRD installs the StatefulSetLock CRD (it stays for the later tests: no lock exists in
// their namespaces).
func installLeaseCRD(t *testing.T) {
	t.Helper()
	opts := leaseCRDs
	_, err := envtest.InstallCRDs(suite.Config, opts)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return suite.Client.List(t.Context(), &leasev1.StatefulSetLockList{}, client.InNamespace("default")) == nil
	}, wait, tick, "the StatefulSetLock kind is served")
}

// uninstallLeaseCRD removes the StatefulSetLock CRD, as on a cluster without the lease-operator.
func uninstallLeaseCRD(t *testing.T) {
	t.Helper()
	opts := leaseCRDs
	require.NoError(t, envtest.UninstallCRDs(suite.Config, opts))
	require.Eventually(t, func() bool {
		err := suite.Client.List(t.Context(), &leasev1.StatefulSetLockList{}, client.InNamespace("default"))
		return meta.IsNoMatchError(err) || apierrors.IsNotFound(err)
	}, wait, tick, "the StatefulSetLock kind is gone")
}

// createLock creates the StatefulSetLock "lock" for StatefulSet sts with writer as its writer pod.
func (f *fixture) createLock(name, sts, writer string) {
	f.t.Helper()
	lock := &leasev1.StatefulSetLock{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec:       leasev1.StatefulSetLockSpec{StatefulSetName: sts, LeaseName: name + "-lease", LeaseDurationSeconds: 30},
	}
	require.NoError(f.t, suite.Client.Create(f.t.Context(), lock))
	lock.Status.WriterPod = writer
	require.NoError(f.t, suite.Client.Status().Update(f.t.Context(), lock))
}

func (f *fixture) lock(name string) *leasev1.StatefulSetLock {
	f.t.Helper()
	lock := &leasev1.StatefulSetLock{}
	require.NoError(f.t, suite.Client.Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, lock))
	return lock
}

// writerSim plays the StatefulSet controller (every pod at or above the partition on another revision
// is rolled: not Ready, relabelled, Ready readyAfter later) and, unless leaseDown, the lease-operator
// of the lock "lock" (a switchover annotation that names a Ready pod moves status.writerPod there and
// is removed, actAfter after it was first seen, so that an operator that does not wait for the move is
// caught). It records each pod rolled, in order, and each roll of the lock's current writer.
type writerSim struct {
	mu         sync.Mutex
	log        *partitionLog
	rolled     []string
	violations []string
	moves      []string // "from->to", in order
}

func (s *writerSim) get() (rolled, violations, moves []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.rolled), slices.Clone(s.violations), slices.Clone(s.moves)
}

func (f *fixture) simulateWriter(readyAfter, actAfter time.Duration, leaseDown bool) *writerSim {
	sim := &writerSim{log: f.watchPartitions()}
	ctx := f.t.Context()
	rolledAt := map[string]time.Time{}
	var askedAt time.Time
	go func() {
		for ctx.Err() == nil {
			time.Sleep(tick)
			lock := &leasev1.StatefulSetLock{}
			if err := suite.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "lock"}, lock); err != nil {
				continue
			}
			if to := lock.Annotations[leasev1.SwitchoverAnnotation]; to != "" && !leaseDown {
				if askedAt.IsZero() {
					askedAt = time.Now()
				}
				pod := &corev1.Pod{}
				if time.Since(askedAt) >= actAfter && suite.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: to}, pod) == nil && podReady(pod) {
					from := lock.Status.WriterPod
					lock.Status.WriterPod = to
					if suite.Client.Status().Update(ctx, lock) == nil {
						delete(lock.Annotations, leasev1.SwitchoverAnnotation)
						_ = suite.Client.Update(ctx, lock)
						askedAt = time.Time{}
						sim.mu.Lock()
						sim.moves = append(sim.moves, from+"->"+to)
						sim.mu.Unlock()
					}
					continue
				}
			}
			// The StatefulSet read after the lock: a partition the operator lowered after the writer
			// moved is always seen with the writer moved.
			sts, p, ok := readStatefulSet(ctx, f.ns)
			if !ok {
				continue
			}
			all := true
			for i := range f.n {
				name := fmt.Sprintf("web-%d", f.start+i)
				want := sts.Status.CurrentRevision
				if i >= p {
					want = sts.Status.UpdateRevision
				}
				pod := &corev1.Pod{}
				if err := suite.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, pod); err != nil {
					all = false
					continue
				}
				rev, ready := pod.Labels[appsv1.ControllerRevisionHashLabelKey], podReady(pod)
				if rev != want {
					// Rolling the pod deletes it: it must not be the writer any more.
					sim.mu.Lock()
					sim.rolled = append(sim.rolled, name)
					if lock.Status.WriterPod == name {
						sim.violations = append(sim.violations, fmt.Sprintf("%s rolled at partition %d while the lock's writer", name, p))
					}
					sim.mu.Unlock()
					setPodReady(ctx, pod, false)
					orig := pod.DeepCopy()
					pod.Labels[appsv1.ControllerRevisionHashLabelKey] = want
					_ = suite.Client.Patch(ctx, pod, client.MergeFrom(orig))
					rolledAt[name], rev, ready = time.Now(), want, false
				}
				if !ready && time.Since(rolledAt[name]) >= readyAfter {
					setPodReady(ctx, pod, true)
				}
				if rev != sts.Status.UpdateRevision {
					all = false
				}
			}
			syncStatefulSetStatus(ctx, sts, all)
		}
	}()
	f.t.Cleanup(func() {
		if f.t.Failed() {
			values, _ := sim.log.get()
			rolled, violations, moves := sim.get()
			pr := &rolloutv1alpha1.PhasedRollout{}
			_ = suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "pr"}, pr)
			f.t.Logf("partitions %v; rolled %v; violations %v; moves %v; status %+v; step %+v; events %v",
				values, rolled, violations, moves, pr.Status, pr.Status.RollingPodStatus, f.eventReasons("pr"))
		}
	})
	return sim
}

// writerTimeout is the operator's switchover timeout in TestWriterGate: longer than the fake
// lease-operator's slowest move (3 s), short enough for the timeout case to end soon.
const writerTimeout = 6 * time.Second

// startWriterOperator runs the controller with checker and the given switchover timeout.
func startWriterOperator(t *testing.T, checker Checker, timeout time.Duration) {
	t.Helper()
	opts := &Options{Checker: checker, SwitchoverTimeout: timeout}
	suite.StartManager(t, opts.Setup, func(o *ctrl.Options) { CacheOptions(&o.Cache) })
}

// startWriterRollout creates a 3-replica (or replicas) StatefulSet "web" guarded by the lock "lock"
// whose writer is writer, the fake StatefulSet controller and lease-operator (actAfter, leaseDown),
// and a PhasedRollout with mods; it starts the rollout to web-r2.
func startWriterRollout(t *testing.T, replicas int32, writer string, actAfter time.Duration, leaseDown bool, mods ...func(*rolloutv1alpha1.PhasedRollout)) (*fixture, *writerSim) {
	t.Helper()
	f := newFixture(t, replicas, 0)
	f.createLock("lock", "web", writer)
	sim := f.simulateWriter(100*time.Millisecond, actAfter, leaseDown)
	f.createRollout(append([]func(*rolloutv1alpha1.PhasedRollout){func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Check.SuccessThreshold = 1 }}, mods...)...)
	f.waitPartition(replicas)
	f.newRevision("web-r2")
	return f, sim
}

// TestWriterGate (SL-B4, PR-B3), one operator for parallel cases, each in its own namespace, with the
// lease-operator played by the test (writerSim):
//   - a 3-replica StatefulSet guarded by a StatefulSetLock rolls with the writer's pod last and only
//     after the lock moved the writer off it (a planned switchover to a pod already on the update
//     revision): no pod is rolled while it is the lock's writer, so the partition never goes below
//     the writer's index before status.writerPod moved. With the writer on pod 0, on pod 1 (it moves
//     to pod 2, already updated), and in a batch whose range holds it (the pods above it are released
//     first);
//   - while the lock has not moved its writer, the partition stays above the writer's pod, the step
//     says why (WaitForSwitchover, status.switchover) and no further check runs;
//   - a lock whose writer does not move (no lease-operator acting) holds the step for the switchover
//     timeout from the request, then the pod is rolled anyway (a failover), with a Warning Event, and
//     the switchover annotation is taken back;
//   - a writer with no other pod to take over is rolled at once, with a Warning Event;
//   - a lock on another StatefulSet changes nothing.
func TestWriterGate(t *testing.T) {
	installLeaseCRD(t)
	checker := newFakeChecker(VerdictPass)
	startWriterOperator(t, checker, writerTimeout)
	for _, tc := range []struct {
		name   string
		writer string
		steps  []rolloutv1alpha1.RolloutStep
		moves  []string
	}{
		{name: "writer on pod 0", writer: "web-0", moves: []string{"web-0->web-1"}},
		{name: "writer on pod 1", writer: "web-1", moves: []string{"web-1->web-2"}},
		{name: "batch holding the writer", writer: "web-1", steps: []rolloutv1alpha1.RolloutStep{{Pods: 3}}, moves: []string{"web-1->web-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, sim := startWriterRollout(t, 3, tc.writer, 300*time.Millisecond, false, func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Steps = tc.steps })
			pr := f.waitRolledTo("web-r2")
			rolled, violations, moves := sim.get()
			assert.Empty(t, violations, "a pod rolled while it was the lock's writer")
			assert.Equal(t, []string{"web-2", "web-1", "web-0"}, rolled)
			assert.Equal(t, tc.moves, moves, "one planned switchover, to a pod on the update revision")
			assert.Equal(t, tc.moves[0][len(tc.writer)+2:], f.lock("lock").Status.WriterPod)
			assert.NotContains(t, f.lock("lock").Annotations, leasev1.SwitchoverAnnotation)
			assert.Nil(t, pr.Status.Switchover, "no switchover waits once the rollout is done")
			assert.Empty(t, pr.Status.LastError)
			f.waitEventReason("pr", rolloutv1alpha1.EventSwitchoverRequested)
			f.waitEventReason("pr", string(rolloutv1alpha1.StepWaitForSwitchover))
			assert.NotContains(t, f.eventReasons("pr"), rolloutv1alpha1.EventSwitchoverTimedOut)
		})
	}
	t.Run("the partition waits for the writer", func(t *testing.T) {
		t.Parallel()
		// The lease-operator acts 3 s after the request; the checks name the namespace.
		f, sim := startWriterRollout(t, 3, "web-0", 3*time.Second, false, withNamespacedQuery)
		checks := func() int {
			n := 0
			for _, q := range checker.recorded() {
				if strings.Contains(q.Expr, f.ns) {
					n++
				}
			}
			return n
		}
		var pr *rolloutv1alpha1.PhasedRollout
		require.Eventually(t, func() bool {
			pr = f.rollout()
			return pr.Status.RollingPodStatus != nil && pr.Status.RollingPodStatus.Status == rolloutv1alpha1.StepWaitForSwitchover
		}, wait, tick, "the step waits for the switchover")
		assert.Equal(t, int32(1), f.partition())
		require.NotNil(t, pr.Status.Switchover)
		assert.Equal(t, rolloutv1alpha1.SwitchoverStatus{Lock: "lock", From: "web-0", To: "web-1", Partition: 1,
			Since: pr.Status.Switchover.Since, RequestedAt: pr.Status.Switchover.RequestedAt}, *pr.Status.Switchover)
		assert.Contains(t, pr.Status.Message, "waiting for StatefulSetLock lock to move its writer from pod web-0 to pod web-1")
		assert.Equal(t, "web-1", f.lock("lock").Annotations[leasev1.SwitchoverAnnotation])
		before := checks()
		time.Sleep(1500 * time.Millisecond)
		assert.Equal(t, int32(1), f.partition(), "the partition waits for the writer")
		assert.Equal(t, before, checks(), "no check runs while the step waits for the switchover")
		f.waitRolledTo("web-r2")
		_, violations, moves := sim.get()
		assert.Empty(t, violations)
		assert.Equal(t, []string{"web-0->web-1"}, moves)
	})
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		f, sim := startWriterRollout(t, 3, "web-0", 0, true)
		var requested time.Time
		require.Eventually(t, func() bool {
			sw := f.rollout().Status.Switchover
			if sw != nil && sw.RequestedAt != nil {
				requested = sw.RequestedAt.Time
				return true
			}
			return false
		}, wait, tick, "the switchover is requested")
		f.waitRolledTo("web-r2")
		values, at := sim.log.get()
		i := slices.Index(values, 0)
		require.GreaterOrEqual(t, i, 0, "partitions %v", values)
		assert.GreaterOrEqual(t, at[i].Sub(requested), writerTimeout, "the partition moved over the writer before the timeout")
		f.waitEventReason("pr", rolloutv1alpha1.EventSwitchoverTimedOut)
		assert.NotContains(t, f.lock("lock").Annotations, leasev1.SwitchoverAnnotation, "the request is taken back")
		rolled, violations, _ := sim.get()
		assert.Equal(t, []string{"web-2", "web-1", "web-0"}, rolled)
		assert.Equal(t, []string{"web-0 rolled at partition 0 while the lock's writer"}, violations, "the documented fallback: a failover")
	})
	t.Run("single replica", func(t *testing.T) {
		t.Parallel()
		f, _ := startWriterRollout(t, 1, "web-0", 0, false)
		f.waitRolledTo("web-r2")
		f.waitEventReason("pr", rolloutv1alpha1.EventNoSwitchoverTarget)
		assert.NotContains(t, f.lock("lock").Annotations, leasev1.SwitchoverAnnotation)
	})
	t.Run("lock on another StatefulSet", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, 3, 0)
		f.createLock("lock", "other", "web-0")
		assertPlainRollout(t, f)
	})
}

// assertPlainRollout runs a rollout of f's StatefulSet to web-r2 and asserts it is exactly as
// without a lock: 3, 2, 1, 0, no switchover, no error at any time.
func assertPlainRollout(t *testing.T, f *fixture) {
	t.Helper()
	log := f.simulateStatefulSetController()
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Check.SuccessThreshold = 1 })
	f.waitPartition(3)
	f.newRevision("web-r2")
	var errs []string
	require.Eventually(t, func() bool {
		pr := f.rollout()
		if pr.Status.LastError != "" {
			errs = append(errs, pr.Status.LastError)
		}
		return pr.Status.Phase == rolloutv1alpha1.PhaseUpdated && pr.Status.UpdateRevision == "web-r2"
	}, wait, tick)
	assert.Empty(t, errs)
	// The simulator records the partition when it next polls.
	require.Eventually(t, func() bool { v, _ := log.get(); return len(v) > 1 && v[len(v)-1] == 3 }, wait, tick)
	values, _ := log.get()
	assert.Equal(t, []int32{3, 2, 1, 0, 3}, values)
	reasons := f.eventReasons("pr")
	for _, r := range []string{rolloutv1alpha1.EventSwitchoverRequested, string(rolloutv1alpha1.StepWaitForSwitchover), rolloutv1alpha1.EventNoSwitchoverTarget} {
		assert.NotContains(t, reasons, r)
	}
	assert.Nil(t, f.rollout().Status.Switchover)
}

// TestRolloutWithoutTheLockKind: without the StatefulSetLock CRD (the lease-operator not installed),
// a rollout is exactly as without the feature, with no error at any time.
func TestRolloutWithoutTheLockKind(t *testing.T) {
	uninstallLeaseCRD(t)
	startWriterOperator(t, newFakeChecker(VerdictPass), time.Minute)
	assertPlainRollout(t, newFixture(t, 3, 0))
}

// TestShippedOperatorMovesTheWriter runs the writer gate as the manifest's ServiceAccount, with its
// RBAC (statefulsetlocks list and patch) and admission policies: the rollout moves the writer off
// pod 0 before rolling it. The lock-writes policy admits the operator's own lock writes (the
// switchover annotation set, and removed with a JSON patch) and refuses every other change of a lock
// (its spec, another annotation, a label, a switchover to a pod of another StatefulSet, a lock in
// kube-system); the same spec change by another user is admitted.
func TestShippedOperatorMovesTheWriter(t *testing.T) {
	installLeaseCRD(t)
	cfg := asShippedOperator(t)
	op, err := client.New(cfg, client.Options{Scheme: suite.Scheme})
	require.NoError(t, err)
	f := newFixture(t, 3, 0)
	f.createLock("lock", "web", "web-0")
	system := &leasev1.StatefulSetLock{
		ObjectMeta: metav1.ObjectMeta{Name: "policy-probe-" + f.ns, Namespace: "kube-system"},
		Spec:       leasev1.StatefulSetLockSpec{StatefulSetName: "web", LeaseName: "policy-probe-" + f.ns, LeaseDurationSeconds: 30},
	}
	require.NoError(t, suite.Client.Create(t.Context(), system))
	t.Cleanup(func() { _ = suite.Client.Delete(context.Background(), system) })
	patch := func(c client.Client, lock *leasev1.StatefulSetLock, typ types.PatchType, body string, opts ...client.PatchOption) error {
		obj := &leasev1.StatefulSetLock{ObjectMeta: metav1.ObjectMeta{Namespace: lock.Namespace, Name: lock.Name}}
		return c.Patch(t.Context(), obj, client.RawPatch(typ, []byte(body)), opts...)
	}
	lock := f.lock("lock")
	require.Eventually(t, func() bool {
		err := patch(op, lock, types.MergePatchType, `{"spec":{"failoverDelaySeconds":5}}`, client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "lock-writes")
	}, testsupport.PolicyWait+10*time.Second, 100*time.Millisecond, "the lock-writes policy never took effect")

	set := fmt.Sprintf(`{"metadata":{"annotations":{%q:"web-1"}}}`, leasev1.SwitchoverAnnotation)
	require.NoError(t, patch(op, lock, types.MergePatchType, set), "the switchover annotation")
	remove := `[{"op":"test","path":"/metadata/annotations/app.anukkrit.me~1switchover-to","value":"web-1"},{"op":"remove","path":"/metadata/annotations/app.anukkrit.me~1switchover-to"}]`
	require.NoError(t, patch(op, lock, types.JSONPatchType, remove), "taking the switchover annotation back")
	for _, refused := range []struct{ what, body string }{
		{"the spec", `{"spec":{"failoverDelaySeconds":5}}`},
		{"another annotation", `{"metadata":{"annotations":{"example.com/x":"y"}}}`},
		{"a label", `{"metadata":{"labels":{"x":"y"}}}`},
		{"a switchover to a pod of another StatefulSet", fmt.Sprintf(`{"metadata":{"annotations":{%q:"other-1"}}}`, leasev1.SwitchoverAnnotation)},
		{"a switchover to a name that is not a pod's", fmt.Sprintf(`{"metadata":{"annotations":{%q:"web-x"}}}`, leasev1.SwitchoverAnnotation)},
	} {
		err := patch(op, lock, types.MergePatchType, refused.body, client.DryRunAll)
		if assert.Error(t, err, "%s is admitted", refused.what) {
			assert.Contains(t, err.Error(), "lock-writes", refused.what)
		}
	}
	err = patch(op, system, types.MergePatchType, set, client.DryRunAll)
	if assert.Error(t, err, "a lock in kube-system is written") {
		assert.Contains(t, err.Error(), "lock-writes")
	}
	require.NoError(t, patch(suite.Client, lock, types.MergePatchType, `{"spec":{"failoverDelaySeconds":5}}`, client.DryRunAll), "another user's write")

	startOperatorWith(t, cfg, newFakeChecker(VerdictPass))
	sim := f.simulateWriter(100*time.Millisecond, 300*time.Millisecond, false)
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Check.SuccessThreshold = 1 })
	f.waitPartition(3)
	f.newRevision("web-r2")
	pr := f.waitRolledTo("web-r2")
	rolled, violations, moves := sim.get()
	assert.Empty(t, violations)
	assert.Equal(t, []string{"web-2", "web-1", "web-0"}, rolled)
	assert.Equal(t, []string{"web-0->web-1"}, moves)
	assert.Empty(t, pr.Status.LastError)
}
