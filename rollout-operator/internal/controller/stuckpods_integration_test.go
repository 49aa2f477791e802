//go:build integration

package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// createControllerRevision plays the StatefulSet controller's ControllerRevision of a new template
// (its creation time is what recreateStuckPods compares pods with).
func (f *fixture) createControllerRevision(name string, revision int64) {
	f.t.Helper()
	require.NoError(f.t, suite.Client.Create(context.Background(), &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: map[string]string{"app": "web"}},
		Revision:   revision,
		Data:       runtime.RawExtension{Raw: []byte(`{"spec":{"template":{"$patch":"replace","spec":{"containers":[{"name":"app","image":"app:` + name + `"}]}}}}`)},
	}))
}

func (f *fixture) podUID(name string) types.UID {
	f.t.Helper()
	pod := &corev1.Pod{}
	if err := suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, pod); err != nil {
		return ""
	}
	return pod.UID
}

// stuckRollout rolls a 3-replica StatefulSet to web-r2, a revision whose pods never become Ready
// (simulated crash loop, which blocks the simulated OrderedReady StatefulSet controller), with recreateStuckPods as given and progressDeadlineSeconds 1: the rollout
// waits on web-2, not Ready on web-r2. It returns the fixture and web-2's UID.
func stuckRollout(t *testing.T, recreate bool) (*fixture, types.UID) {
	f := newFixture(t, 3, 0)
	f.simulateReadiness(100*time.Millisecond, true, "web-r2")
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) {
		pr.Spec.Check.SuccessThreshold = 1
		pr.Spec.RecreateStuckPods = ptr.To(recreate)
		pr.Spec.ProgressDeadlineSeconds = ptr.To[int32](1)
	})
	f.waitPartition(3)
	// web-r2's ControllerRevision is newer than the pods too: only the revision rule keeps web-2.
	time.Sleep(1100 * time.Millisecond)
	f.createControllerRevision("web-r2", 2)
	f.newRevision("web-r2")
	f.waitPartition(2)
	require.Eventually(t, func() bool {
		st := f.rollout().Status.RollingPodStatus
		return st != nil && st.Status == rolloutv1alpha1.StepWaitForPodToBeUpdated && st.Pod == "web-2"
	}, wait, tick, "the rollout waits on web-2")
	return f, f.podUID("web-2")
}

// fixTemplate plays a template fix: a new ControllerRevision, created after every pod, and the
// StatefulSet's update revision pointing at it.
func (f *fixture) fixTemplate(rev string, revision int64) {
	time.Sleep(1100 * time.Millisecond) // creation times have a one-second precision
	f.createControllerRevision(rev, revision)
	f.newRevision(rev)
}

// TestStuckPodIsRecreatedAfterTheTemplateFix: web-2 crash-loops on web-r2 (never Ready). While web-r2
// is the update revision the pod is left alone (the StatefulSet controller would recreate it as it
// is); once the template is fixed (web-r3), the pod, not Ready for longer than
// progressDeadlineSeconds and older than the fix, is deleted (Event StuckPodRecreated, status
// lastStuckPodRecreated), recreated by the StatefulSet controller, and the rollout of web-r3 completes.
func TestStuckPodIsRecreatedAfterTheTemplateFix(t *testing.T) {
	startOperator(t, newFakeChecker(VerdictPass))
	f, uid := stuckRollout(t, true)
	testsupport.NeverWithin(t, 3*time.Second, tick, func() bool { return f.podUID("web-2") != uid },
		"web-2 was deleted while its revision is the update revision")
	f.fixTemplate("web-r3", 3)
	require.Eventually(t, func() bool { return f.podUID("web-2") != uid }, wait, tick, "the stuck pod is recreated")
	pr := f.waitRolledTo("web-r3")
	rec := pr.Status.LastStuckPodRecreated
	require.NotNil(t, rec)
	assert.Equal(t, "web-2", rec.Pod)
	assert.Equal(t, string(uid), rec.UID)
	assert.Equal(t, "web-r2", rec.Revision)
	assert.Equal(t, "web-r3", rec.UpdateRevision)
	assert.GreaterOrEqual(t, rec.NotReadySeconds, int64(1))
	f.waitEventReason("pr", rolloutv1alpha1.EventStuckPodRecreated)
}

// TestStuckPodIsRecreatedAfterARevert: web-2 crash-loops on web-r2, recreated there by the
// StatefulSet controller after both ControllerRevisions existed; the template is then reverted. The
// StatefulSet controller reuses web-r1's ControllerRevision (its number raised to 3, its creation time
// kept, older than web-2) and web-r1 is both the current and the update revision again: the rollout is
// over, but web-2 never returns by itself. The operator deletes it (once), it comes back on web-r1,
// and the partition goes back to replicas.
func TestStuckPodIsRecreatedAfterARevert(t *testing.T) {
	startOperator(t, newFakeChecker(VerdictPass))
	f := newFixture(t, 3, 0)
	f.createControllerRevision("web-r1", 1)
	f.simulateReadiness(100*time.Millisecond, true, "web-r2")
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) {
		pr.Spec.Check.SuccessThreshold = 1
		pr.Spec.RecreateStuckPods = ptr.To(true)
		pr.Spec.ProgressDeadlineSeconds = ptr.To[int32](1)
	})
	f.waitPartition(3)
	time.Sleep(1100 * time.Millisecond) // creation times have a one-second precision
	f.createControllerRevision("web-r2", 2)
	f.newRevision("web-r2")
	f.waitPartition(2)
	// As the StatefulSet controller does it: web-2 deleted and created again on web-r2, after both
	// ControllerRevisions.
	time.Sleep(1100 * time.Millisecond)
	first := f.podUID("web-2")
	require.NoError(t, suite.Client.Delete(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-2", Namespace: f.ns}}))
	require.Eventually(t, func() bool {
		pod := &corev1.Pod{}
		err := suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "web-2"}, pod)
		return err == nil && pod.UID != first && pod.Labels[appsv1.ControllerRevisionHashLabelKey] == "web-r2"
	}, wait, tick, "web-2 back on web-r2")
	uid := f.podUID("web-2")
	testsupport.NeverWithin(t, 3*time.Second, tick, func() bool { return f.podUID("web-2") != uid },
		"web-2 was deleted while its revision is the update revision")

	f.reuseRevision("web-r1", 3)
	f.newRevision("web-r1")
	require.Eventually(t, func() bool { return f.podUID("web-2") != uid }, wait, tick, "the stuck pod is recreated after the revert")
	f.waitPartition(3)
	require.Eventually(t, func() bool {
		pr := f.rollout()
		return pr.Status.Phase == rolloutv1alpha1.PhaseUpdated && strings.HasPrefix(pr.Status.Message, "idle")
	}, wait, tick, "idle on web-r1")
	rec := f.rollout().Status.LastStuckPodRecreated
	require.NotNil(t, rec)
	assert.Equal(t, "web-2", rec.Pod)
	assert.Equal(t, string(uid), rec.UID)
	assert.Equal(t, "web-r2", rec.Revision)
	assert.Equal(t, "web-r1", rec.UpdateRevision)
	f.waitEventReason("pr", rolloutv1alpha1.EventStuckPodRecreated)
	n := 0
	for _, r := range f.eventReasons("pr") {
		if r == rolloutv1alpha1.EventStuckPodRecreated {
			n++
		}
	}
	assert.Equal(t, 1, n, "one stuck pod recreated")
}

// reuseRevision plays the StatefulSet controller's answer to a template reverted to the one of
// ControllerRevision name: it raises that revision's number to n and keeps its creation time.
func (f *fixture) reuseRevision(name string, n int64) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rev := &appsv1.ControllerRevision{}
		if err := suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, rev); err != nil {
			return err
		}
		rev.Revision = n
		return suite.Client.Update(context.Background(), rev)
	}))
}

// TestStuckPodIsLeftAloneWithoutRecreateStuckPods: the same fix with recreateStuckPods false deletes
// nothing: the rollout of web-r3 waits for web-2 (as the seed does).
func TestStuckPodIsLeftAloneWithoutRecreateStuckPods(t *testing.T) {
	startOperator(t, newFakeChecker(VerdictPass))
	f, uid := stuckRollout(t, false)
	f.fixTemplate("web-r3", 3)
	require.Eventually(t, func() bool { return f.rollout().Status.UpdateRevision == "web-r3" }, wait, tick)
	testsupport.NeverWithin(t, 4*time.Second, tick, func() bool { return f.podUID("web-2") != uid }, "web-2 was deleted")
	pr := f.rollout()
	assert.Nil(t, pr.Status.LastStuckPodRecreated)
	assert.NotEqual(t, rolloutv1alpha1.PhaseUpdated, pr.Status.Phase)
	assert.NotContains(t, f.eventReasons("pr"), rolloutv1alpha1.EventStuckPodRecreated)
}

// TestPodDeletePolicyConfinesTheOperator applies deploy/rollout-operator.yaml's RBAC and policies and
// deletes pods with server-side dry-run as the operator's ServiceAccount: a pod a StatefulSet
// controls, in a user namespace, is admitted (recreateStuckPods' delete); the same in kube-system, a
// bare pod, and a pod another kind controls are refused by the pod-deletes policy.
func TestPodDeletePolicyConfinesTheOperator(t *testing.T) {
	ctx := t.Context()
	op, err := client.New(asShippedOperator(t), client.Options{Scheme: suite.Scheme})
	require.NoError(t, err)
	f := newFixture(t, 1, 0)
	system := managedStatefulSet(t, "kube-system", "pods-"+strings.ToLower(f.ns))
	mkPod := func(ns, name string, owner *metav1.OwnerReference) *corev1.Pod {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		if owner != nil {
			pod.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		require.NoError(t, suite.Client.Create(ctx, pod))
		return pod
	}
	systemPod := mkPod("kube-system", system.Name+"-0", metav1.NewControllerRef(system, appsv1.SchemeGroupVersion.WithKind("StatefulSet")))
	bare := mkPod(f.ns, "bare", nil)
	notController := mkPod(f.ns, "owned-not-controller", &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: f.sts().UID})
	byConfigMap := mkPod(f.ns, "by-configmap", &metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "8d4c0f6e-0000-4000-8000-000000000009", Controller: ptr.To(true)})
	del := func(p *corev1.Pod) func(c client.Client) error {
		return func(c client.Client) error {
			uid := p.UID
			return c.Delete(ctx, p.DeepCopy(), client.Preconditions{UID: &uid}, client.DryRunAll)
		}
	}
	own := &corev1.Pod{}
	require.NoError(t, suite.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "web-0"}, own))
	require.Eventually(t, func() bool {
		err := del(systemPod)(op)
		return err != nil && strings.Contains(err.Error(), "pod-deletes")
	}, testsupport.PolicyWait+10*time.Second, 100*time.Millisecond, "the pod-deletes policy never took effect")
	testsupport.RequirePolicyWrites(t, operatorUser, op, suite.Client,
		[]testsupport.PolicyWrite{{Name: "delete a pod its StatefulSet controls (recreateStuckPods)", Write: del(own)}},
		[]testsupport.PolicyWrite{
			{Name: "delete a kube-system pod", Write: del(systemPod)},
			{Name: "delete a bare pod", Write: del(bare)},
			{Name: "delete a pod a StatefulSet owns but does not control", Write: del(notController)},
			{Name: "delete a pod another kind controls", Write: del(byConfigMap)},
		})
}
