//go:build integration

package controller

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// Two locks on different StatefulSets name the same Lease (the e2e two-locks-same-lease case): the
// second waits in LeaseConflict; once the first is deleted its pods lose their role labels before the
// second's pod is labelled writer. The checker watches the pods throughout: never two writers. The
// Lease is deleted at once, as the garbage collector would, racing the operator's own cleanup.
func TestTwoLocksSharingALeaseNeverHaveTwoWriters(t *testing.T) {
	f := newFixture(t)
	f.createPods(2)
	other := f.createStatefulSetNamed("other")
	f.createPodOf(other, 0, true, "node-a")
	f.createPodOf(other, 1, true, "node-a")
	writers := watchWriters(t, f.ns)
	startOperator(t, nil)
	f.createLock("db-lock", 10, func(l *leasev1.StatefulSetLock) { l.Spec.LeaseName = "shared" })
	f.waitRoles(map[string]string{"db-0": leasev1.RoleWriter, "db-1": leasev1.RoleReader, "other-0": "-", "other-1": "-"})
	f.createLock("other-lock", 10, func(l *leasev1.StatefulSetLock) {
		l.Spec.StatefulSetName, l.Spec.LeaseName = "other", "shared"
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, leasev1.ReasonLeaseConflict, condition(f.lock("other-lock"), leasev1.ConditionReady).Reason)
		assert.Len(c, typed(testsupport.Events(t, suite.Client, f.ns, "StatefulSetLock", "other-lock", leasev1.ReasonLeaseConflict), corev1.EventTypeWarning), 1)
	}, wait, tick)
	staysOneEvent(t, f.ns, map[string]string{"other-lock": leasev1.ReasonLeaseConflict}) // kubectl describe: one per entry

	lease := f.lease("shared")
	require.NoError(t, suite.Client.Delete(t.Context(), f.lock("db-lock")))
	err := suite.Client.Delete(t.Context(), lease, client.Preconditions{UID: &lease.UID}) // the garbage collector
	require.True(t, err == nil || apierrors.IsNotFound(err), "deleting the Lease: %v", err)
	f.waitRoles(map[string]string{"db-0": "-", "db-1": "-", "other-0": leasev1.RoleWriter, "other-1": leasev1.RoleReader})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "other-0", f.lock("other-lock").Status.WriterPod)
		assert.Equal(c, "other-0", ptr.Deref(f.lease("shared").Spec.HolderIdentity, ""))
	}, wait, tick)
	assert.Positive(t, writers.events.Load())
}

// A lock deleted while the operator runs leaves nothing: every pod it labelled loses the role label,
// the lock label, the epoch and the Lease annotation (one Event per pod), and its Lease is deleted
// (where the garbage collector has not done it first: envtest runs none).
func TestDeletedLockLosesItsLabelsAndLease(t *testing.T) {
	f := newFixture(t)
	f.createPods(3)
	startOperator(t, nil)
	f.createLock("lock", 10)
	f.waitWriter("db-0", "1")
	pod := f.pod("db-0")
	assert.Equal(t, "lock", pod.Labels[leasev1.LockLabel])
	assert.Equal(t, "lock-lease", pod.Annotations[leasev1.WriterLeaseAnnotation])
	assert.Equal(t, "lock", f.pod("db-1").Labels[leasev1.LockLabel])

	require.NoError(t, suite.Client.Delete(t.Context(), f.lock("lock")))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, name := range []string{"db-0", "db-1", "db-2"} {
			pod := f.pod(name)
			for _, k := range []string{leasev1.RoleLabel, leasev1.LockLabel} {
				assert.NotContains(c, pod.Labels, k, "pod %s", name)
			}
			for _, k := range []string{leasev1.WriterEpochAnnotation, leasev1.WriterLeaseAnnotation} {
				assert.NotContains(c, pod.Annotations, k, "pod %s", name)
			}
			assert.Len(c, testsupport.Events(t, suite.Client, f.ns, "Pod", name, leasev1.EventRoleRemoved), 1, "pod %s", name)
		}
		assert.True(c, apierrors.IsNotFound(suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "lock-lease"}, &coordinationv1.Lease{})))
	}, wait, tick)
}

// A lock deleted while no operator ran leaves its writer labelled (docs/lease.md, Uninstall). Another
// lock on another StatefulSet that names the same Lease, created meanwhile, elects only once that
// orphan writer has lost its labels; and an operator that starts finds the orphans by their lock
// label and removes them even where no other lock asks.
func TestOrphanWriterIsCleanedBeforeAnotherLockElects(t *testing.T) {
	// The orphan as this version labels a writer, and as an earlier one did (no writer-lease-key label,
	// which the fence lists separately; nor the lock label, so that only the fence removes its role).
	for _, unkeyed := range []bool{false, true} {
		t.Run(fmt.Sprintf("unkeyed=%t", unkeyed), func(t *testing.T) { orphanWriterIsCleaned(t, unkeyed) })
	}
}

func orphanWriterIsCleaned(t *testing.T, unkeyed bool) {
	f := newFixture(t)
	f.createPods(2)
	other := f.createStatefulSetNamed("other")
	f.createPodOf(other, 0, true, "node-a")
	op := startOperator(t, nil)
	f.createLock("old", 10, func(l *leasev1.StatefulSetLock) { l.Spec.LeaseName = "shared" })
	f.waitRoles(map[string]string{"db-0": leasev1.RoleWriter, "db-1": leasev1.RoleReader, "other-0": "-"})

	op.stop()
	if unkeyed {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "db-0"}}
		require.NoError(t, suite.Client.Patch(t.Context(), pod, client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"`+leasev1.WriterLeaseKeyLabel+`":null,"`+leasev1.LockLabel+`":null}}}`))))
	}
	lease := f.lease("shared")
	require.NoError(t, suite.Client.Delete(t.Context(), f.lock("old")))
	require.NoError(t, suite.Client.Delete(t.Context(), lease)) // the garbage collector
	f.createLock("new", 10, func(l *leasev1.StatefulSetLock) { l.Spec.StatefulSetName, l.Spec.LeaseName = "other", "shared" })
	roles, _ := f.roles()
	assert.Equal(t, map[string]string{"db-0": leasev1.RoleWriter, "db-1": leasev1.RoleReader, "other-0": "-"}, roles, "nothing changes without the operator")

	writers := watchWriters(t, f.ns)
	startOperator(t, nil)
	f.waitRoles(map[string]string{"db-0": "-", "db-1": "-", "other-0": leasev1.RoleWriter})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, metav1.ConditionTrue, condition(f.lock("new"), leasev1.ConditionReady).Status)
	}, wait, tick)
	assert.Positive(t, writers.events.Load())
}

// Pods labelled by a lock deleted while no operator ran lose their labels when an operator starts
// (a re-install), though no lock names their StatefulSet or Lease any more.
func TestOrphanLabelsAreRemovedOnStart(t *testing.T) {
	f := newFixture(t)
	f.createPods(2)
	op := startOperator(t, nil)
	f.createLock("lock", 10)
	f.waitWriter("db-0", "1")
	op.stop()
	require.NoError(t, suite.Client.Delete(t.Context(), f.lock("lock")))

	startOperator(t, nil)
	f.waitRoles(map[string]string{"db-0": "-", "db-1": "-"})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, apierrors.IsNotFound(suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "lock-lease"}, &coordinationv1.Lease{})),
			"the Lease the garbage collector would have deleted")
	}, wait, tick)
}

// waitRoles waits until the namespace's pods carry exactly these roles ("-": none).
func (f *fixture) waitRoles(want map[string]string) {
	f.t.Helper()
	require.EventuallyWithT(f.t, func(c *assert.CollectT) {
		roles, _ := f.roles()
		assert.Equal(c, want, roles)
	}, wait, tick)
}

// createStatefulSetNamed creates another StatefulSet like "db" in the fixture's namespace.
func (f *fixture) createStatefulSetNamed(name string) *appsv1.StatefulSet {
	sts := f.sts.DeepCopy()
	sts.ObjectMeta = metav1.ObjectMeta{Name: name, Namespace: f.ns}
	sts.Spec.Selector.MatchLabels = map[string]string{"app": name}
	sts.Spec.Template.Labels = map[string]string{"app": name}
	require.NoError(f.t, suite.Client.Create(f.t.Context(), sts))
	return sts
}

// During an uninstall the locks go with their CRD while the operator stops: an operator that sees a
// lock deleted while the StatefulSetLock CRD is being deleted, or gone, keeps its labels as they were
// (docs/lease.md, Uninstall). Here the operator is told to check a CRD that does not exist.
func TestLabelsAreKeptWhenTheCRDGoes(t *testing.T) {
	f := newFixture(t)
	f.createPods(2)
	opts := Options{LockCRD: "statefulsetlocks.uninstalled.example.com"}
	suite.StartManager(t, func(ctx context.Context, mgr ctrl.Manager) error { return opts.Setup(ctx, mgr) },
		func(o *ctrl.Options) { CacheOptions(&o.Cache) })
	f.createLock("lock", 10)
	f.waitWriter("db-0", "1")
	require.NoError(t, suite.Client.Delete(t.Context(), f.lock("lock")))
	testsupport.NeverWithin(t, 2*time.Second, 50*time.Millisecond, func() bool {
		roles, epoch := f.roles()
		return roles["db-0"] != leasev1.RoleWriter || roles["db-1"] != leasev1.RoleReader || epoch != "1"
	}, "the labels of a lock deleted with its CRD changed")
}

// The cleanup of a deleted lock is one patch per pod; a patch that fails is retried (with the
// controller's backoff) until no pod is left labelled for the lock, so the labels never stay half
// removed.
func TestDeletedLockCleanupIsRetriedUntilNoneIsLeft(t *testing.T) {
	f := newFixture(t)
	f.createPods(3)
	var failDB1 atomic.Bool
	startOperator(t, &interceptor.Funcs{
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			if name, _, ok := appliedPod(obj); ok && name == "db-1" && failDB1.Load() {
				return injected()
			}
			return c.Apply(ctx, obj, opts...)
		},
	})
	f.createLock("lock", 10)
	f.waitWriter("db-0", "1")

	failDB1.Store(true)
	require.NoError(t, suite.Client.Delete(t.Context(), f.lock("lock")))
	f.waitRoles(map[string]string{"db-0": "-", "db-1": leasev1.RoleReader, "db-2": "-"})
	time.Sleep(time.Second) // retried meanwhile, failing
	failDB1.Store(false)
	f.waitRoles(map[string]string{"db-0": "-", "db-1": "-", "db-2": "-"})
	assert.NotContains(t, f.pod("db-1").Labels, leasev1.LockLabel)
}
