//go:build integration

package controller

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

func condition(lock *leasev1.StatefulSetLock, condType string) metav1.Condition {
	if c := meta.FindStatusCondition(lock.Status.Conditions, condType); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// Initial election, a failover with its status, Lease, Events and epoch, a switchover, then the
// operator stopped for 3× the lease duration: the writer stays (no needless flip) and
// leaseTransitions does not change.
func TestElectionFailoverSwitchoverAndStickinessAfterDowntime(t *testing.T) {
	f := newFixture(t)
	watchWriters(t, f.ns)
	f.createPods(3)
	op := startOperator(t, nil)
	f.createLock("lock", 1)

	f.waitWriter("db-0", "1")
	lease := f.lease("lock-lease")
	assert.Equal(t, "db-0", ptr.Deref(lease.Spec.HolderIdentity, ""))
	assert.EqualValues(t, 1, ptr.Deref(lease.Spec.LeaseTransitions, 0))
	assert.EqualValues(t, 1, ptr.Deref(lease.Spec.LeaseDurationSeconds, 0))
	assert.NotNil(t, lease.Spec.AcquireTime)
	assert.Equal(t, "lock", lease.Labels[leasev1.LockLabel])
	assert.True(t, metav1.IsControlledBy(lease, f.lock("lock")))

	// Failover: the writer becomes not Ready.
	f.setReady("db-0", false)
	f.waitWriter("db-1", "2")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		lock := f.lock("lock")
		assert.Equal(c, "db-1", lock.Status.WriterPod)
		assert.Equal(c, string(f.pod("db-1").UID), lock.Status.WriterPodUID)
		assert.Equal(c, leasev1.FailoverReasonWriterNotReady, lock.Status.LastFailoverReason)
		assert.NotNil(c, lock.Status.LastFailoverTime)
		assert.EqualValues(c, 2, lock.Status.LeaseTransitions)
		assert.Equal(c, metav1.ConditionTrue, condition(lock, leasev1.ConditionReady).Status)
		assert.Equal(c, metav1.ConditionTrue, condition(lock, leasev1.ConditionAvailable).Status)
		assert.Equal(c, metav1.ConditionFalse, condition(lock, leasev1.ConditionError).Status)
	}, wait, tick)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var events eventsv1.EventList
		require.NoError(c, suite.Client.List(t.Context(), &events, client.InNamespace(f.ns)))
		reasons := map[string]bool{}
		for _, e := range events.Items {
			reasons[e.Reason] = true
		}
		assert.True(c, reasons[leasev1.EventWriterElected], "WriterElected")
		assert.True(c, reasons[leasev1.EventWriterDemoted], "WriterDemoted")
	}, wait, tick)
	// Back to Ready: db-0 stays a reader, the writer is sticky.
	f.setReady("db-0", true)
	testsupport.NeverWithin(t, 2*time.Second, 100*time.Millisecond, func() bool { roles, _ := f.roles(); return roles["db-1"] != leasev1.RoleWriter })

	// Planned switchover to db-2; the annotation is removed once done.
	f.switchover("lock", "db-2")
	f.waitWriter("db-2", "3")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		lock := f.lock("lock")
		assert.Empty(c, lock.Annotations[leasev1.SwitchoverAnnotation])
		assert.Equal(c, leasev1.FailoverReasonSwitchover, lock.Status.LastFailoverReason)
	}, wait, tick)

	// Operator down for 3× the lease duration: the Lease expires, the writer is healthy.
	op.stop()
	before := f.lease("lock-lease")
	time.Sleep(3 * time.Second)
	startOperator(t, nil)
	// Renewed by the new operator, still db-2, same transitions.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var lease coordinationv1.Lease
		require.NoError(c, suite.Client.Get(t.Context(), key(before), &lease))
		assert.NotEqual(c, before.ResourceVersion, lease.ResourceVersion, "renewed")
		assert.Equal(c, "db-2", ptr.Deref(lease.Spec.HolderIdentity, ""))
		assert.EqualValues(c, 3, ptr.Deref(lease.Spec.LeaseTransitions, 0))
	}, wait, tick)
	testsupport.NeverWithin(t, 2*time.Second, 100*time.Millisecond, func() bool { roles, _ := f.roles(); return roles["db-2"] != leasev1.RoleWriter })
	f.waitWriter("db-2", "3")
}

// The demotion of the old writer fails (injected): nobody is promoted while it fails, the error is
// reported; once the API accepts it again the failover completes. Then the Lease update fails: the
// old writer is already a reader, nobody is promoted until the Lease moves.
func TestDemoteBeforePromoteUnderInjectedFailures(t *testing.T) {
	f := newFixture(t)
	watchWriters(t, f.ns)
	f.createPods(3)
	var failDemote, failLease atomic.Bool
	injected := errors.New("injected API error")
	startOperator(t, &interceptor.Funcs{
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			if _, role, ok := appliedPod(obj); ok && failDemote.Load() && role == leasev1.RoleReader {
				return injected
			}
			return c.Apply(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, ok := obj.(*coordinationv1.Lease); ok && failLease.Load() {
				return injected
			}
			return c.Update(ctx, obj, opts...)
		},
	})
	f.createLock("lock", 30)
	f.waitWriter("db-0", "1")

	failDemote.Store(true)
	f.setReady("db-0", false)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		lock := f.lock("lock")
		assert.Equal(c, metav1.ConditionTrue, condition(lock, leasev1.ConditionError).Status)
		assert.Equal(c, leasev1.ReasonReconcileError, condition(lock, leasev1.ConditionError).Reason)
	}, wait, tick)
	testsupport.NeverWithin(t, 2*time.Second, 50*time.Millisecond, func() bool {
		roles, _ := f.roles()
		return roles["db-1"] == leasev1.RoleWriter || roles["db-2"] == leasev1.RoleWriter
	}, "promoted although the demotion failed")
	assert.Equal(t, "db-0", ptr.Deref(f.lease("lock-lease").Spec.HolderIdentity, ""))

	failLease.Store(true)
	failDemote.Store(false)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		roles, _ := f.roles()
		assert.Equal(c, leasev1.RoleReader, roles["db-0"])
	}, wait, tick)
	testsupport.NeverWithin(t, 2*time.Second, 50*time.Millisecond, func() bool {
		roles, _ := f.roles()
		return roles["db-1"] == leasev1.RoleWriter || roles["db-2"] == leasev1.RoleWriter
	}, "promoted although the Lease did not move")

	failLease.Store(false)
	f.waitWriter("db-1", "2")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, metav1.ConditionFalse, condition(f.lock("lock"), leasev1.ConditionError).Status)
	}, wait, tick)
}

// The operator dies after moving the Lease and before labelling the new writer (the promotion is
// failed by injection, then the operator is stopped): the next operator completes the labels from
// the Lease without a second election.
func TestRestartMidFailoverCompletesFromTheLease(t *testing.T) {
	f := newFixture(t)
	watchWriters(t, f.ns)
	f.createPods(3)
	var failPromote atomic.Bool
	op := startOperator(t, &interceptor.Funcs{
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			if _, role, ok := appliedPod(obj); ok && failPromote.Load() && role == leasev1.RoleWriter {
				return injected()
			}
			return c.Apply(ctx, obj, opts...)
		},
	})
	f.createLock("lock", 30)
	f.waitWriter("db-0", "1")

	failPromote.Store(true)
	f.setReady("db-0", false)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "db-1", ptr.Deref(f.lease("lock-lease").Spec.HolderIdentity, ""))
	}, wait, tick)
	op.stop()
	roles, _ := f.roles()
	assert.Equal(t, map[string]string{"db-0": "reader", "db-1": "reader", "db-2": "reader"}, roles, "between Lease and labels: no writer")

	startOperator(t, nil)
	f.waitWriter("db-1", "2")
	assert.EqualValues(t, 2, ptr.Deref(f.lease("lock-lease").Spec.LeaseTransitions, 0), "one transition, no re-election")
}

func injected() error { return errors.New("injected API error") }

// appliedPod returns the name of the pod an apply of the operator writes and the role label it
// applies ("" for none); ok is false for an apply of anything but a pod.
func appliedPod(obj runtime.ApplyConfiguration) (name, role string, ok bool) {
	ac, ok := obj.(*corev1ac.PodApplyConfiguration)
	if !ok {
		return "", "", false
	}
	return ptr.Deref(ac.Name, ""), ac.Labels[leasev1.RoleLabel], true
}

// failoverDelaySeconds: a not-Ready blip shorter than the delay causes no transition; a longer one
// causes exactly one, after the delay.
func TestFailoverDelay(t *testing.T) {
	f := newFixture(t)
	watchWriters(t, f.ns)
	f.createPods(2)
	startOperator(t, nil)
	f.createLock("lock", 30, func(l *leasev1.StatefulSetLock) { l.Spec.FailoverDelaySeconds = 2 })
	f.waitWriter("db-0", "1")

	f.setReady("db-0", false)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		lock := f.lock("lock")
		assert.Equal(c, metav1.ConditionTrue, condition(lock, leasev1.ConditionProgressing).Status)
		assert.Equal(c, leasev1.ReasonFailoverDelayed, condition(lock, leasev1.ConditionProgressing).Reason)
	}, wait, tick)
	time.Sleep(time.Second)
	f.setReady("db-0", true)
	testsupport.NeverWithin(t, 3*time.Second, 100*time.Millisecond, func() bool { return ptr.Deref(f.lease("lock-lease").Spec.LeaseTransitions, 0) != 1 }, "a blip shorter than the delay moved the writer")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, metav1.ConditionTrue, condition(f.lock("lock"), leasev1.ConditionReady).Status)
	}, wait, tick)

	start := time.Now()
	f.setReady("db-0", false)
	f.waitWriter("db-1", "2")
	assert.GreaterOrEqual(t, time.Since(start), 2*time.Second, "not before the delay")
	assert.EqualValues(t, 2, ptr.Deref(f.lease("lock-lease").Spec.LeaseTransitions, 0), "exactly one transition")
}

// A Lease of that name that the lock does not own is left alone: condition, Event, no pod labelled.
func TestForeignLeaseIsLeftAlone(t *testing.T) {
	f := newFixture(t)
	f.createPods(2)
	foreign := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "app-election", Namespace: f.ns},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("app-instance-7"), LeaseDurationSeconds: ptr.To[int32](15)},
	}
	require.NoError(t, suite.Client.Create(t.Context(), foreign))
	startOperator(t, nil)
	f.createLock("lock", 10, func(l *leasev1.StatefulSetLock) { l.Spec.LeaseName = "app-election" })

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		lock := f.lock("lock")
		assert.Equal(c, leasev1.ReasonLeaseConflict, condition(lock, leasev1.ConditionAvailable).Reason)
		assert.Equal(c, metav1.ConditionFalse, condition(lock, leasev1.ConditionAvailable).Status)
		assert.Equal(c, metav1.ConditionTrue, condition(lock, leasev1.ConditionError).Status)
		stalled := condition(lock, leasev1.ConditionStalled) // only the user can resolve it
		assert.Equal(c, metav1.ConditionTrue, stalled.Status)
		assert.Equal(c, leasev1.ReasonLeaseConflict, stalled.Reason)
		var events eventsv1.EventList
		require.NoError(c, suite.Client.List(t.Context(), &events, client.InNamespace(f.ns)))
		found := false
		for _, e := range events.Items {
			found = found || (e.Reason == leasev1.ReasonLeaseConflict && e.Type == corev1.EventTypeWarning)
		}
		assert.True(c, found, "LeaseConflict event")
	}, wait, tick)
	testsupport.NeverWithin(t, 2*time.Second, 100*time.Millisecond, func() bool {
		lease := f.lease("app-election")
		roles, _ := f.roles()
		return lease.ResourceVersion != foreign.ResourceVersion || roles["db-0"] != "-" || roles["db-1"] != "-"
	}, "the foreign Lease or the pods were touched")

	// Deleting the lock leaves the foreign Lease too.
	require.NoError(t, suite.Client.Delete(t.Context(), f.lock("lock")))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "lock"}, &leasev1.StatefulSetLock{}))
	}, wait, tick)
	assert.Equal(t, foreign.ResourceVersion, f.lease("app-election").ResourceVersion)
}

// Scaled to zero: no writer, Lease holder cleared, Available=False NoReadyPods, not an error.
func TestScaleToZero(t *testing.T) {
	f := newFixture(t)
	watchWriters(t, f.ns)
	f.createPods(2)
	startOperator(t, nil)
	f.createLock("lock", 10)
	f.waitWriter("db-0", "1")

	f.sts.Spec.Replicas = ptr.To[int32](0)
	require.NoError(t, suite.Client.Update(t.Context(), f.sts))
	for _, name := range []string{"db-1", "db-0"} {
		require.NoError(t, suite.Client.Delete(t.Context(), f.pod(name), client.GracePeriodSeconds(0)))
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		lock := f.lock("lock")
		assert.Empty(c, lock.Status.WriterPod)
		assert.Equal(c, metav1.ConditionFalse, condition(lock, leasev1.ConditionAvailable).Status)
		assert.Equal(c, leasev1.ReasonNoReadyPods, condition(lock, leasev1.ConditionAvailable).Reason)
		assert.Equal(c, metav1.ConditionFalse, condition(lock, leasev1.ConditionError).Status)
		var lease coordinationv1.Lease
		require.NoError(c, suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "lock-lease"}, &lease))
		assert.Empty(c, ptr.Deref(lease.Spec.HolderIdentity, ""))
		assert.EqualValues(c, 2, ptr.Deref(lease.Spec.LeaseTransitions, 0))
	}, wait, tick)

	// Scaled up again: a new writer with a higher epoch.
	f.createPod(0, true)
	f.waitWriter("db-0", "3")
}

// A lock naming a missing StatefulSet reports it; once the StatefulSet and its pods exist, a writer
// is elected.
func TestStatefulSetMissing(t *testing.T) {
	f := newFixture(t)
	startOperator(t, nil)
	f.createLock("lock", 10, func(l *leasev1.StatefulSetLock) { l.Spec.StatefulSetName = "later" })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		lock := f.lock("lock")
		assert.Equal(c, metav1.ConditionTrue, condition(lock, leasev1.ConditionError).Status)
		assert.Equal(c, leasev1.ReasonStatefulSetNotFound, condition(lock, leasev1.ConditionError).Reason)
		assert.Equal(c, metav1.ConditionFalse, condition(lock, leasev1.ConditionReady).Status)
	}, wait, tick)

	f.sts = f.sts.DeepCopy()
	f.sts.ObjectMeta = metav1.ObjectMeta{Name: "later", Namespace: f.ns}
	require.NoError(t, suite.Client.Create(t.Context(), f.sts))
	pod := f.createPod(0, true)
	_ = pod
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		lock := f.lock("lock")
		assert.Equal(c, metav1.ConditionFalse, condition(lock, leasev1.ConditionError).Status)
	}, wait, tick)
}

// A writer pod recreated under its name (new UID) is not the writer until elected again; every pod,
// terminating or not Ready, carries a role label; a node going NotReady moves the writer.
func TestRecreatedTerminatingAndNodeNotReady(t *testing.T) {
	f := newFixture(t)
	watchWriters(t, f.ns)
	ensureNode(t, "node-b", true)
	t.Cleanup(func() { ensureNode(t, "node-b", true) })
	f.createPods(2)
	startOperator(t, nil)
	f.createLock("lock", 10)
	f.waitWriter("db-0", "1")

	// Recreated under the same name: a new election, which picks the new db-0 with a new epoch.
	require.NoError(t, suite.Client.Delete(t.Context(), f.pod("db-0"), client.GracePeriodSeconds(0)))
	f.createPod(0, true)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		lock := f.lock("lock")
		assert.Equal(c, string(f.pod(lock.Status.WriterPod).UID), lock.Status.WriterPodUID)
		assert.GreaterOrEqual(c, lock.Status.LeaseTransitions, int32(2))
	}, wait, tick)

	// Terminating writer (graceful deletion; no kubelet here, so it stays Terminating).
	writer := f.lock("lock").Status.WriterPod
	require.NoError(t, suite.Client.Delete(t.Context(), f.pod(writer)))
	other := map[string]string{"db-0": "db-1", "db-1": "db-0"}[writer]
	f.waitWriter(other, "")
	// The pods' labels change before the lock's status is written: wait for the status too.
	require.Eventually(t, func() bool {
		return f.lock("lock").Status.LastFailoverReason == leasev1.FailoverReasonWriterTerminating
	}, wait, tick, "lastFailoverReason WriterTerminating")

	// A third pod on node-b becomes the writer (switchover), then node-b goes NotReady: its pod's Ready
	// is still True in the API, the node's condition moves the writer.
	f.createPodOn(2, true, "node-b")
	f.switchover("lock", "db-2")
	f.waitWriter("db-2", "")
	ensureNode(t, "node-b", false)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		roles, _ := f.roles()
		assert.Equal(c, leasev1.RoleWriter, roles[other])
		assert.Equal(c, leasev1.RoleReader, roles["db-2"])
		assert.Equal(c, leasev1.RoleReader, roles[writer], "the terminating pod is labelled too")
	}, wait, tick)
	// The status is written after the labels: wait for it rather than reading it once.
	require.Eventually(t, func() bool {
		return f.lock("lock").Status.LastFailoverReason == leasev1.FailoverReasonNodeNotReady
	}, wait, tick, "last failover reason NodeNotReady")
}

// Quiet at rest: with nothing changing, the only writes are Lease renewals at half the duration.
func TestQuietAtRest(t *testing.T) {
	f := newFixture(t)
	f.createPods(3)
	var writes atomic.Int64
	var leaseWrites atomic.Int64
	// Locks of earlier tests live on in envtest (no namespace controller): count this namespace only.
	count := func(obj client.Object) {
		if obj.GetNamespace() != f.ns {
			return
		}
		writes.Add(1)
		if _, ok := obj.(*coordinationv1.Lease); ok {
			leaseWrites.Add(1)
		}
	}
	startOperator(t, &interceptor.Funcs{
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			if ac, ok := obj.(*corev1ac.PodApplyConfiguration); ok {
				count(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ptr.Deref(ac.Namespace, "")}})
			}
			return c.Apply(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			count(obj)
			return c.Patch(ctx, obj, patch, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			count(obj)
			return c.Update(ctx, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			count(obj)
			return c.Create(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			count(obj)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	f.createLock("lock", 2)
	f.waitWriter("db-0", "1")
	time.Sleep(time.Second) // let the election's own writes settle
	w0, l0 := writes.Load(), leaseWrites.Load()
	const window = 10 * time.Second
	time.Sleep(window)
	w, l := writes.Load()-w0, leaseWrites.Load()-l0
	t.Logf("at rest for %s with leaseDurationSeconds=2: %d API writes, %d of them Lease renewals", window, w, l)
	assert.Equal(t, w, l, "only Lease renewals")
	assert.InDelta(t, 10, l, 2, "one renewal per second (half the duration)")
}
