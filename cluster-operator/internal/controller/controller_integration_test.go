//go:build integration

package controller

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// TestNamingNeverReused: pods are <name>-<n> with n strictly increasing; a replaced identity is never
// reused, also after an operator restart that lost the status (high-water mark and ledger).
func TestNamingNeverReused(t *testing.T) {
	f := newFixture(t)
	stop := startOperator(t, nil)
	f.statefulCluster("x", 3, withClaims)
	f.waitPods("x", "x-0", "x-1", "x-2")
	assert.EqualValues(t, 3, f.get("x").Status.NextIdentity)

	require.NoError(t, suite.Client.Delete(t.Context(), f.pod("x-1")))
	f.waitPods("x", "x-0", "x-2", "x-3")
	require.Eventually(t, func() bool { return ledgerReasons(f.get("x"))["x-1"] == clusterv1alpha1.RetiredDeleted }, wait, tick)

	// The operator dies, the status is lost (reset as by a restore), another pod is deleted meanwhile.
	stop()
	sc := f.get("x")
	sc.Status = clusterv1alpha1.StatefulClusterStatus{}
	require.NoError(t, suite.Client.Status().Update(t.Context(), sc))
	require.NoError(t, suite.Client.Delete(t.Context(), f.pod("x-3")))
	require.Eventually(t, func() bool { return f.pods("x")["x-3"] == nil }, wait, tick)
	startOperator(t, nil)
	// x-3's claim (kept, since the default whenReplaced is Retain) still tells that x-3 was used.
	f.waitPods("x", "x-0", "x-2", "x-4")
	assert.EqualValues(t, 5, f.get("x").Status.NextIdentity)
	require.Eventually(t, func() bool {
		c := f.claims("x")
		return c["x-data-1"] != nil && c["x-data-1"].Labels[clusterv1alpha1.RetiredLabel] == "true" &&
			c["x-data-3"] != nil && c["x-data-3"].Labels[clusterv1alpha1.RetiredLabel] == "true"
	}, wait, tick, "claims of retired identities labelled retired")
	require.Eventually(t, func() bool { return len(f.get("x").Status.RetiredClaims) == 2 }, wait, tick)

	// kubectl scale works through the scale subresource.
	scale := &autoscalingv1.Scale{}
	require.NoError(t, suite.Client.SubResource("scale").Get(t.Context(), f.get("x"), scale))
	assert.EqualValues(t, 3, scale.Status.Replicas)
	assert.Contains(t, scale.Status.Selector, "app=x")
	scale.Spec.Replicas = 4
	require.NoError(t, suite.Client.SubResource("scale").Update(t.Context(), f.get("x"), client.WithSubResourceBody(scale)))
	f.waitPods("x", "x-0", "x-2", "x-4", "x-5")
}

// TestTemplateFidelity: template labels, annotations and volumes stay; a claim volume is added;
// hostname and subdomain come from serviceName.
func TestTemplateFidelity(t *testing.T) {
	f := newFixture(t)
	startOperator(t, nil)
	f.statefulCluster("web", 1, withClaims, func(sc *clusterv1alpha1.StatefulCluster) {
		sc.Spec.ServiceName = "web-headless"
		sc.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"front"}}}
		sc.Spec.Template.Labels["foo"] = "bar"
		sc.Spec.Template.Labels["tier"] = "front"
		sc.Spec.Template.Annotations = map[string]string{"note": "kept"}
		sc.Spec.Template.Spec.Volumes = []corev1.Volume{
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
			{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		}
		sc.Spec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "config", MountPath: "/etc/cfg"}, {Name: "data", MountPath: "/data"}}
	})
	f.waitPods("web", "web-0")
	pod := f.pod("web-0")
	assert.Equal(t, "bar", pod.Labels["foo"])
	assert.Equal(t, "web", pod.Labels["app"])
	assert.Equal(t, "web-0", pod.Labels[clusterv1alpha1.IdentityLabel])
	assert.Equal(t, "kept", pod.Annotations["note"])
	assert.Equal(t, "web-0", pod.Spec.Hostname)
	assert.Equal(t, "web-headless", pod.Spec.Subdomain)
	require.Len(t, pod.Spec.Volumes, 2)
	assert.Equal(t, "config", pod.Spec.Volumes[0].Name)
	assert.NotNil(t, pod.Spec.Volumes[0].ConfigMap)
	assert.Equal(t, "data", pod.Spec.Volumes[1].Name)
	require.NotNil(t, pod.Spec.Volumes[1].PersistentVolumeClaim, "the claim volume replaces the template's volume of the same name")
	assert.Equal(t, "web-data-0", pod.Spec.Volumes[1].PersistentVolumeClaim.ClaimName)
	ref := metav1.GetControllerOf(pod)
	require.NotNil(t, ref)
	assert.Equal(t, "StatefulCluster", ref.Kind)
	claim := f.claims("web")["web-data-0"]
	require.NotNil(t, claim)
	assert.Equal(t, "web-0", claim.Labels[clusterv1alpha1.IdentityLabel])
	assert.Empty(t, claim.OwnerReferences, "whenDeleted=Retain: the claim outlives the StatefulCluster")

	require.Eventually(t, func() bool {
		sc := f.get("web")
		return sc.Status.ReadyReplicas == 1 && sc.Status.ObservedGeneration == sc.Generation &&
			meta.IsStatusConditionTrue(sc.Status.Conditions, clusterv1alpha1.ConditionReady) &&
			meta.IsStatusConditionTrue(sc.Status.Conditions, clusterv1alpha1.ConditionAvailable)
	}, wait, tick, "status Ready")
}

// TestAdoptionAndOwnership: a matching orphan is adopted and counted; a matching pod controlled by
// something else is never counted or touched.
func TestAdoptionAndOwnership(t *testing.T) {
	f := newFixture(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other-controller", Namespace: f.ns}}
	require.NoError(t, suite.Client.Create(t.Context(), cm))
	orphan := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "legacy-3f2a9c1b", Namespace: f.ns, Labels: map[string]string{"app": "legacy"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "app:v1"}}}}
	foreign := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: f.ns, Labels: map[string]string{"app": "legacy"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID, Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "app:v1"}}}}
	// An orphan that carries the operator's label (one a StatefulCluster deleted with --cascade=orphan
	// left) is in the cache, found there under "no controller" (indexPodController).
	labelled := orphan.DeepCopy()
	labelled.ObjectMeta = metav1.ObjectMeta{Name: "legacy-labelled", Namespace: f.ns,
		Labels: map[string]string{"app": "legacy", clusterv1alpha1.ClusterNameLabel: "legacy"}}
	require.NoError(t, suite.Client.Create(t.Context(), orphan))
	require.NoError(t, suite.Client.Create(t.Context(), labelled))
	require.NoError(t, suite.Client.Create(t.Context(), foreign))

	startOperator(t, nil)
	f.statefulCluster("legacy", 3)
	require.Eventually(t, func() bool {
		p := f.pods("legacy")["legacy-3f2a9c1b"]
		return p != nil && metav1.GetControllerOf(p) != nil && metav1.GetControllerOf(p).Kind == "StatefulCluster"
	}, wait, tick, "orphan adopted")
	f.waitPods("legacy", "legacy-3f2a9c1b", "legacy-labelled", "legacy-0")
	require.Equal(t, "StatefulCluster", metav1.GetControllerOf(f.pod("legacy-labelled")).Kind, "labelled orphan adopted")

	// An orphan without the operator's label is not in the operator's cache (CacheOptions): it is
	// found by the next reconcile's uncached list, here the one a scale-up starts, and it fills the new
	// replica instead of a new pod.
	late := orphan.DeepCopy()
	late.ObjectMeta = metav1.ObjectMeta{Name: "legacy-late", Namespace: f.ns, Labels: map[string]string{"app": "legacy"}}
	require.NoError(t, suite.Client.Create(t.Context(), late))
	f.update("legacy", func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.Replicas = ptr.To[int32](4) })
	f.waitPods("legacy", "legacy-3f2a9c1b", "legacy-labelled", "legacy-0", "legacy-late")
	require.Equal(t, "StatefulCluster", metav1.GetControllerOf(f.pod("legacy-late")).Kind, "late orphan adopted")

	f.update("legacy", func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.Replicas = ptr.To[int32](0) })
	require.Eventually(t, func() bool { return len(f.liveNames("legacy")) == 0 }, wait, tick)
	testsupport.NeverWithin(t, time.Second, tick, func() bool {
		p := &corev1.Pod{}
		err := suite.Client.Get(t.Context(), client.ObjectKeyFromObject(foreign), p)
		return err != nil || !p.DeletionTimestamp.IsZero() || metav1.GetControllerOf(p).Kind != "ConfigMap"
	}, "foreign pod touched")
	assert.EqualValues(t, 0, f.get("legacy").Status.Replicas)
}

// TestRemovingTheLabelDetachesAPod: a member whose operator label is removed leaves the operator's cache
// and the set: its identity is replaced by a new one, never reused, and the detached pod (still owned, so
// deleted with the StatefulCluster) is neither deleted nor counted, nor is its identity's claim retired.
func TestRemovingTheLabelDetachesAPod(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	f.statefulCluster("d", 2, withClaims)
	f.waitPods("d", "d-0", "d-1")
	pod := f.pod("d-0")
	patch := client.MergeFrom(pod.DeepCopy())
	delete(pod.Labels, clusterv1alpha1.ClusterNameLabel)
	require.NoError(t, suite.Client.Patch(t.Context(), pod, patch))
	f.waitPods("d", "d-1", "d-2")
	testsupport.NeverWithin(t, time.Second, tick, func() bool {
		p := f.pod("d-0")
		return !p.DeletionTimestamp.IsZero() || f.claims("d")["d-data-0"].Labels[clusterv1alpha1.RetiredLabel] == "true"
	}, "the detached pod deleted or its claim retired")
	assert.EqualValues(t, 2, f.get("d").Status.Replicas, "the detached pod is not counted")
}

// TestReplacementRules: Failed, unhealthy after having been Ready, Pending too long, node NotReady
// past the tolerance (the old pod stays Terminating and stops counting), node out of service.
func TestReplacementRules(t *testing.T) {
	startOperator(t, nil)

	t.Run("failed", func(t *testing.T) {
		f := newFixture(t)
		f.statefulCluster("f", 2)
		f.waitPods("f", "f-0", "f-1")
		f.setPodStatus("f-0", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })
		f.waitPods("f", "f-1", "f-2")
		assert.Equal(t, clusterv1alpha1.RetiredFailed, ledgerReasons(f.get("f"))["f-0"])
	})

	t.Run("unhealthy-after-ready", func(t *testing.T) {
		f := newFixture(t)
		f.statefulCluster("u", 2, func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.UnhealthyThresholdSeconds = ptr.To[int32](3) })
		f.waitPods("u", "u-0", "u-1")
		// Not Ready for 1 s: within the threshold, untouched (measured from lastTransitionTime).
		f.setPodStatus("u-0", func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}}
		})
		testsupport.NeverWithin(t, time.Second, tick, func() bool { return f.pods("u")["u-2"] != nil }, "replaced before the threshold")
		f.waitPods("u", "u-1", "u-2")
		assert.Equal(t, clusterv1alpha1.RetiredUnhealthy, ledgerReasons(f.get("u"))["u-0"])
	})

	t.Run("never-ready-is-kept-without-startup-threshold", func(t *testing.T) {
		f := newFixture(t)
		f.statefulCluster("s", 1, func(sc *clusterv1alpha1.StatefulCluster) {
			sc.Spec.UnhealthyThresholdSeconds = ptr.To[int32](0)
			sc.Spec.Template.Annotations = map[string]string{holdAnnotation: "notready"}
		})
		require.Eventually(t, func() bool { p := f.pods("s")["s-0"]; return p != nil && p.Status.Phase == corev1.PodRunning }, wait, tick)
		testsupport.NeverWithin(t, 2*time.Second, tick, func() bool { return f.pods("s")["s-1"] != nil }, "never-Ready pod replaced")
	})

	t.Run("pending", func(t *testing.T) {
		f := newFixture(t)
		f.statefulCluster("p", 2, func(sc *clusterv1alpha1.StatefulCluster) {
			sc.Spec.PendingThresholdSeconds = ptr.To[int32](2)
			sc.Spec.Template.Annotations = map[string]string{holdAnnotation: "pending"}
		})
		// Unschedulable pods are replaced past the threshold, each on its own, again and again, and
		// never block the reconcile (the Ledger fills, the high-water mark grows).
		require.Eventually(t, func() bool {
			sc := f.get("p")
			return sc.Status.NextIdentity >= 4 && ledgerReasons(sc)["p-0"] == clusterv1alpha1.RetiredPending &&
				ledgerReasons(sc)["p-1"] == clusterv1alpha1.RetiredPending
		}, wait, tick)
		// Scaling still works while pods are stuck.
		f.update("p", func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.Replicas = ptr.To[int32](3) })
		require.Eventually(t, func() bool { return len(f.liveNames("p")) == 3 }, wait, tick)
	})

	t.Run("node-not-ready", func(t *testing.T) {
		f := newFixture(t)
		f.statefulCluster("n", 2, func(sc *clusterv1alpha1.StatefulCluster) {
			sc.Spec.NodeLossToleranceSeconds = ptr.To[int32](2)
			sc.Spec.Template.Annotations = map[string]string{"test.statefulops.dev/node": "node-b"}
		})
		f.waitPods("n", "n-0", "n-1")
		require.NoError(t, setNode(t.Context(), "node-b", false, false))
		t.Cleanup(func() { _ = setNode(context.Background(), "node-b", true, false) })
		// New identities on the lost node stay Pending (its "kubelet" is gone) but are created.
		require.Eventually(t, func() bool {
			pods := f.pods("n")
			return pods["n-2"] != nil && pods["n-3"] != nil
		}, wait, tick, "replacements created")
		pods := f.pods("n")
		require.NotNil(t, pods["n-0"], "old pod still there, Terminating: no force delete")
		assert.False(t, pods["n-0"].DeletionTimestamp.IsZero())
		sc := f.get("n")
		assert.Equal(t, clusterv1alpha1.RetiredNodeLost, ledgerReasons(sc)["n-0"])
		require.Eventually(t, func() bool { return f.get("n").Status.Replicas == 2 }, wait, tick, "terminating pods on the lost node do not count")
	})

	t.Run("node-out-of-service", func(t *testing.T) {
		f := newFixture(t)
		f.statefulCluster("o", 1, func(sc *clusterv1alpha1.StatefulCluster) {
			sc.Spec.NodeLossToleranceSeconds = ptr.To[int32](600)
			sc.Spec.Template.Annotations = map[string]string{"test.statefulops.dev/node": "node-b"}
		})
		f.waitPods("o", "o-0")
		require.NoError(t, setNode(t.Context(), "node-b", false, true))
		t.Cleanup(func() { _ = setNode(context.Background(), "node-b", true, false) })
		require.Eventually(t, func() bool { return f.pods("o")["o-1"] != nil }, wait, tick, "replaced at once despite a 600 s tolerance")
	})
}

// TestRetentionPolicies: whenReplaced Delete and Retain, whenScaled, whenDeleted.
func TestRetentionPolicies(t *testing.T) {
	startOperator(t, nil)
	gone := func(c *corev1.PersistentVolumeClaim) bool { return c == nil || !c.DeletionTimestamp.IsZero() }

	t.Run("whenReplaced-delete-whenScaled-retain", func(t *testing.T) {
		f := newFixture(t)
		f.statefulCluster("r", 2, withClaims, func(sc *clusterv1alpha1.StatefulCluster) {
			sc.Spec.PersistentVolumeClaimRetentionPolicy = &clusterv1alpha1.PersistentVolumeClaimRetentionPolicy{
				WhenReplaced: clusterv1alpha1.DeleteClaimRetentionPolicy, WhenScaled: clusterv1alpha1.RetainClaimRetentionPolicy}
		})
		f.waitPods("r", "r-0", "r-1")
		f.setPodStatus("r-0", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })
		f.waitPods("r", "r-1", "r-2")
		require.Eventually(t, func() bool { return gone(f.claims("r")["r-data-0"]) }, wait, tick, "replaced identity's claim deleted")
		f.update("r", func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.Replicas = ptr.To[int32](1) })
		f.waitPods("r", "r-1")
		require.Eventually(t, func() bool {
			c := f.claims("r")["r-data-2"]
			return c != nil && c.Labels[clusterv1alpha1.RetiredLabel] == "true"
		}, wait, tick, "scaled-down identity's claim retained")
		require.Eventually(t, func() bool {
			st := f.get("r").Status
			return len(st.RetiredClaims) == 1 && st.RetiredClaims[0].Identity == "r-2"
		}, wait, tick)
	})

	t.Run("whenScaled-delete-whenDeleted-delete", func(t *testing.T) {
		f := newFixture(t)
		f.statefulCluster("d", 2, withClaims, func(sc *clusterv1alpha1.StatefulCluster) {
			sc.Spec.PersistentVolumeClaimRetentionPolicy = &clusterv1alpha1.PersistentVolumeClaimRetentionPolicy{
				WhenScaled: clusterv1alpha1.DeleteClaimRetentionPolicy, WhenDeleted: clusterv1alpha1.DeleteClaimRetentionPolicy}
		})
		f.waitPods("d", "d-0", "d-1")
		claim := f.claims("d")["d-data-0"]
		require.NotNil(t, claim)
		require.Len(t, claim.OwnerReferences, 1, "whenDeleted=Delete: owned by the StatefulCluster")
		f.update("d", func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.Replicas = ptr.To[int32](1) })
		f.waitPods("d", "d-0")
		require.Eventually(t, func() bool { return gone(f.claims("d")["d-data-1"]) }, wait, tick)
		// whenReplaced is Retain (default): a replaced identity's claim stays, labelled.
		require.NoError(t, suite.Client.Delete(t.Context(), f.pod("d-0")))
		f.waitPods("d", "d-2")
		require.Eventually(t, func() bool {
			c := f.claims("d")["d-data-0"]
			return c != nil && c.Labels[clusterv1alpha1.RetiredLabel] == "true"
		}, wait, tick)
		// Switching whenDeleted to Retain releases every claim.
		f.update("d", func(sc *clusterv1alpha1.StatefulCluster) {
			sc.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted = clusterv1alpha1.RetainClaimRetentionPolicy
		})
		require.Eventually(t, func() bool { return f.claimsReleased("d") }, wait, tick, "claims released")
	})
}

// TestRollingUpdate: a template change replaces pods with new identities of the new revision, within
// maxUnavailable/maxSurge, above the partition; revisions are recorded and history truncated.
func TestRollingUpdate(t *testing.T) {
	startOperator(t, nil)
	image := func(img string) func(*clusterv1alpha1.StatefulCluster) {
		return func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.Template.Spec.Containers[0].Image = img }
	}
	waitRolled := func(f *fixture, name string, n int) *clusterv1alpha1.StatefulCluster {
		t.Helper()
		var sc *clusterv1alpha1.StatefulCluster
		require.Eventually(t, func() bool {
			sc = f.get(name)
			return sc.Status.CurrentRevision == sc.Status.UpdateRevision && sc.Status.UpdatedReplicas == int32(n) &&
				sc.Status.ReadyReplicas == int32(n) && sc.Status.ObservedGeneration == sc.Generation
		}, wait, tick, "update complete")
		return sc
	}

	t.Run("maxUnavailable-1", func(t *testing.T) {
		f := newFixture(t)
		f.statefulCluster("a", 3)
		f.waitPods("a", "a-0", "a-1", "a-2")
		rev1 := f.get("a").Status.UpdateRevision
		f.update("a", image("app:v2"))
		sc := waitRolled(f, "a", 3)
		assert.NotEqual(t, rev1, sc.Status.UpdateRevision)
		f.waitPods("a", "a-3", "a-4", "a-5")
		for _, p := range f.pods("a") {
			assert.Equal(t, "app:v2", p.Spec.Containers[0].Image)
			assert.Equal(t, sc.Status.UpdateRevision, p.Labels[clusterv1alpha1.RevisionLabel])
		}
		reasons := ledgerReasons(sc)
		for _, old := range []string{"a-0", "a-1", "a-2"} {
			assert.Equal(t, clusterv1alpha1.RetiredUpdated, reasons[old])
		}
		assert.LessOrEqual(t, f.maxLiveOf("a"), 3, "no surge with maxSurge 0")
		// Rollback: back to v1 reuses the first revision.
		f.update("a", image("app:v1"))
		sc = waitRolled(f, "a", 3)
		assert.Equal(t, rev1, sc.Status.UpdateRevision)
	})

	t.Run("maxSurge-1-maxUnavailable-0", func(t *testing.T) {
		f := newFixture(t)
		f.statefulCluster("s", 3, func(sc *clusterv1alpha1.StatefulCluster) {
			sc.Spec.UpdateStrategy.RollingUpdate = &clusterv1alpha1.RollingUpdateStatefulClusterStrategy{
				MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromInt32(1))}
		})
		f.waitPods("s", "s-0", "s-1", "s-2")
		f.update("s", image("app:v2"))
		sc := waitRolled(f, "s", 3)
		if len(sc.Status.Identities) > 3 {
			for _, rec := range sc.Status.Identities[:8] {
				t.Logf("ledger: %s %s %s", rec.Name, rec.Reason, rec.Message)
			}
		}
		f.waitPods("s", "s-3", "s-4", "s-5")
		t.Logf("max live pods during the surge update: %d (bound 4)", f.maxLiveOf("s"))
		assert.LessOrEqual(t, f.maxLiveOf("s"), 4)
	})

	t.Run("partition", func(t *testing.T) {
		f := newFixture(t)
		f.statefulCluster("p", 3, func(sc *clusterv1alpha1.StatefulCluster) {
			sc.Spec.UpdateStrategy.RollingUpdate = &clusterv1alpha1.RollingUpdateStatefulClusterStrategy{Partition: ptr.To[int32](2)}
		})
		f.waitPods("p", "p-0", "p-1", "p-2")
		f.update("p", image("app:v2"))
		f.waitPods("p", "p-0", "p-1", "p-3")
		testsupport.NeverWithin(t, time.Second, tick, func() bool { return len(f.pods("p")) != 3 }, "more pods updated than the partition allows")
		assert.Equal(t, "app:v1", f.pod("p-0").Spec.Containers[0].Image)
		assert.Equal(t, "app:v2", f.pod("p-3").Spec.Containers[0].Image)
		// A kept pod that fails is replaced on the current revision (the partition holds).
		f.setPodStatus("p-0", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })
		f.waitPods("p", "p-1", "p-3", "p-4")
		assert.Equal(t, "app:v1", f.pod("p-4").Spec.Containers[0].Image)
		f.update("p", func(sc *clusterv1alpha1.StatefulCluster) {
			sc.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To[int32](0)
		})
		waitRolled(f, "p", 3)
	})

	t.Run("onDelete-and-history", func(t *testing.T) {
		f := newFixture(t)
		f.statefulCluster("o", 2, func(sc *clusterv1alpha1.StatefulCluster) {
			sc.Spec.UpdateStrategy = clusterv1alpha1.StatefulClusterUpdateStrategy{Type: clusterv1alpha1.OnDeleteStrategyType}
			sc.Spec.RevisionHistoryLimit = ptr.To[int32](1)
		})
		f.waitPods("o", "o-0", "o-1")
		f.update("o", image("app:v2"))
		testsupport.NeverWithin(t, time.Second, tick, func() bool { return len(f.liveNames("o")) != 2 || f.pods("o")["o-0"] == nil },
			"OnDelete: pods changed without a delete")
		require.NoError(t, suite.Client.Delete(t.Context(), f.pod("o-0")))
		f.waitPods("o", "o-1", "o-2")
		assert.Equal(t, "app:v2", f.pod("o-2").Spec.Containers[0].Image)
		assert.Equal(t, clusterv1alpha1.RetiredDeleted, ledgerReasons(f.get("o"))["o-0"])
		for _, img := range []string{"app:v3", "app:v4"} {
			f.update("o", image(img))
		}
		require.Eventually(t, func() bool {
			var revs appsv1.ControllerRevisionList
			_ = suite.Client.List(context.Background(), &revs, client.InNamespace(f.ns))
			// v4 (update), v1 (current, used by o-1), v2 (used by o-2), and at most 1 more of history.
			return len(revs.Items) <= 4 && f.get("o").Status.UpdateRevision != ""
		}, wait, tick, "history truncated")
	})
}

// TestScaleDownOrder: unhealthy pods go first, then the newest identities; scale 0→N→0 never reuses.
func TestScaleDownOrder(t *testing.T) {
	f := newFixture(t)
	startOperator(t, nil)
	f.statefulCluster("x", 3)
	f.waitPods("x", "x-0", "x-1", "x-2")
	f.setPodStatus("x-1", func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}}
	})
	f.update("x", func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.Replicas = ptr.To[int32](2) })
	f.waitPods("x", "x-0", "x-2")
	f.update("x", func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.Replicas = ptr.To[int32](1) })
	f.waitPods("x", "x-0")
	require.Eventually(t, func() bool {
		reasons := ledgerReasons(f.get("x"))
		return reasons["x-1"] == clusterv1alpha1.RetiredScaledDown && reasons["x-2"] == clusterv1alpha1.RetiredScaledDown
	}, wait, tick, "ledger")
	f.update("x", func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.Replicas = ptr.To[int32](3) })
	f.waitPods("x", "x-0", "x-3", "x-4")
}

// TestOrderedReady creates one pod at a time, each Ready before the next.
func TestOrderedReady(t *testing.T) {
	f := newFixture(t)
	startOperator(t, nil)
	f.statefulCluster("o", 3, func(sc *clusterv1alpha1.StatefulCluster) {
		sc.Spec.PodManagementPolicy = clusterv1alpha1.OrderedReadyPodManagement
		sc.Spec.Template.Annotations = map[string]string{holdAnnotation: "notready"}
	})
	require.Eventually(t, func() bool { return f.pods("o")["o-0"] != nil }, wait, tick)
	testsupport.NeverWithin(t, time.Second, tick, func() bool { return len(f.pods("o")) > 1 }, "second pod before the first is Ready")
	f.setPodStatus("o-0", func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	})
	require.Eventually(t, func() bool { return f.pods("o")["o-1"] != nil }, wait, tick)
	assert.Len(t, f.pods("o"), 2)
}

// TestNoOverCreationUnderChurn: a burst of reconcile triggers during a scale-up never creates more
// pods than replicas (expectations + the high-water mark's precondition).
func TestNoOverCreationUnderChurn(t *testing.T) {
	f := newFixture(t)
	startOperator(t, nil)
	f.statefulCluster("c", 20, withClaims)
	// Trigger reconciles: relabel the pods as they appear.
	for i := range 100 {
		for name := range f.pods("c") {
			_ = suite.Client.Patch(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}},
				client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"churn":"`+string(rune('a'+i%26))+`"}}}`)))
		}
	}
	require.Eventually(t, func() bool { return len(f.liveNames("c")) == 20 && f.get("c").Status.ReadyReplicas == 20 }, wait, tick)
	testsupport.NeverWithin(t, time.Second, tick, func() bool { return len(f.pods("c")) != 20 }, "over-creation")
	t.Logf("max live pods: %d (bound 20); claims: %d", f.maxLiveOf("c"), len(f.claims("c")))
	assert.LessOrEqual(t, f.maxLiveOf("c"), 20)
	assert.Len(t, f.claims("c"), 20)
}

// TestInjectedAPIErrors: pod creations that fail leave no claim behind and are retried; a pod whose
// delete keeps failing does not block the others; a failing status write holds creation back.
func TestInjectedAPIErrors(t *testing.T) {
	f := newFixture(t)
	var createFails, statusFails atomic.Int32
	createFails.Store(5)
	blockedDelete := atomic.Value{}
	blockedDelete.Store("")
	funcs := &interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*corev1.Pod); ok && obj.GetNamespace() == f.ns && createFails.Add(-1) >= 0 {
				return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, obj.GetName(), errors.New("injected: denied by admission"))
			}
			return c.Create(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if obj.GetName() == blockedDelete.Load().(string) {
				return apierrors.NewInternalError(errors.New("injected: delete failed"))
			}
			return c.Delete(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if statusFails.Load() > 0 && obj.GetNamespace() == f.ns {
				return apierrors.NewInternalError(errors.New("injected: status write failed"))
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}
	startOperator(t, funcs)
	f.statefulCluster("e", 3, withClaims)
	f.waitPods("e", "e-5", "e-6", "e-7") // the failed creations burned identities 0-4, without claims
	assert.Len(t, f.claims("e"), 3, "exactly one claim set per identity that has a pod")
	require.Eventually(t, func() bool {
		sc := f.get("e")
		return meta.FindStatusCondition(sc.Status.Conditions, clusterv1alpha1.ConditionReplicaFailure) == nil &&
			meta.IsStatusConditionTrue(sc.Status.Conditions, clusterv1alpha1.ConditionReady)
	}, wait, tick, "ReplicaFailure cleared")

	// e-5 fails, and cannot be deleted; e-6 fails too and is replaced nevertheless.
	blockedDelete.Store("e-5")
	f.setPodStatus("e-5", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })
	f.setPodStatus("e-6", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })
	require.Eventually(t, func() bool { return f.pods("e")["e-8"] != nil }, wait, tick, "one bad pod does not block the rest")
	require.Eventually(t, func() bool {
		c := meta.FindStatusCondition(f.get("e").Status.Conditions, clusterv1alpha1.ConditionReplicaFailure)
		return c != nil && c.Status == metav1.ConditionTrue
	}, wait, tick, "ReplicaFailure reported")
	blockedDelete.Store("")
	f.waitPods("e", "e-7", "e-8", "e-9")

	// With the status unwritable, no pod of a new identity is created (the high-water mark first).
	statusFails.Store(1)
	f.update("e", func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.Replicas = ptr.To[int32](4) })
	testsupport.NeverWithin(t, 2*time.Second, tick, func() bool { return len(f.liveNames("e")) > 3 }, "pod created before its identity was recorded")
	statusFails.Store(0)
	f.waitPods("e", "e-7", "e-8", "e-9", "e-10")
}

// TestRandomIdentityFormat: identityFormat Random names pods <name>-<8 hex> (the seed code's names),
// claims after them, and a replacement gets a fresh name.
func TestRandomIdentityFormat(t *testing.T) {
	f := newFixture(t)
	startOperator(t, nil)
	f.statefulCluster("rnd", 2, withClaims, func(sc *clusterv1alpha1.StatefulCluster) {
		sc.Spec.IdentityFormat = clusterv1alpha1.RandomIdentityFormat
	})
	var first []string
	require.Eventually(t, func() bool { first = f.liveNames("rnd"); return len(first) == 2 }, wait, tick)
	for _, n := range first {
		assert.Regexp(t, `^rnd-[0-9a-f]{8}$`, n)
		// A pod's claims are created right after the pod (createPod), so they may trail its appearance.
		assert.Eventually(t, func() bool { return f.claims("rnd")["rnd-data-"+n[len("rnd-"):]] != nil }, wait, tick, "claim of %s", n)
	}
	f.waitPods("rnd", first...)
	require.NoError(t, suite.Client.Delete(t.Context(), f.pod(first[0])))
	require.Eventually(t, func() bool {
		names := f.liveNames("rnd")
		return len(names) == 2 && !slices.Contains(names, first[0]) && slices.Contains(names, first[1])
	}, wait, tick, "replaced under a fresh random name")
}

// TestMembershipHooks: the retire hook is called with the retired identity before its replacement is
// created, then the join hook with the new identity; a failing retire hook (failurePolicy Fail) holds
// the replacement back with condition MembershipHookFailed until it succeeds.
func TestMembershipHooks(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	var failing atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Event, Identity string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		if r.URL.Path != "/members" || failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		calls = append(calls, body.Event+" "+body.Identity)
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	port, err := strconv.Atoi(srv.URL[strings.LastIndex(srv.URL, ":")+1:])
	require.NoError(t, err)
	got := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(calls) }

	f := newFixture(t)
	startOperator(t, nil)
	f.statefulCluster("m", 2, func(sc *clusterv1alpha1.StatefulCluster) {
		hook := &clusterv1alpha1.MembershipHook{Path: "/members", Port: intstr.FromInt(port), TimeoutSeconds: 2, FailurePolicy: clusterv1alpha1.FailHookPolicy}
		sc.Spec.MembershipHooks = &clusterv1alpha1.MembershipHooks{Join: hook, Retire: hook.DeepCopy()}
	})
	f.waitPods("m", "m-0", "m-1")
	assert.Empty(t, got(), "the first pods have no surviving member to tell")

	f.setPodStatus("m-0", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })
	f.waitPods("m", "m-1", "m-2")
	require.Eventually(t, func() bool { return len(got()) == 2 }, wait, tick)
	assert.Equal(t, []string{"Retire m-0", "Join m-2"}, got(), "retire before join")

	failing.Store(true)
	f.setPodStatus("m-1", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })
	require.Eventually(t, func() bool {
		c := meta.FindStatusCondition(f.get("m").Status.Conditions, clusterv1alpha1.ConditionMembershipHookFailed)
		return c != nil && c.Status == metav1.ConditionTrue
	}, wait, tick, "MembershipHookFailed")
	testsupport.NeverWithin(t, time.Second, tick, func() bool { return f.pods("m")["m-3"] != nil }, "replacement created before the retire hook succeeded")
	failing.Store(false)
	f.waitPods("m", "m-2", "m-3")
	assert.Equal(t, []string{"Retire m-0", "Join m-2", "Retire m-1", "Join m-3"}, got())
	require.Eventually(t, func() bool {
		c := meta.FindStatusCondition(f.get("m").Status.Conditions, clusterv1alpha1.ConditionMembershipHookFailed)
		return c != nil && c.Status == metav1.ConditionFalse
	}, wait, tick)
}

// TestZoneSpread: identities are spread evenly over the zones of Ready nodes, pinned by node
// affinity, and a replacement goes to the zone of the identity it replaces.
func TestZoneSpread(t *testing.T) {
	for _, z := range []string{"x", "y", "z"} {
		require.NoError(t, setNode(t.Context(), "zone-"+z, true, false))
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			node := &corev1.Node{}
			if err := suite.Client.Get(t.Context(), client.ObjectKey{Name: "zone-" + z}, node); err != nil {
				return err
			}
			node.Labels = map[string]string{corev1.LabelTopologyZone: z}
			return suite.Client.Update(t.Context(), node)
		}))
		t.Cleanup(func() {
			_ = suite.Client.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "zone-" + z}})
		})
	}
	f := newFixture(t)
	startOperator(t, nil)
	f.statefulCluster("zs", 6, func(sc *clusterv1alpha1.StatefulCluster) {
		sc.Spec.ZoneSpread = &clusterv1alpha1.ZoneSpread{TopologyKey: corev1.LabelTopologyZone}
	})
	f.waitPods("zs", "zs-0", "zs-1", "zs-2", "zs-3", "zs-4", "zs-5")
	perZone := map[string]int{}
	for _, p := range f.pods("zs") {
		zone := p.Labels[clusterv1alpha1.ZoneLabel]
		perZone[zone]++
		terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		require.Len(t, terms, 1)
		assert.Contains(t, terms[0].MatchExpressions, corev1.NodeSelectorRequirement{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{zone}})
	}
	assert.Equal(t, map[string]int{"x": 2, "y": 2, "z": 2}, perZone)
	lostZone := f.pod("zs-4").Labels[clusterv1alpha1.ZoneLabel]
	f.setPodStatus("zs-4", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })
	f.waitPods("zs", "zs-0", "zs-1", "zs-2", "zs-3", "zs-5", "zs-6")
	assert.Equal(t, lostZone, f.pod("zs-6").Labels[clusterv1alpha1.ZoneLabel], "the replacement goes to the lost identity's zone")
}
