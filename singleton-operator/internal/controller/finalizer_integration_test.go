//go:build integration

package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// hasFinalizer reports whether the StatefulSingleton carries the operator's finalizer.
func (f *fixture) hasFinalizer(name string) bool {
	for _, fin := range f.singleton(name).Finalizers {
		if fin == singletonv1.Finalizer {
			return true
		}
	}
	return false
}

// ownedByDeployment makes rs a ReplicaSet of Deployment dep (as the Deployment controller would; no
// garbage collector runs in envtest, so the Deployment need not exist).
func ownedByDeployment(rs *appsv1.ReplicaSet, dep string) *appsv1.ReplicaSet {
	rs.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: dep,
		UID: types.UID("uid-" + dep), Controller: ptr.To(true)}}
	return rs
}

// TestFinalizerOnlyWhileHeld (issue 16): a StatefulSingleton at rest (one running pod, none held) has no
// finalizer, so deleting it (or uninstalling the operator with it present) completes at once; a handover
// adds the finalizer before acting on the held pod and removes it once nothing is held.
func TestFinalizerOnlyWhileHeld(t *testing.T) {
	f := newFixture(t)
	watchOverlaps(t, f.ns)
	rs1, rs2 := f.createReplicaSet("db-1", 1), f.createReplicaSet("db-2", 2)
	startOperator(t, nil)
	f.createSingleton("db")
	require.Eventually(t, func() bool { return f.singleton("db").Status.Phase == singletonv1.PhaseRunning }, wait, tick, "status written")
	assert.False(t, f.hasFinalizer("db"), "no pod: no finalizer")

	f.createPod("old", held(singletonv1.HoldModeWrapper), ownedBy(rs1))
	f.waitReleased("old")
	require.Eventually(t, func() bool { return !f.hasFinalizer("db") && f.singleton("db").Status.ActivePod == "old" }, wait, tick, "at rest: no finalizer")
	testsupport.NeverWithin(t, time.Second, tick, func() bool { return f.hasFinalizer("db") }, "no finalizer at rest")

	f.createPod("new", held(singletonv1.HoldModeWrapper), ownedBy(rs2))
	require.Eventually(t, func() bool { return !f.pod("old").DeletionTimestamp.IsZero() }, wait, tick, "handover deletes the old pod")
	assert.True(t, f.hasFinalizer("db"), "the finalizer is in place before the handover acts")
	f.confirmStop("old")
	f.waitReleased("new")
	require.Eventually(t, func() bool { return !f.hasFinalizer("db") }, wait, tick, "finalizer removed once nothing is held")

	// At rest, deletion completes at once; the running pod keeps running (released).
	require.NoError(t, suite.Client.Delete(t.Context(), f.singleton("db")))
	require.Eventually(t, func() bool { return f.singletonGone("db") }, wait, tick, "deleted at once")
	require.Eventually(t, func() bool { return f.namespaceLabel() == "" }, wait, tick, "namespace label removed")
	assert.True(t, f.released("new"))
}

// TestOrphanedHeldPodWaitsForItsWorkload (issue 16): a StatefulSingleton deleted while the operator was
// stopped, at rest (so without the finalizer) while a new pod of its Deployment was already admitted
// held. The held pod is not left held for ever: it is released, with an Event, only once every other
// pod of its Deployment (any ReplicaSet) is gone or terminal; a running pod of another workload does
// not hold it back, and of two held pods of the workload only the newest is released.
func TestOrphanedHeldPodWaitsForItsWorkload(t *testing.T) {
	f := newFixture(t)
	noSingletonLabel := func(p *corev1.Pod) { delete(p.Labels, singletonv1.LabelSingleton) } // siblings by workload
	rs1 := f.createReplicaSet("db-1", 1)
	rs2, rs3 := f.createReplicaSet("db-2", 2), f.createReplicaSet("db-3", 3)
	for _, rs := range []*appsv1.ReplicaSet{rs1, rs2, rs3} {
		require.NoError(t, suite.Client.Update(t.Context(), ownedByDeployment(rs, "db")))
	}
	other := ownedByDeployment(f.createReplicaSet("web-1", 1), "web")
	require.NoError(t, suite.Client.Update(t.Context(), other))

	stop := startOperator(t, nil)
	f.createSingleton("db")
	f.createPod("old", held(singletonv1.HoldModeWrapper), ownedBy(rs1), noSingletonLabel)
	f.waitReleased("old")
	require.Eventually(t, func() bool { return !f.hasFinalizer("db") && f.singleton("db").Status.ActivePod == "old" }, wait, tick, "at rest")
	stop()

	f.createPod("web", releasedAt(7), ownedBy(other), func(p *corev1.Pod) { p.Labels["app"] = "web"; p.Labels[singletonv1.LabelSingleton] = "web" })
	f.createPod("new", held(singletonv1.HoldModeWrapper), ownedBy(rs2), noSingletonLabel)
	f.createPod("newer", held(singletonv1.HoldModeWrapper), ownedBy(rs3), noSingletonLabel)
	require.NoError(t, suite.Client.Delete(t.Context(), f.singleton("db")))
	require.Eventually(t, func() bool { return f.singletonGone("db") }, wait, tick, "gone without the operator: no finalizer at rest")

	startOperator(t, nil)
	require.Eventually(t, func() bool {
		return len(testsupport.Events(t, suite.Client, f.ns, "Pod", "newer", singletonv1.ReasonOrphanHeld)) == 1
	}, wait, tick, "one OrphanHeld Event on the pod")
	f.neverReleased("newer", time.Second)
	assert.False(t, f.released("new"))

	f.confirmStop("old")
	f.waitReleased("newer")
	assert.NotEmpty(t, f.pod("newer").Annotations[singletonv1.AnnotationStartGranted], "released with a grant")
	f.neverReleased("new", time.Second)
	require.Eventually(t, func() bool {
		return len(testsupport.Events(t, suite.Client, f.ns, "Pod", "newer", singletonv1.ReasonOrphanReleased)) == 1
	}, wait, tick, "OrphanReleased Event")
	assert.True(t, f.released("web"), "other workloads untouched")
}

// TestOrphanOfSingletonDeletedBeforeTheFinalizer (issue 16): a StatefulSingleton deleted in the instant
// before the operator added the finalizer for a held pod (here: while it was stopped) leaves that pod
// held only until the pod admitted for the same StatefulSingleton (the webhook's singleton label) is
// gone: never two running.
func TestOrphanOfSingletonDeletedBeforeTheFinalizer(t *testing.T) {
	f := newFixture(t)
	watchOverlaps(t, f.ns)
	f.createPod("old", releasedAt(3))
	f.createPod("new", held(singletonv1.HoldModeWrapper))
	startOperator(t, nil)
	f.neverReleased("new", time.Second)
	f.confirmStop("old")
	f.waitReleased("new")
}

// TestUninstallLeavesNothingTerminating (issue 16): what `kubectl delete -f deploy/singleton-operator.yaml`
// does to the StatefulSingletons — the operator goes while they are deleted — with one at rest (a running
// pod), one without pods, one overlapping an older one (SelectorConflict) and one still carrying the
// finalizer from an earlier operator version: the operator dropped every finalizer while nothing was
// held, so with the operator stopped all four are deleted at once, and the running pod keeps running.
func TestUninstallLeavesNothingTerminating(t *testing.T) {
	f := newFixture(t)
	watchOverlaps(t, f.ns)
	stop := startOperator(t, nil)
	f.createSingleton("db", func(ss *singletonv1.StatefulSingleton) { ss.Finalizers = []string{singletonv1.Finalizer} })
	f.createSingleton("empty", func(ss *singletonv1.StatefulSingleton) {
		ss.Spec.Selector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "none"}}
	})
	time.Sleep(1100 * time.Millisecond) // creation timestamps have a one-second resolution
	f.createSingleton("younger", func(ss *singletonv1.StatefulSingleton) {
		ss.Spec.Selector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "db", "tier": "x"}}
	})
	f.createPod("a", held(singletonv1.HoldModeWrapper))
	f.waitReleased("a")
	f.waitCondition("younger", singletonv1.ConditionSelectorConflict, metav1.ConditionTrue)
	names := []string{"db", "empty", "younger"}
	require.Eventually(t, func() bool {
		for _, n := range names {
			if f.hasFinalizer(n) || f.singleton(n).Status.ObservedGeneration == 0 {
				return false
			}
		}
		return f.singleton("db").Status.ActivePod == "a"
	}, wait, tick, "no finalizer at rest, also the one an earlier version put")
	stop()

	start := time.Now()
	for _, n := range names {
		require.NoError(t, suite.Client.Delete(t.Context(), f.singleton(n)))
	}
	for _, n := range names {
		require.Eventually(t, func() bool { return f.singletonGone(n) }, 5*time.Second, tick, "%s deleted without the operator", n)
	}
	t.Logf("3 StatefulSingletons deleted without the operator in %s", time.Since(start).Round(time.Millisecond))
	assert.True(t, f.released("a"), "the running pod keeps running")
	assert.Equal(t, "true", f.namespaceLabel(), "the namespace label stays (documented)")
}
