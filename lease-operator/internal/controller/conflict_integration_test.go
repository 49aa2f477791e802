//go:build integration

package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// SL-08: a second lock on a StatefulSet another lock manages is Stalled at once, names the first, says
// so in one Warning Event and writes nothing (no label, no Lease); the first keeps working; deleting
// the first lets the second take over at once (its own retry, a lease duration of 60 s, is not due
// within the test's wait).
func TestSecondLockOnAStatefulSetIsStalledUntilTheFirstGoes(t *testing.T) {
	f := newFixture(t)
	f.createPods(2)
	startOperator(t, nil)
	f.createLock("first", 2)
	f.waitWriter("db-0", "1")
	f.createLock("second", 60)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		lock := &leasev1.StatefulSetLock{}
		if !assert.NoError(c, suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "second"}, lock)) {
			return
		}
		stalled := condition(lock, leasev1.ConditionStalled)
		assert.Equal(c, metav1.ConditionTrue, stalled.Status)
		assert.Equal(c, leasev1.ReasonStatefulSetConflict, stalled.Reason)
		assert.Contains(c, stalled.Message, "StatefulSetLock first already manages StatefulSet db")
		assert.Equal(c, metav1.ConditionFalse, condition(lock, leasev1.ConditionReady).Status)
		assert.Len(c, typed(testsupport.Events(t, suite.Client, f.ns, "StatefulSetLock", "second", leasev1.ReasonStatefulSetConflict), corev1.EventTypeWarning), 1)
	}, wait, tick)

	secondWrote := func() bool {
		if !apierrors.IsNotFound(suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "second-lease"}, &coordinationv1.Lease{})) {
			return true
		}
		var pods corev1.PodList
		require.NoError(t, suite.Client.List(t.Context(), &pods, client.InNamespace(f.ns), client.MatchingLabels{leasev1.LockLabel: "second"}))
		return len(pods.Items) > 0
	}
	// The first keeps working while the second waits: a failover moves the writer, by the first.
	f.setReady("db-0", false)
	f.waitWriter("db-1", "2")
	testsupport.NeverWithin(t, 2*time.Second, 50*time.Millisecond, secondWrote, "the stalled lock wrote a label or a Lease")
	assert.Equal(t, "db-1", ptr.Deref(f.lease("first-lease").Spec.HolderIdentity, ""))

	// The first goes: the second takes over without waiting for its retry.
	require.NoError(t, suite.Client.Delete(t.Context(), f.lock("first")))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var pods corev1.PodList
		if !assert.NoError(c, suite.Client.List(t.Context(), &pods, client.InNamespace(f.ns))) {
			return
		}
		for _, p := range pods.Items {
			assert.Equal(c, "second", p.Labels[leasev1.LockLabel], "pod %s", p.Name)
		}
		lease := &coordinationv1.Lease{}
		if assert.NoError(c, suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "second-lease"}, lease)) {
			assert.Equal(c, "db-1", ptr.Deref(lease.Spec.HolderIdentity, ""))
		}
		lock := &leasev1.StatefulSetLock{}
		if assert.NoError(c, suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "second"}, lock)) {
			assert.Equal(c, metav1.ConditionFalse, condition(lock, leasev1.ConditionStalled).Status)
			assert.Equal(c, metav1.ConditionTrue, condition(lock, leasev1.ConditionReady).Status)
			assert.Equal(c, "db-1", lock.Status.WriterPod)
		}
	}, wait, tick)
	f.waitWriter("db-1", "")
}

// SL-08: deleting the stalled second lock disturbs nothing of the first: no write to its Lease, its
// pods or its status (the lease duration of 60 s puts the first renewal, at 30 s, outside the check),
// the second leaves no Lease, and the first still fails over afterwards.
func TestDeletingTheStalledLockLeavesTheFirstAlone(t *testing.T) {
	f := newFixture(t)
	f.createPods(2)
	startOperator(t, nil)
	f.createLock("first", 60)
	f.waitWriter("db-0", "1")
	f.createLock("second", 60)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		stalled := condition(f.lock("second"), leasev1.ConditionStalled)
		assert.Equal(c, metav1.ConditionTrue, stalled.Status)
		assert.Equal(c, leasev1.ReasonStatefulSetConflict, stalled.Reason)
	}, wait, tick)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ready := condition(f.lock("first"), leasev1.ConditionReady)
		assert.Equal(c, metav1.ConditionTrue, ready.Status)
	}, wait, tick)

	// What the first has written, by resourceVersion: any later write to it changes one.
	versions := func() map[string]string {
		v := map[string]string{"lease": f.lease("first-lease").ResourceVersion, "lock": f.lock("first").ResourceVersion}
		for _, name := range []string{"db-0", "db-1"} {
			v[name] = f.pod(name).ResourceVersion
		}
		return v
	}
	before := versions()

	require.NoError(t, suite.Client.Delete(t.Context(), f.lock("second")))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "second"}, &leasev1.StatefulSetLock{}))
	}, wait, tick)
	testsupport.NeverWithin(t, 2*time.Second, 50*time.Millisecond, func() bool {
		return !assert.ObjectsAreEqual(before, versions())
	}, "deleting the stalled lock wrote to the first lock, its Lease or its pods")
	for _, name := range []string{"db-0", "db-1"} {
		assert.Equal(t, "first", f.pod(name).Labels[leasev1.LockLabel], "pod %s", name)
	}
	assert.True(t, apierrors.IsNotFound(suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "second-lease"}, &coordinationv1.Lease{})),
		"the stalled lock created a Lease")
	assert.Equal(t, "db-0", ptr.Deref(f.lease("first-lease").Spec.HolderIdentity, ""))

	// The first still works.
	f.setReady("db-0", false)
	f.waitWriter("db-1", "2")
	assert.Equal(t, "db-1", ptr.Deref(f.lease("first-lease").Spec.HolderIdentity, ""))
}
