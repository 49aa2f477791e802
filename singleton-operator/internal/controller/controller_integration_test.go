//go:build integration

package controller

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
	"github.com/statefulops/statefulops/shared/testsupport"
	"github.com/statefulops/statefulops/singleton-operator/internal/grant"
)

// A held pod is released only once every other pod is gone from the API or terminal: a pod being
// deleted still blocks, a confirmed deletion or a terminal pod does not.
func TestReleaseOnlyWhenOthersGoneOrTerminal(t *testing.T) {
	f := activeOldPod(t)
	f.createPod("new", held(singletonv1.HoldModeWrapper))
	f.neverReleased("new", time.Second)

	require.NoError(t, suite.Client.Delete(t.Context(), f.pod("old"))) // graceful: stays until the kubelet confirms
	f.neverReleased("new", time.Second)
	f.confirmStop("old")
	f.waitReleased("new")

	pod := f.pod("new")
	assert.Equal(t, "2", pod.Annotations[singletonv1.AnnotationEpoch], "epoch follows the pods' epochs")
	assert.Equal(t, "2", pod.Annotations[singletonv1.AnnotationStartGranted])
	require.Eventually(t, func() bool { return readinessGateTrue(f.pod("new")) }, wait, tick, "readiness gate set")
	ss := f.waitCondition("db", singletonv1.ConditionReady, metav1.ConditionTrue)
	assert.Equal(t, "new", ss.Status.ActivePod)
	assert.Equal(t, int64(2), ss.Status.Epoch)
	assert.Equal(t, singletonv1.PhaseRunning, ss.Status.Phase)

	// A crash-looping pod is not gone; a terminal one is.
	f.createPod("newer", held(singletonv1.HoldModeWrapper))
	f.neverReleased("newer", time.Second)
	f.setPhase("new", corev1.PodFailed)
	f.waitReleased("newer")
	assert.Equal(t, "3", f.pod("newer").Annotations[singletonv1.AnnotationEpoch])
}

// Exit report: a released Wrapper pod being deleted blocks the held candidate until the annotation
// AnnotationExited names every app container; then the candidate is released while the old pod is still
// in the API (its kubelet has not confirmed the stop), and the handover is timed from the report. An
// annotation that leaves out a container, or one on a pod not being deleted, releases nothing.
func TestExitReportReleasesBeforeTheOldPodIsGone(t *testing.T) {
	f := newFixture(t)
	watchOverlaps(t, f.ns)
	startOperator(t, nil)
	f.createSingleton("db")
	f.createPod("old", releasedAt(1), func(p *corev1.Pod) {
		p.Finalizers = []string{"test.statefulops.io/keep"} // a delete leaves it terminating
		p.Spec.Containers = []corev1.Container{{Name: "main", Image: "db"}, {Name: "logs", Image: "logs"},
			{Name: singletonv1.SidecarContainerName, Image: "sidecar"}}
	})
	t.Cleanup(func() {
		old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "old"}}
		_ = suite.Client.Patch(context.Background(), old, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	exited := func(value string) {
		t.Helper()
		raw := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, singletonv1.AnnotationExited, value)
		require.NoError(t, suite.Client.Patch(t.Context(), f.pod("old"), client.RawPatch(types.MergePatchType, []byte(raw))))
	}
	f.createPod("new", held(singletonv1.HoldModeWrapper))
	f.neverReleased("new", time.Second)

	exited("main,logs") // not being deleted: its app may still run, or start again
	f.neverReleased("new", time.Second)

	exited("main")
	require.NoError(t, suite.Client.Delete(t.Context(), f.pod("old")))
	f.neverReleased("new", time.Second)

	exited("main,logs")
	f.waitReleased("new")
	old := f.pod("old")
	assert.False(t, old.DeletionTimestamp.IsZero(), "the old pod is still in the API, being deleted")
	assert.Equal(t, "2", f.pod("new").Annotations[singletonv1.AnnotationEpoch])
	ss := f.waitCondition("db", singletonv1.ConditionReady, metav1.ConditionTrue)
	assert.Equal(t, "new", ss.Status.ActivePod)
	assert.NotNil(t, ss.Status.LastTransitionDuration, "the handover is timed from the exit report")
}

// An exit report accepted by the grant server of the same process (grant.Exits) counts at once: the
// controller takes the old pod as stopped before its annotation is written, but releases the held pod
// only once the write succeeded — the invariant checker, which goes by the annotations, never sees
// two released pods — and a write that failed releases nothing. Released tells the grant server of
// the release.
func TestAcceptedExitReportReleasesOnceRecorded(t *testing.T) {
	f := newFixture(t)
	watchOverlaps(t, f.ns)
	exits := grant.NewExits()
	var grantsTold atomic.Int32
	startOperatorWithOptions(t, Options{Exits: exits, Released: func(p *corev1.Pod) {
		if p.Name == "new" && p.Annotations[singletonv1.AnnotationStartGranted] != "" {
			grantsTold.Add(1)
		}
	}}, nil)
	f.createSingleton("db")
	f.createPod("old", releasedAt(1), func(p *corev1.Pod) {
		p.Finalizers = []string{"test.statefulops.io/keep"} // a delete leaves it terminating
		p.Spec.Containers = []corev1.Container{{Name: "main", Image: "db"}, {Name: singletonv1.SidecarContainerName, Image: "sidecar"}}
	})
	t.Cleanup(func() {
		old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "old"}}
		_ = suite.Client.Patch(context.Background(), old, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	f.createPod("new", held(singletonv1.HoldModeWrapper))
	require.NoError(t, suite.Client.Delete(t.Context(), f.pod("old")))
	f.neverReleased("new", time.Second)

	// Accepted, then its write fails: nothing is released, and the pod blocks again.
	exits.Begin(f.pod("old"))(errors.New("injected: the annotation's patch failed"))
	f.neverReleased("new", time.Second)

	// Accepted, its write under way: still held (the controller has listed and reserved meanwhile).
	end := exits.Begin(f.pod("old"))
	f.neverReleased("new", time.Second)
	raw := fmt.Sprintf(`{"metadata":{"annotations":{%q:"main"}}}`, singletonv1.AnnotationExited)
	require.NoError(t, suite.Client.Patch(t.Context(), f.pod("old"), client.RawPatch(types.MergePatchType, []byte(raw))))
	end(nil)
	f.waitReleased("new")
	// The release patch is visible to this test's client as soon as the API server has it, a moment
	// before the controller's Patch call returns and tells the grant server.
	require.Eventually(t, func() bool { return grantsTold.Load() >= 1 }, 5*time.Second, 10*time.Millisecond,
		"the grant server is told of the release")
	require.Never(t, func() bool { return grantsTold.Load() > 1 }, time.Second, 50*time.Millisecond,
		"the grant server is told of the release once")
	assert.False(t, f.pod("old").DeletionTimestamp.IsZero(), "the old pod is still in the API, being deleted")
}

// SchedulingGate release removes the gate and stamps the epoch.
func TestSchedulingGateRelease(t *testing.T) {
	f := newFixture(t)
	startOperator(t, nil)
	f.createSingleton("db", func(ss *singletonv1.StatefulSingleton) { ss.Spec.HoldMode = singletonv1.HoldModeSchedulingGate })
	f.createPod("a", held(singletonv1.HoldModeSchedulingGate))
	f.waitReleased("a")
	pod := f.pod("a")
	assert.Empty(t, pod.Spec.SchedulingGates)
	assert.Equal(t, "1", pod.Annotations[singletonv1.AnnotationEpoch])
	assert.NotContains(t, pod.Annotations, singletonv1.AnnotationStartGranted)
}

// The previous pod force-deleted from a NotReady node: hold with FencingRequired until the node is
// tainted out-of-service.
func TestFencingNodeNotReady(t *testing.T) {
	f := heldUntilFenced(t, "node-b", func() Options { return Options{} })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ss := f.singleton("db")
		assert.Nil(c, findCondition(ss, singletonv1.ConditionFencingRequired))
		assert.Equal(c, "new", ss.Status.ActivePod)
	}, wait, tick)
}

// The cache can show the old pod gone from its node before it shows that node NotReady (the nodes'
// and the pods' watches are separate streams), though the API server had the node NotReady first: a
// pod force-deleted just after its node went NotReady. The release must not rest on the cached node.
// Here the operator's cache never learns that the node went NotReady, nor that it was fenced.
func TestFencingDoesNotTrustALaggingNodeCache(t *testing.T) {
	heldUntilFenced(t, "node-e", func() Options {
		ready := &corev1.Node{}
		require.NoError(t, suite.Client.Get(t.Context(), client.ObjectKey{Name: "node-e"}, ready))
		return Options{Overrides: opsutil.Overrides{Cache: func(cached client.Reader) client.Reader {
			return frozenNode{Reader: cached, node: ready}
		}}}
	})
}

// heldUntilFenced runs an operator with opts (made once the Ready node exists) and releases pod "old"
// on node; then node goes NotReady, "new" is created and "old" force-deleted: "new" must stay held with
// FencingRequired until node is tainted out-of-service, and is released then.
func heldUntilFenced(t *testing.T, node string, opts func() Options) *fixture {
	t.Helper()
	f := newFixture(t)
	watchOverlaps(t, f.ns)
	ensureNode(t, node, true, false)
	t.Cleanup(func() { ensureNode(t, node, true, false) })
	startOperatorWithOptions(t, opts(), nil)
	f.createSingleton("db")
	f.createPod("old", held(singletonv1.HoldModeWrapper), onNode(node))
	f.waitReleased("old")
	require.Eventually(t, func() bool { return f.singleton("db").Status.ActivePodNode == node }, wait, tick)

	ensureNode(t, node, false, false)
	f.createPod("new", held(singletonv1.HoldModeWrapper))
	f.confirmStop("old") // force delete: the kubelet never confirmed
	ss := f.waitCondition("db", singletonv1.ConditionFencingRequired, metav1.ConditionTrue)
	assert.Contains(t, ss.Status.Message, node)
	f.neverReleased("new", time.Second)

	ensureNode(t, node, false, true)
	f.waitReleased("new")
	return f
}

// frozenNode is a cache that keeps showing node as it was, whatever the API server has since.
type frozenNode struct {
	client.Reader
	node *corev1.Node
}

func (r frozenNode) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if n, ok := obj.(*corev1.Node); ok && key.Name == r.node.Name {
		r.node.DeepCopyInto(n)
		return nil
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// Several held pods: exactly one is released, the newest revision.
func TestSeveralHeldNewestRevisionWins(t *testing.T) {
	f := newFixture(t)
	oc := watchOverlaps(t, f.ns)
	rs1, rs2 := f.createReplicaSet("db-1", 1), f.createReplicaSet("db-2", 2)
	f.createPod("a-rev1", held(singletonv1.HoldModeWrapper), ownedBy(rs1))
	f.createPod("b-rev2", held(singletonv1.HoldModeWrapper), ownedBy(rs2))
	f.createPod("c-rev1", held(singletonv1.HoldModeWrapper), ownedBy(rs1))
	f.createSingleton("db")
	startOperator(t, nil)
	f.waitReleased("b-rev2")
	f.neverReleased("a-rev1", time.Second)
	assert.False(t, f.released("c-rev1"))
	oc.mu.Lock()
	defer oc.mu.Unlock()
	assert.Len(t, oc.epochs, 1)
}

// RollingUpdate: the new revision's pod is held while the old one is healthy; the operator deletes the
// old pod and releases the new one once the stop is confirmed.
func TestRollingUpdateHandover(t *testing.T) {
	f := newFixture(t)
	watchOverlaps(t, f.ns)
	rs1, rs2 := f.createReplicaSet("db-1", 1), f.createReplicaSet("db-2", 2)
	startOperator(t, nil)
	f.createSingleton("db")
	f.createPod("old", held(singletonv1.HoldModeWrapper), ownedBy(rs1))
	f.waitReleased("old")
	f.createPod("new", held(singletonv1.HoldModeWrapper), ownedBy(rs2))
	require.Eventually(t, func() bool { return !f.pod("old").DeletionTimestamp.IsZero() }, wait, tick, "old pod deleted by the operator")
	assert.False(t, f.released("new"))
	f.confirmStop("old")
	f.waitReleased("new")

	// A replacement of the old revision (the old ReplicaSet reacting) stays held.
	f.createPod("old-again", held(singletonv1.HoldModeWrapper), ownedBy(rs1))
	f.neverReleased("old-again", time.Second)
}

// In Wrapper mode the RollingUpdate handover stops the old pod only once the new one runs (containers
// started, the wrapper waiting for its grant): the gap is then the old pod's stop alone.
func TestRollingUpdateHandoverWaitsForTheNewPodToRun(t *testing.T) {
	f := newFixture(t)
	watchOverlaps(t, f.ns)
	rs1, rs2 := f.createReplicaSet("db-1", 1), f.createReplicaSet("db-2", 2)
	startOperator(t, nil)
	f.createSingleton("db")
	f.createPod("old", held(singletonv1.HoldModeWrapper), ownedBy(rs1))
	f.waitReleased("old")
	f.createPod("new", held(singletonv1.HoldModeWrapper), ownedBy(rs2), onNode("")) // not yet reported by a kubelet
	f.setStarting("new")
	testsupport.NeverWithin(t, time.Second, tick, func() bool { return !f.pod("old").DeletionTimestamp.IsZero() },
		"the old pod is kept while the new one is still starting")
	assert.Contains(t, f.singleton("db").Status.Message, "starting")
	f.setPhase("new", corev1.PodRunning)
	require.Eventually(t, func() bool { return !f.pod("old").DeletionTimestamp.IsZero() }, wait, tick, "old pod deleted once the new one runs")
	f.confirmStop("old")
	f.waitReleased("new")
}

// Past maxTransitionTime the transition is reported and the new pod stays held.
func TestTransitionTimeoutKeepsHolding(t *testing.T) {
	f := newFixture(t)
	startOperator(t, nil)
	f.createSingleton("db", func(ss *singletonv1.StatefulSingleton) {
		ss.Spec.MaxTransitionTime, ss.Spec.TerminationGracePeriod = 1, 1
	})
	f.createPod("old", releasedAt(1))
	f.createPod("new", held(singletonv1.HoldModeWrapper))
	ss := f.waitCondition("db", singletonv1.ConditionTransitionTimedOut, metav1.ConditionTrue)
	assert.Equal(t, singletonv1.PhaseFailed, ss.Status.Phase)
	assert.NotNil(t, ss.Status.TransitionTimestamp)
	f.neverReleased("new", time.Second)
	var events corev1.EventList
	require.Eventually(t, func() bool {
		require.NoError(t, suite.Client.List(t.Context(), &events, client.InNamespace(f.ns)))
		for _, e := range events.Items {
			if e.Reason == singletonv1.ReasonTransitionTimeout {
				return true
			}
		}
		return false
	}, wait, tick, "TransitionTimeout event")

	f.confirmStop("old")
	f.waitReleased("new")
	f.waitCondition("db", singletonv1.ConditionReady, metav1.ConditionTrue)
}

// A pod without a hold is reported, never released, and deleted while another pod is active — although
// the operator's cache holds only managed pods: the unmanaged ones a singleton selects come from the
// cache of its selector (caches.go; TestUnmanagedPodsCachedPerSelector), and other pods are cached nowhere.
func TestUngatedPodReportedAndDeleted(t *testing.T) {
	f := newFixture(t)
	elsewhere := newFixture(t) // a namespace without a StatefulSingleton
	elsewhere.createPod("unrelated")
	_, mgr := startOperatorWithManager(t, nil)
	f.createSingleton("db")
	f.createPod("active", held(singletonv1.HoldModeWrapper))
	f.waitReleased("active")
	f.createPod("rogue")
	f.waitCondition("db", singletonv1.ConditionUngatedPod, metav1.ConditionTrue)
	require.Eventually(t, func() bool { return !f.pod("rogue").DeletionTimestamp.IsZero() }, wait, tick, "ungated pod deleted")
	assert.False(t, f.released("rogue"))

	var cached corev1.PodList
	require.NoError(t, mgr.GetCache().List(t.Context(), &cached))
	var names []string
	for _, p := range cached.Items {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	assert.Contains(t, names, f.ns+"/active", "managed pods are in the manager's cache")
	assert.NotContains(t, names, f.ns+"/rogue", "unmanaged pods are not")
	assert.NotContains(t, names, elsewhere.ns+"/unrelated", "the pods of other namespaces are not")

	f.confirmStop("rogue")
	require.Eventually(t, func() bool { return findCondition(f.singleton("db"), singletonv1.ConditionUngatedPod) == nil }, wait, tick)
}

// The finalizer keeps a StatefulSingleton deleted mid-transition until the transition finished; the
// namespace label follows the StatefulSingletons of the namespace. (Issue 16: the finalizer is added by
// the handover, not at creation, so the test waits for it before deleting; TestFinalizerOnlyWhileHeld
// covers when it is there.)
func TestDeletionMidTransitionAndNamespaceLabel(t *testing.T) {
	f := newFixture(t)
	watchOverlaps(t, f.ns)
	startOperator(t, nil)
	f.createSingleton("db")
	require.Eventually(t, func() bool { return f.namespaceLabel() == "true" }, wait, tick, "namespace labelled")

	f.createPod("old", releasedAt(1))
	f.createPod("new", held(singletonv1.HoldModeWrapper))
	require.Eventually(t, func() bool { return len(f.singleton("db").Finalizers) == 1 }, wait, tick, "finalizer added by the handover")
	require.NoError(t, suite.Client.Delete(t.Context(), f.singleton("db")))
	require.Eventually(t, func() bool { return f.singleton("db").Status.Message != "" && !f.released("new") }, wait, tick)
	testsupport.NeverWithin(t, time.Second, tick, func() bool {
		err := suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "db"}, &singletonv1.StatefulSingleton{})
		return err != nil
	}, "kept while a pod is held")
	assert.Contains(t, f.singleton("db").Status.Message, "deletion waits")

	f.confirmStop("old")
	f.waitReleased("new")
	require.Eventually(t, func() bool { return f.singletonGone("db") }, wait, tick, "deleted once nothing is held")
	require.Eventually(t, func() bool { return f.namespaceLabel() == "" }, wait, tick, "namespace label removed")
}

// Overlapping selectors: the older StatefulSingleton manages, the younger reports.
func TestOverlappingSelectors(t *testing.T) {
	f := newFixture(t)
	startOperator(t, nil)
	f.createSingleton("first")
	time.Sleep(1100 * time.Millisecond) // creation timestamps have a one-second resolution
	f.createSingleton("second", func(ss *singletonv1.StatefulSingleton) {
		ss.Spec.Selector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "db", "tier": "x"}}
	})
	ss := f.waitCondition("second", singletonv1.ConditionSelectorConflict, metav1.ConditionTrue)
	assert.Contains(t, ss.Status.Message, "first")
	f.createPod("a", held(singletonv1.HoldModeWrapper), func(p *corev1.Pod) { p.Labels["tier"] = "x" })
	f.waitReleased("a")
	require.Eventually(t, func() bool { return f.singleton("first").Status.ActivePod == "a" }, wait, tick)
	assert.Nil(t, findCondition(f.singleton("first"), singletonv1.ConditionSelectorConflict))
	assert.Empty(t, f.singleton("second").Status.ActivePod)
}

// Injected API errors and operator restarts at random points never release two pods and never reuse
// an epoch: many handovers, a third of the pod patches and status writes failing.
func TestInjectedErrorsAndRestartsNeverDoubleRelease(t *testing.T) {
	f := newFixture(t)
	oc := watchOverlaps(t, f.ns)
	var calls atomic.Int64
	flaky := func() error {
		calls.Add(1)
		if rand.N(3) == 0 {
			return errors.New("injected API error")
		}
		return nil
	}
	funcs := &interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := flaky(); err != nil {
				return err
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
		// The StatefulSingleton's status writes (the epoch reservation and the status at the end of a
		// reconcile) are merge patches of its status subresource.
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if _, ok := obj.(*singletonv1.StatefulSingleton); ok {
				if err := flaky(); err != nil {
					return err
				}
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}
	stop := startOperator(t, funcs)
	f.createSingleton("db")
	const handovers = 8
	prev := ""
	for i := range handovers {
		name := "pod-" + string(rune('a'+i))
		f.createPod(name, held(singletonv1.HoldModeWrapper))
		if prev != "" {
			f.neverReleased(name, 200*time.Millisecond)
			f.confirmStop(prev)
		}
		if i%3 == 1 { // kill the operator mid-handover and start a new one
			stop()
			stop = startOperator(t, funcs)
		}
		f.waitReleased(name)
		prev = name
	}
	require.Eventually(t, func() bool {
		oc.mu.Lock()
		defer oc.mu.Unlock()
		return len(oc.epochs) == handovers
	}, wait, tick, "the checker saw every release")
	oc.mu.Lock()
	defer oc.mu.Unlock()
	seen := map[int64]bool{}
	for _, e := range oc.epochs {
		assert.False(t, seen[e], "epoch %d reused", e)
		seen[e] = true
	}
	assert.GreaterOrEqual(t, f.singleton("db").Status.Epoch, int64(handovers))
	t.Logf("%d handovers with injected errors and %d restarts; API calls intercepted: %d", handovers, handovers/3, calls.Load())
}

// StatefulSet: of two held pods the one of the update revision is released.
func TestStatefulSetUpdateRevisionWins(t *testing.T) {
	f := newFixture(t)
	watchOverlaps(t, f.ns)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: f.ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "db"}}},
			},
		},
	}
	require.NoError(t, suite.Client.Create(t.Context(), sts))
	sts.Status.Replicas, sts.Status.CurrentRevision, sts.Status.UpdateRevision = 1, "db-old", "db-new"
	require.NoError(t, suite.Client.Status().Update(t.Context(), sts))
	owned := func(rev string) podOpt {
		return func(p *corev1.Pod) {
			p.Labels[appsv1.ControllerRevisionHashLabelKey] = rev
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID, Controller: ptr.To(true)}}
		}
	}
	f.createPod("db-b", held(singletonv1.HoldModeWrapper), owned("db-new"))
	f.createPod("db-a", held(singletonv1.HoldModeWrapper), owned("db-old")) // newer pod, smaller name, older revision
	f.createSingleton("db")
	startOperator(t, nil)
	f.waitReleased("db-b")
	f.neverReleased("db-a", time.Second)
}

// The release patch of a Wrapper pod carries no resourceVersion lock but the pod's UID: the API server
// refuses it for another pod instance under the same name (a StatefulSet recreates pods by name).
func TestReleasePatchOfAnotherPodInstanceIsRefused(t *testing.T) {
	f := newFixture(t)
	old := f.createPod("db-0", held(singletonv1.HoldModeWrapper))
	require.NoError(t, suite.Client.Delete(t.Context(), old, client.GracePeriodSeconds(0)))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(suite.Client.Get(t.Context(), client.ObjectKeyFromObject(old), &corev1.Pod{}))
	}, wait, tick)
	f.createPod("db-0", held(singletonv1.HoldModeWrapper))
	raw := fmt.Sprintf(`{"metadata":{"uid":%q,"annotations":{%q:"1"}}}`, old.UID, singletonv1.AnnotationStartGranted)
	err := suite.Client.Patch(t.Context(), f.pod("db-0"), client.RawPatch(types.MergePatchType, []byte(raw)))
	require.Error(t, err, "a patch carrying the old UID must not touch the new pod")
	assert.False(t, f.released("db-0"))
	assert.Empty(t, f.pod("db-0").Annotations[singletonv1.AnnotationStartGranted])
}

// A pod the webhook held with the scheduling gate instead of the wrapper gets an Event saying why.
func TestHoldFallbackIsReportedOnThePod(t *testing.T) {
	f := newFixture(t)
	startOperator(t, nil)
	f.createSingleton("db")
	const why = "container \"app\" has no command in the pod spec"
	f.createPod("gated", held(singletonv1.HoldModeSchedulingGate), func(p *corev1.Pod) {
		p.Annotations[singletonv1.AnnotationHoldFallback] = why
	})
	f.waitReleased("gated")
	require.Eventually(t, func() bool {
		var events corev1.EventList
		require.NoError(t, suite.Client.List(t.Context(), &events, client.InNamespace(f.ns)))
		for _, e := range events.Items {
			if e.Reason == singletonv1.ReasonHoldFallback && e.InvolvedObject.Name == "gated" && strings.Contains(e.Message, why) {
				return true
			}
		}
		return false
	}, wait, tick, "HoldFallback event on the pod")
}
