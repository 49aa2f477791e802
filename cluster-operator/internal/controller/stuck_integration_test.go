//go:build integration

package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// TestStuckPodsAreReportedNotReplaced: a pod Pending past pendingThresholdSeconds because its claim
// cannot bind, or because the scheduler finds no node for it, is kept and reported (Stalled, Ready=False,
// one Warning Event naming the pod, the claim and why) instead of replaced by a new identity with new
// claims again and again. A pod held by its own bound claims' volumes is still replaced, and a claim
// that never bound is not left behind when its identity is retired.
func TestStuckPodsAreReportedNotReplaced(t *testing.T) {
	startOperator(t, nil)
	stuckFor := func(name string, mods ...func(*clusterv1alpha1.StatefulCluster)) func(*clusterv1alpha1.StatefulCluster) {
		return func(sc *clusterv1alpha1.StatefulCluster) {
			sc.Spec.PendingThresholdSeconds = ptr.To[int32](1)
			sc.Spec.Template.Annotations = map[string]string{holdAnnotation: name}
			for _, m := range mods {
				m(sc)
			}
		}
	}

	t.Run("claim-cannot-bind", func(t *testing.T) {
		f := newFixture(t)
		// The Event below stands for the PersistentVolume controller's, which it records at once; the
		// test records it only once the claim exists, so the threshold leaves room for that even on a
		// loaded machine (with 1 s, a CI run under load judged the pod before the Event existed).
		f.statefulCluster("c", 1, stuckFor("claimpending", withClaims, func(sc *clusterv1alpha1.StatefulCluster) {
			sc.Spec.PendingThresholdSeconds = ptr.To[int32](5)
		}))
		var claim *corev1.PersistentVolumeClaim
		require.Eventually(t, func() bool { claim = f.claims("c")["c-data-0"]; return claim != nil }, wait, tick)
		// What the PersistentVolume controller says about a claim without a StorageClass.
		pvEvent(t, claim, "FailedBinding", "no persistent volumes available for this claim and no storage class is set")

		const why = "FailedBinding: no persistent volumes available for this claim and no storage class is set"
		require.Eventually(t, func() bool {
			c := meta.FindStatusCondition(f.get("c").Status.Conditions, clusterv1alpha1.ConditionStalled)
			return c != nil && c.Status == metav1.ConditionTrue && c.Reason == clusterv1alpha1.ReasonClaimPending &&
				strings.Contains(c.Message, "c-0") && strings.Contains(c.Message, "c-data-0") && strings.Contains(c.Message, why)
		}, wait, tick, "Stalled=True ClaimPending naming the pod, the claim and the PersistentVolume controller's reason")
		ready := meta.FindStatusCondition(f.get("c").Status.Conditions, clusterv1alpha1.ConditionReady)
		require.NotNil(t, ready)
		assert.Equal(t, metav1.ConditionFalse, ready.Status)
		assert.Equal(t, clusterv1alpha1.ReasonClaimPending, ready.Reason)

		// Later: still the same identity and the same claim.
		testsupport.NeverWithin(t, 4*time.Second, tick, func() bool {
			return f.pods("c")["c-1"] != nil || len(f.claims("c")) != 1
		}, "a pod whose claim cannot bind was replaced")
		sc := f.get("c")
		assert.EqualValues(t, 1, sc.Status.NextIdentity)
		assert.Empty(t, sc.Status.Identities)

		// One Warning Event (not one per reconcile) says why, about the StatefulCluster and the pod.
		evs := testsupport.Events(t, suite.Client, f.ns, "StatefulCluster", "c", clusterv1alpha1.ReasonClaimPending)
		require.Len(t, evs, 1)
		assert.Nil(t, evs[0].Series, "recorded once, not repeated into a series")
		assert.Equal(t, corev1.EventTypeWarning, evs[0].Type)
		assert.Contains(t, evs[0].Note, "c-0")
		assert.Contains(t, evs[0].Note, "c-data-0")
		assert.Contains(t, evs[0].Note, why)
		require.NotNil(t, evs[0].Related)
		assert.Equal(t, "c-0", evs[0].Related.Name)

		// Once volumes can be provisioned, the same pod starts and the StatefulCluster is Ready.
		p := f.pod("c-0")
		delete(p.Annotations, holdAnnotation)
		require.NoError(t, suite.Client.Update(t.Context(), p))
		f.waitPods("c", "c-0")
		require.Eventually(t, func() bool {
			st := f.get("c").Status
			return meta.IsStatusConditionTrue(st.Conditions, clusterv1alpha1.ConditionReady) &&
				meta.FindStatusCondition(st.Conditions, clusterv1alpha1.ConditionStalled) == nil
		}, wait, tick, "Ready, no longer Stalled")
	})

	t.Run("never-bound-claims-are-not-left-behind", func(t *testing.T) {
		f := newFixture(t)
		f.statefulCluster("n", 1, stuckFor("claimpending", withClaims))
		require.Eventually(t, func() bool {
			return meta.IsStatusConditionTrue(f.get("n").Status.Conditions, clusterv1alpha1.ConditionStalled)
		}, wait, tick)
		// The user deletes the stuck pod: a new identity, and the old claim (no volume, no data) goes,
		// although whenReplaced is Retain.
		require.NoError(t, suite.Client.Delete(t.Context(), f.pod("n-0")))
		require.Eventually(t, func() bool {
			claims := f.claims("n")
			old := claims["n-data-0"]
			return claims["n-data-1"] != nil && (old == nil || !old.DeletionTimestamp.IsZero())
		}, wait, tick, "never-bound claim of the retired identity deleted")
		assert.Empty(t, f.get("n").Status.RetiredClaims)
	})

	t.Run("unschedulable", func(t *testing.T) {
		f := newFixture(t)
		f.statefulCluster("u", 1, stuckFor("unschedulable"))
		require.Eventually(t, func() bool {
			c := meta.FindStatusCondition(f.get("u").Status.Conditions, clusterv1alpha1.ConditionStalled)
			return c != nil && c.Status == metav1.ConditionTrue && c.Reason == clusterv1alpha1.ReasonUnschedulable &&
				strings.Contains(c.Message, "u-0") && strings.Contains(c.Message, "Insufficient cpu")
		}, wait, tick, "Stalled=True Unschedulable with the scheduler's message")
		testsupport.NeverWithin(t, 3*time.Second, tick, func() bool { return f.pods("u")["u-1"] != nil }, "an unschedulable pod was replaced")
		require.Eventually(t, func() bool {
			return len(testsupport.Events(t, suite.Client, f.ns, "StatefulCluster", "u", clusterv1alpha1.ReasonUnschedulable)) == 1
		}, wait, tick)
	})

	t.Run("held-by-its-own-volumes-is-replaced", func(t *testing.T) {
		f := newFixture(t)
		f.statefulCluster("v", 1, stuckFor("volumeconflict", withClaims))
		// Its bound claim's volume pins it where it cannot run: a new identity with a new claim can run
		// elsewhere, so it is replaced as before, and its claim (it holds data) is retained.
		require.Eventually(t, func() bool {
			sc := f.get("v")
			return sc.Status.NextIdentity >= 2 && ledgerReasons(sc)["v-0"] == clusterv1alpha1.RetiredPending
		}, wait, tick)
		require.Eventually(t, func() bool {
			c := f.claims("v")["v-data-0"]
			return c != nil && c.DeletionTimestamp.IsZero() && c.Labels[clusterv1alpha1.RetiredLabel] == "true"
		}, wait, tick, "bound claim of the replaced identity retained")
		assert.Nil(t, meta.FindStatusCondition(f.get("v").Status.Conditions, clusterv1alpha1.ConditionStalled))
	})
}

// pvEvent records an Event about a claim as the PersistentVolume controller does.
func pvEvent(t *testing.T, claim *corev1.PersistentVolumeClaim, reason, message string) {
	t.Helper()
	now := metav1.Now()
	require.NoError(t, suite.Client.Create(t.Context(), &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: claim.Name + ".", Namespace: claim.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: claim.Namespace,
			Name: claim.Name, UID: claim.UID},
		Reason: reason, Message: message, Type: corev1.EventTypeWarning, Count: 1,
		FirstTimestamp: now, LastTimestamp: now, Source: corev1.EventSource{Component: "persistentvolume-controller"},
	}))
}
