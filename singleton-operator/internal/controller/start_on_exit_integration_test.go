//go:build integration

package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
	"github.com/statefulops/statefulops/shared/testsupport"
	"github.com/statefulops/statefulops/singleton-operator/internal/grant"
)

// exitReporting: a pod as the webhook admits it in Wrapper mode, whose wrappers can report their app's
// exit (the exit directory mounted), with the status-sidecar beside its app container; a finalizer
// keeps it terminating once deleted (no kubelet here).
func exitReporting(f *fixture) podOpt {
	return func(p *corev1.Pod) {
		p.Finalizers = []string{"test.statefulops.io/keep"}
		p.Spec.Containers = []corev1.Container{{Name: "main", Image: "db"}, {Name: singletonv1.SidecarContainerName, Image: "sidecar"}}
		p.Spec.Volumes = []corev1.Volume{{Name: singletonv1.ExitVolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		name := p.Name
		f.t.Cleanup(func() {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}}
			_ = suite.Client.Patch(context.Background(), pod, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		})
	}
}

// setWaitingForGrant reports every container of the pod running, as the kubelet does for a Wrapper pod
// whose wrapper waits for its grant.
func (f *fixture) setWaitingForGrant(name string) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod := f.pod(name)
		pod.Status.Phase = corev1.PodRunning
		pod.Status.ContainerStatuses = nil
		for _, c := range pod.Spec.Containers {
			pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}})
		}
		return suite.Client.Status().Update(f.t.Context(), pod)
	}))
}

// waitStartOnExit is the pod's conditional release, failing the test when it has none.
func (f *fixture) waitStartOnExit(name string) singletonv1.StartOnExit {
	f.t.Helper()
	var cond singletonv1.StartOnExit
	require.Eventually(f.t, func() bool {
		var ok bool
		cond, ok = singletonv1.PodStartOnExit(f.pod(name))
		return ok
	}, wait, tick, "pod %s released on its predecessor's exit", name)
	return cond
}

// removeFinalizer lets a terminating test pod go, as the kubelet's confirmation of the stop (or a force
// deletion) would.
func (f *fixture) removeFinalizer(name string) {
	f.t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}}
	require.NoError(f.t, client.IgnoreNotFound(suite.Client.Patch(f.t.Context(), pod,
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))))
	f.confirmStop(name)
}

// Release on the predecessor's exit: while the released pod is being deleted and the held Wrapper pod
// runs, the controller writes the conditional release (the reserved epoch, the old pod's UID and node)
// on the held pod and tells the grant server; the held pod is not released yet (the invariant checker,
// which counts released pods, sees one), and the singleton says what it waits for. The release is
// completed with the same epoch once the old pod's exit is recorded (the exit report, accepted and
// then written), or once the old pod is gone from a Ready node, or, when it vanished from a node that
// is not Ready, only once that node is fenced.
func TestReleaseOnThePredecessorsExit(t *testing.T) {
	for _, end := range []string{"exit report", "old pod gone", "node not Ready"} {
		t.Run(end, func(t *testing.T) {
			f := newFixture(t)
			watchOverlaps(t, f.ns)
			exits := grant.NewExits()
			var mu sync.Mutex
			var told []*corev1.Pod
			startOperatorWithOptions(t, Options{Exits: exits, Released: func(p *corev1.Pod) {
				mu.Lock()
				defer mu.Unlock()
				told = append(told, p.DeepCopy())
			}}, nil)
			node := "node-a"
			if end == "node not Ready" {
				node = "node-c"
				ensureNode(t, node, true, false)
				t.Cleanup(func() { ensureNode(t, node, true, false) })
			}
			f.createSingleton("db")
			f.createPod("old", releasedAt(1), exitReporting(f), onNode(node))
			require.Eventually(t, func() bool { return f.singleton("db").Status.ActivePodNode == node }, wait, tick)
			f.createPod("new", held(singletonv1.HoldModeWrapper), exitReporting(f))
			f.setWaitingForGrant("new")

			// Not while the old pod may go on running.
			testsupport.NeverWithin(t, time.Second, tick, func() bool {
				_, ok := f.pod("new").Annotations[singletonv1.AnnotationStartOnExit]
				return ok
			}, "no release on exit while the old pod is not being deleted")

			old := f.pod("old")
			require.NoError(t, suite.Client.Delete(t.Context(), old))
			cond := f.waitStartOnExit("new")
			assert.Equal(t, singletonv1.StartOnExit{Epoch: 2, PodUID: old.UID, Node: node}, cond)
			f.neverReleased("new", time.Second)
			ss := f.singleton("db")
			assert.Equal(t, int64(2), ss.Status.Epoch, "the epoch is reserved before the conditional release")
			assert.Equal(t, "new", ss.Status.ActivePod, "the pod that may start at any moment: its disappearance needs fencing")
			assert.Contains(t, ss.Status.Message, "starts the moment every app process of pod old has exited")
			mu.Lock()
			require.NotEmpty(t, told, "the grant server is told of the conditional release")
			assert.Equal(t, cond.String(), told[0].Annotations[singletonv1.AnnotationStartOnExit])
			mu.Unlock()

			switch end {
			case "exit report":
				done := exits.Begin(f.pod("old"))
				f.neverReleased("new", time.Second) // accepted, not recorded: the release is not completed yet
				raw := fmt.Sprintf(`{"metadata":{"annotations":{%q:"main"}}}`, singletonv1.AnnotationExited)
				require.NoError(t, suite.Client.Patch(t.Context(), f.pod("old"), client.RawPatch(types.MergePatchType, []byte(raw))))
				done(nil)
			case "old pod gone":
				f.removeFinalizer("old")
			case "node not Ready":
				ensureNode(t, node, false, false)
				f.removeFinalizer("old") // gone from a node that never confirmed the stop
				ss := f.waitCondition("db", singletonv1.ConditionFencingRequired, metav1.ConditionTrue)
				assert.Contains(t, ss.Status.Message, node)
				f.neverReleased("new", time.Second)
				ensureNode(t, node, false, true) // fenced: tainted out-of-service
			}
			f.waitReleased("new")
			assert.Equal(t, "2", f.pod("new").Annotations[singletonv1.AnnotationEpoch], "completed with the epoch reserved for it")
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				ss := f.singleton("db")
				assert.Equal(c, "new", ss.Status.ActivePod)
				assert.True(c, readinessGateTrue(f.pod("new")))
				if cnd := findCondition(ss, singletonv1.ConditionReady); assert.NotNil(c, cnd) {
					assert.Equal(c, metav1.ConditionTrue, cnd.Status)
				}
			}, wait, tick)
		})
	}
}

// A pod released on its predecessor's exit blocks every other pod, as a released one does: a newer
// held pod is not released beside it, and the StatefulSingleton's deletion waits for its completion.
func TestReleaseOnExitBlocksOthersAndDeletion(t *testing.T) {
	f := newFixture(t)
	watchOverlaps(t, f.ns)
	startOperatorWithOptions(t, Options{Exits: grant.NewExits()}, nil)
	f.createSingleton("db")
	f.createPod("old", releasedAt(1), exitReporting(f))
	f.createPod("new", held(singletonv1.HoldModeWrapper), exitReporting(f))
	f.setWaitingForGrant("new")
	require.NoError(t, suite.Client.Delete(t.Context(), f.pod("old")))
	f.waitStartOnExit("new")

	f.createPod("newer", held(singletonv1.HoldModeWrapper))
	require.NoError(t, suite.Client.Delete(t.Context(), f.singleton("db")))
	f.neverReleased("newer", time.Second)
	assert.False(t, f.singletonGone("db"), "the deletion waits while a pod awaits the completion of its release")

	f.removeFinalizer("old")
	f.waitReleased("new")
	f.neverReleased("newer", time.Second)
}

// A pod released on its predecessor's exit may be granted at any moment, so it is the active pod whose
// disappearance needs fencing: when it vanishes from a node that is not Ready, the next pod waits until
// that node is fenced, even though its own release was never completed in the API.
func TestReleaseOnExitVanishedFromUnreadyNodeNeedsFencing(t *testing.T) {
	f := newFixture(t)
	watchOverlaps(t, f.ns)
	ensureNode(t, "node-d", true, false)
	t.Cleanup(func() { ensureNode(t, "node-d", true, false) })
	startOperatorWithOptions(t, Options{Exits: grant.NewExits()}, nil)
	f.createSingleton("db")
	f.createPod("old", releasedAt(1), exitReporting(f))
	f.createPod("new", held(singletonv1.HoldModeWrapper), exitReporting(f), onNode("node-d"))
	f.setWaitingForGrant("new")
	require.NoError(t, suite.Client.Delete(t.Context(), f.pod("old")))
	f.waitStartOnExit("new")
	require.Eventually(t, func() bool { return f.singleton("db").Status.ActivePodNode == "node-d" }, wait, tick)

	ensureNode(t, "node-d", false, false)
	f.removeFinalizer("new") // force-deleted from the partitioned node: its process may still run there
	raw := fmt.Sprintf(`{"metadata":{"annotations":{%q:"main"}}}`, singletonv1.AnnotationExited)
	require.NoError(t, suite.Client.Patch(t.Context(), f.pod("old"), client.RawPatch(types.MergePatchType, []byte(raw))))
	f.createPod("third", held(singletonv1.HoldModeWrapper))
	ss := f.waitCondition("db", singletonv1.ConditionFencingRequired, metav1.ConditionTrue)
	assert.Contains(t, ss.Status.Message, "node-d")
	f.neverReleased("third", time.Second)

	ensureNode(t, "node-d", false, true)
	f.waitReleased("third")
}

// The predecessor force-deleted from a NotReady node while the cache still shows it terminating: the
// release on its exit then finds it gone in the live list. Gone from a node that never confirmed the
// stop is not an exit, so the candidate waits for fencing as after any vanished pod, and is released
// once the node is tainted out-of-service. (Found by TestSingletonFailures on the local cluster: the
// candidate was released outright, the old pod's node still NotReady.)
func TestReleaseOnExitPredecessorGoneFromUnreadyNodeNeedsFencing(t *testing.T) {
	f := newFixture(t)
	watchOverlaps(t, f.ns)
	ensureNode(t, "node-f", true, false)
	t.Cleanup(func() { ensureNode(t, "node-f", true, false) })
	lag := &terminatingPodCache{}
	startOperatorWithOptions(t, Options{Exits: grant.NewExits(), Overrides: opsutil.Overrides{Cache: func(cached client.Reader) client.Reader {
		lag.Reader = cached
		return lag
	}}}, nil)
	f.createSingleton("db")
	f.createPod("old", releasedAt(1), exitReporting(f), onNode("node-f"))
	require.Eventually(t, func() bool { return f.singleton("db").Status.ActivePodNode == "node-f" }, wait, tick)
	f.createPod("new", held(singletonv1.HoldModeWrapper), exitReporting(f))
	f.setWaitingForGrant("new")
	ensureNode(t, "node-f", false, false)

	// From now on the cache shows "old" terminating, while the API server has it running, then gone at
	// once (a force deletion): the live list of the release on its exit never sees it terminating.
	raw := []byte(`{"metadata":{"finalizers":null}}`)
	require.NoError(t, suite.Client.Patch(t.Context(), f.pod("old"), client.RawPatch(types.MergePatchType, raw)))
	old := f.pod("old")
	old.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	lag.show(old)
	f.confirmStop("old")
	ss := f.waitCondition("db", singletonv1.ConditionFencingRequired, metav1.ConditionTrue)
	assert.Contains(t, ss.Status.Message, "node-f")
	f.neverReleased("new", time.Second)

	lag.show(nil) // the cache catches up: still no stop confirmed
	f.neverReleased("new", time.Second)
	ensureNode(t, "node-f", false, true)
	f.waitReleased("new")
}

// terminatingPodCache is a cache that keeps showing one pod, as it was given, after the API server
// has removed it: its watch event is late.
type terminatingPodCache struct {
	client.Reader
	mu  sync.Mutex
	pod *corev1.Pod
}

func (c *terminatingPodCache) show(pod *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pod = pod
}

func (c *terminatingPodCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := c.Reader.List(ctx, list, opts...); err != nil {
		return err
	}
	pods, ok := list.(*corev1.PodList)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !ok || c.pod == nil {
		return nil
	}
	o := (&client.ListOptions{}).ApplyOptions(opts)
	if o.Namespace != "" && o.Namespace != c.pod.Namespace || o.LabelSelector != nil && !o.LabelSelector.Matches(labels.Set(c.pod.Labels)) {
		return nil
	}
	for i := range pods.Items {
		if pods.Items[i].UID == c.pod.UID {
			c.pod.DeepCopyInto(&pods.Items[i])
			return nil
		}
	}
	pods.Items = append(pods.Items, *c.pod.DeepCopy())
	return nil
}
