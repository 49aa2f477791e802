//go:build integration

package controller

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// A lock with no Ready pod creates no Lease (as the original operator): the Lease is created with the
// first writer, holding it, at epoch 1.
func TestNoLeaseBeforeTheFirstWriter(t *testing.T) {
	f := newFixture(t)
	f.createPod(0, false)
	startOperator(t, nil)
	f.createLock("lock", 2) // several renewal periods of reconciles while it waits
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, leasev1.ReasonNoReadyPods, condition(f.lock("lock"), leasev1.ConditionAvailable).Reason)
	}, wait, tick)
	testsupport.NeverWithin(t, 3*time.Second, 50*time.Millisecond, func() bool {
		return !apierrors.IsNotFound(suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "lock-lease"}, &coordinationv1.Lease{}))
	}, "a Lease without a holder was created")

	f.setReady("db-0", true)
	f.waitWriter("db-0", "1")
	lease := f.lease("lock-lease")
	assert.Equal(t, "db-0", ptr.Deref(lease.Spec.HolderIdentity, ""))
	assert.EqualValues(t, 1, ptr.Deref(lease.Spec.LeaseTransitions, 0))
}

// The waiting states the first Events test does not cover: a second lock on a managed StatefulSet
// (StatefulSetConflict) and an API error the operator retries (ReconcileError), each a Warning Event
// once per entry, not once per reconcile or retry.
func TestConflictAndErrorStatesHaveEvents(t *testing.T) {
	f := newFixture(t)
	f.createPods(2)
	var failPods atomic.Bool
	startOperator(t, &interceptor.Funcs{
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			if _, _, ok := appliedPod(obj); ok && failPods.Load() {
				return injected()
			}
			return c.Apply(ctx, obj, opts...)
		},
	})
	f.createLock("first", 2)
	f.waitWriter("db-0", "1")
	f.createLock("second", 2)

	events := func(name, reason string) []eventsv1.Event {
		return typed(testsupport.Events(t, suite.Client, f.ns, "StatefulSetLock", name, reason), corev1.EventTypeWarning)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		evs := events("second", leasev1.ReasonStatefulSetConflict)
		if assert.Len(c, evs, 1) {
			assert.Contains(c, evs[0].Note, "StatefulSetLock first already manages StatefulSet db")
		}
	}, wait, tick)

	// Every label patch fails from now on; a failover makes the operator retry it with backoff.
	failPods.Store(true)
	f.setReady("db-0", false)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		evs := events("first", leasev1.ReasonReconcileError)
		if assert.Len(c, evs, 1) {
			assert.Contains(c, evs[0].Note, "injected API error")
		}
	}, wait, tick)
	staysOneEvent(t, f.ns, map[string]string{"first": leasev1.ReasonReconcileError, "second": leasev1.ReasonStatefulSetConflict})
	failPods.Store(false)
	f.waitWriter("db-1", "2")
}

// A switchover whose target cannot take the role yet waits with a working writer: Reconciling=True
// SwitchoverPending, one Normal Event, kstatus InProgress; once the target is Ready the writer moves,
// the annotation goes and the lock reads Current.
func TestSwitchoverPendingIsReportedOnce(t *testing.T) {
	f := newFixture(t)
	f.createPod(0, true)
	f.createPod(1, false)
	startOperator(t, nil)
	f.createLock("lock", 2)
	f.waitWriter("db-0", "1")

	f.switchover("lock", "db-1")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		lock := f.lock("lock")
		rec := condition(lock, leasev1.ConditionReconciling)
		assert.Equal(c, metav1.ConditionTrue, rec.Status)
		assert.Equal(c, leasev1.ReasonSwitchoverPending, rec.Reason)
		assert.Contains(c, rec.Message, "Switchover to pod db-1 waits")
		assert.Equal(c, metav1.ConditionTrue, condition(lock, leasev1.ConditionReady).Status, "the writer still works")
		res, err := status.Compute(unstructuredLock(t, lock))
		require.NoError(c, err)
		assert.Equal(c, status.InProgressStatus, res.Status)
		assert.Len(c, typed(testsupport.Events(t, suite.Client, f.ns, "StatefulSetLock", "lock", leasev1.ReasonSwitchoverPending), corev1.EventTypeNormal), 1)
	}, wait, tick)
	staysOneEvent(t, f.ns, map[string]string{"lock": leasev1.ReasonSwitchoverPending})

	f.setReady("db-1", true)
	f.waitWriter("db-1", "2")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		lock := f.lock("lock")
		assert.Empty(c, lock.Annotations[leasev1.SwitchoverAnnotation])
		assert.Equal(c, metav1.ConditionFalse, condition(lock, leasev1.ConditionReconciling).Status)
		res, err := status.Compute(unstructuredLock(t, lock))
		require.NoError(c, err)
		assert.Equal(c, status.CurrentStatus, res.Status)
	}, wait, tick)
}

// kstatus (sigs.k8s.io/cli-utils/pkg/kstatus/status, the library behind Flux, kpt and kubectl-based
// deploy tools) reads a lock with a writer as Current, one electing (no Ready pod yet, a delayed
// failover) as InProgress and one that needs the user (missing StatefulSet, another lock on the same
// StatefulSet, a foreign Lease) as Failed.
func TestKstatusReadsTheLock(t *testing.T) {
	f := newFixture(t)
	f.createPod(0, false)
	require.NoError(t, suite.Client.Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "app-election", Namespace: f.ns},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("app-instance-7")},
	}))
	other := f.sts.DeepCopy()
	other.ObjectMeta = metav1.ObjectMeta{Name: "other", Namespace: f.ns}
	require.NoError(t, suite.Client.Create(t.Context(), other))
	startOperator(t, nil)
	f.createLock("lock", 10, func(l *leasev1.StatefulSetLock) { l.Spec.FailoverDelaySeconds = 30 })
	f.createLock("orphan", 10, func(l *leasev1.StatefulSetLock) { l.Spec.StatefulSetName = "missing" })
	f.createLock("foreign", 10, func(l *leasev1.StatefulSetLock) {
		l.Spec.StatefulSetName, l.Spec.LeaseName = "other", "app-election"
	})
	f.createLock("second", 10) // created after "lock" (or in the same second, named after it): StatefulSetConflict

	compute := func(c *assert.CollectT, name string) status.Status {
		res, err := status.Compute(unstructuredLock(t, f.lock(name)))
		require.NoError(c, err)
		return res.Status
	}
	expect := func(name string, want status.Status) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, want, compute(c, name)) }, wait, tick, "lock %s", name)
	}
	expect("lock", status.InProgressStatus) // electing: no Ready pod
	expect("orphan", status.FailedStatus)
	expect("foreign", status.FailedStatus)
	expect("second", status.FailedStatus)

	f.setReady("db-0", true)
	f.waitWriter("db-0", "1")
	expect("lock", status.CurrentStatus)
	lock := f.lock("lock")
	for _, c := range lock.Status.Conditions {
		assert.Equal(t, lock.Generation, c.ObservedGeneration, "condition %s", c.Type)
	}
	assert.Equal(t, lock.Generation, lock.Status.ObservedGeneration)

	f.createPod(1, true)
	f.setReady("db-0", false) // the writer waits out failoverDelaySeconds: a failover in progress
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, leasev1.ReasonFailoverDelayed, condition(f.lock("lock"), leasev1.ConditionReconciling).Reason)
		assert.Equal(c, status.InProgressStatus, compute(c, "lock"))
		// A waiting state: one Normal Event (kubectl describe says why the writer has not moved).
		assert.Len(c, typed(testsupport.Events(t, suite.Client, f.ns, "StatefulSetLock", "lock", leasev1.ReasonFailoverDelayed), corev1.EventTypeNormal), 1)
	}, wait, tick)
	staysOneEvent(t, f.ns, map[string]string{"lock": leasev1.ReasonFailoverDelayed})
}

// Deleting a lock completes at once, with or without the operator: it has no finalizer. Deleted while
// no operator runs (as `kubectl delete -f deploy/lease-operator.yaml` removes the operator first), the
// pods keep their role labels and the writer its epoch (one consistent state, never half cleaned), and
// the Lease is left to the garbage collector through its controller ownerReference (envtest runs no
// garbage collector, so the test asserts the reference the collector follows). A lock of the same name
// created again before the operator starts (a re-install applying everything at once) keeps the
// labelled writer and goes on from its epoch.
func TestDeletionWithoutTheOperatorKeepsTheLabelsAndLeavesTheLeaseToTheGarbageCollector(t *testing.T) {
	f := newFixture(t)
	f.createPods(3)
	op := startOperator(t, nil)
	lock := f.createLock("lock", 10)
	f.waitWriter("db-0", "1")
	f.setReady("db-0", false) // a failover, then db-0 back: db-1 stays the writer (sticky), epoch 2
	f.waitWriter("db-1", "2")
	f.setReady("db-0", true)
	lock = f.lock("lock")
	assert.Empty(t, lock.Finalizers)

	lease := f.lease("lock-lease")
	owner := metav1.GetControllerOf(lease)
	require.NotNil(t, owner, "the Lease has a controller ownerReference")
	assert.Equal(t, lock.UID, owner.UID)
	assert.Equal(t, "StatefulSetLock", owner.Kind)
	assert.True(t, ptr.Deref(owner.BlockOwnerDeletion, false))

	op.stop() // as `kubectl delete -f deploy/lease-operator.yaml` removes the operator first
	require.NoError(t, suite.Client.Delete(t.Context(), lock))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(suite.Client.Get(t.Context(), key(lock), &leasev1.StatefulSetLock{}))
	}, 5*time.Second, tick, "the lock is gone without the operator")
	roles, epoch := f.roles()
	assert.Equal(t, map[string]string{"db-0": leasev1.RoleReader, "db-1": leasev1.RoleWriter, "db-2": leasev1.RoleReader}, roles)
	assert.Equal(t, "2", epoch)

	// What the garbage collector does; then a new lock of the same name (a re-install) keeps the
	// labelled writer, which is healthy, and goes on from its epoch: no needless move, and the epoch
	// never goes back. It exists before the operator starts: an operator that finds no lock of that
	// name removes the labels instead (TestOrphanLabelsAreRemovedOnStart).
	require.NoError(t, suite.Client.Delete(t.Context(), lease))
	writers := watchWriters(t, f.ns)
	f.createLock("lock", 10)
	startOperator(t, nil)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, metav1.ConditionTrue, condition(f.lock("lock"), leasev1.ConditionReady).Status)
		assert.Equal(c, "db-1", f.lock("lock").Status.WriterPod)
		assert.EqualValues(c, 2, f.lock("lock").Status.LeaseTransitions)
	}, wait, tick)
	lease = f.lease("lock-lease")
	assert.Equal(t, "db-1", ptr.Deref(lease.Spec.HolderIdentity, ""))
	assert.EqualValues(t, 2, ptr.Deref(lease.Spec.LeaseTransitions, 0))
	f.waitWriter("db-1", "2")
	assert.Zero(t, writers.doubles.Load())
}

// A lock of an older version carries the finalizer; the operator removes it on sight, whether the
// lock lives on or is being deleted; once the deleted lock is gone, its pods lose their role labels
// (reconcileGone) as those of any lock deleted while the operator runs.
func TestLegacyFinalizerIsRemovedOnSight(t *testing.T) {
	f := newFixture(t)
	f.createPods(2)
	f.createLock("lock", 10, func(l *leasev1.StatefulSetLock) { l.Finalizers = []string{leasev1.Finalizer} })
	op := startOperator(t, nil)
	f.waitWriter("db-0", "1")
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Empty(c, f.lock("lock").Finalizers) }, wait, tick)

	// Deleted while no operator runs: it waits for the finalizer, then the operator removes it.
	op.stop()
	lock := f.lock("lock")
	controllerutil.AddFinalizer(lock, leasev1.Finalizer)
	require.NoError(t, suite.Client.Update(t.Context(), lock))
	require.NoError(t, suite.Client.Delete(t.Context(), lock))
	assert.False(t, f.lock("lock").DeletionTimestamp.IsZero(), "held by the old finalizer")
	startOperator(t, nil)
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(suite.Client.Get(t.Context(), key(lock), &leasev1.StatefulSetLock{}))
	}, wait, tick)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		roles, _ := f.roles()
		assert.Equal(c, map[string]string{"db-0": "-", "db-1": "-"}, roles)
	}, wait, tick)
}

// unstructuredLock is the lock as kstatus reads it, from its JSON.
func unstructuredLock(t *testing.T, lock *leasev1.StatefulSetLock) *unstructured.Unstructured {
	t.Helper()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(lock)
	require.NoError(t, err)
	u := &unstructured.Unstructured{Object: obj}
	u.SetGroupVersionKind(leasev1.GroupVersion.WithKind("StatefulSetLock"))
	return u
}
