//go:build integration

package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// storageClass creates a StorageClass for the test, allowing volume expansion or not.
func (f *fixture) storageClass(name string, expand bool) string {
	f.t.Helper()
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + f.ns}, Provisioner: "test.example.com"}
	if expand {
		sc.AllowVolumeExpansion = ptr.To(true)
	}
	require.NoError(f.t, suite.Client.Create(f.t.Context(), sc))
	f.t.Cleanup(func() { _ = suite.Client.Delete(context.Background(), sc) })
	return sc.Name
}

// withClaimsOf creates ExtendedStatefulSet "web" of 3 pods with a claimTemplate "data" of 1Gi in class,
// and plays what a cluster does for version 1: its pods (Ready), its claims bound to volumes of 1Gi
// (envtest has no PV controller: the volume's claimRef and the claim's status are set here) and its
// status. It returns the pods' UIDs by name.
func (f *fixture) withClaimsOf(class string) map[string]types.UID {
	t := f.t
	t.Helper()
	ests := f.newESTS(3, "app:1")
	ests.Spec.Template.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(class),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}}
	f.create(ests)
	sts := f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "version 1")
	pods := map[string]types.UID{}
	for i := range 3 {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-v1-%d", i), Namespace: f.ns, Labels: sts.Spec.Template.Labels,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID,
					Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "app:1"}}},
		}
		require.NoError(t, suite.Client.Create(t.Context(), pod))
		pods[pod.Name] = pod.UID
		f.bindClaim(fmt.Sprintf("data-web-v1-%d", i), class, sts.Spec.Selector.MatchLabels)
	}
	f.setStatus(1, 3)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
	f.waitCondition(extendedv1alpha1.ConditionClaimsResized, metav1.ConditionTrue, extendedv1alpha1.ReasonReconciled)
	return pods
}

// bindClaim creates the claim as the StatefulSet controller would (labelled with its selector), and a
// volume of 1Gi bound to it as the PV controller would.
func (f *fixture) bindClaim(name, class string, labels map[string]string) {
	t := f.t
	t.Helper()
	pvName := f.ns + "-" + name
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName:              class,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "test.example.com", VolumeHandle: pvName}},
		},
	}
	require.NoError(t, suite.Client.Create(t.Context(), pv))
	t.Cleanup(func() { _ = suite.Client.Delete(context.Background(), pv) })
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: labels},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(class), VolumeName: pvName,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}
	require.NoError(t, suite.Client.Create(t.Context(), pvc))
	pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: f.ns, Name: name, UID: pvc.UID}
	require.NoError(t, suite.Client.Update(t.Context(), pv))
	pv.Status.Phase = corev1.VolumeBound
	require.NoError(t, suite.Client.Status().Update(t.Context(), pv))
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: pvc.Spec.AccessModes,
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}
	require.NoError(t, suite.Client.Status().Update(t.Context(), pvc))
}

// claim returns the claim.
func (f *fixture) claim(name string) *corev1.PersistentVolumeClaim {
	f.t.Helper()
	pvc := &corev1.PersistentVolumeClaim{}
	require.NoError(f.t, suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, pvc))
	return pvc
}

// request is the claim's storage request.
func (f *fixture) request(name string) string {
	q := f.claim(name).Spec.Resources.Requests[corev1.ResourceStorage]
	return q.String()
}

// setCapacity plays the volume plugin having grown the claim's volume.
func (f *fixture) setCapacity(name, capacity string) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pvc := f.claim(name)
		pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(capacity)}
		return suite.Client.Status().Update(f.t.Context(), pvc)
	}))
}

// setClaimStorage sets the storage request of claim template "data".
func (f *fixture) setClaimStorage(q string) {
	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.Template.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse(q)
	})
}

// podDeletions watches the namespace's pods and records every pod deleted or marked for deletion.
type podDeletions struct {
	mu      sync.Mutex
	deleted []string
}

func watchPodDeletions(t *testing.T, ns string) *podDeletions {
	t.Helper()
	w, err := suite.Client.Watch(t.Context(), &corev1.PodList{}, client.InNamespace(ns))
	require.NoError(t, err)
	pd := &podDeletions{}
	go func() {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if ok && (ev.Type == watch.Deleted || !pod.DeletionTimestamp.IsZero()) {
				pd.mu.Lock()
				pd.deleted = append(pd.deleted, pod.Name)
				pd.mu.Unlock()
			}
		}
	}()
	t.Cleanup(w.Stop)
	return pd
}

func (pd *podDeletions) list() []string {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	return append([]string(nil), pd.deleted...)
}

// assertUntouched checks that growing the claims replaced nothing: version 1's StatefulSet is the same
// object, no version 2 exists, and every pod is the one created, never deleted.
func (f *fixture) assertUntouched(stsUID types.UID, pods map[string]types.UID, pd *podDeletions) {
	t := f.t
	t.Helper()
	assert.Nil(t, f.sts(2), "a storage change makes no new version")
	if v1 := f.sts(1); assert.NotNil(t, v1) {
		assert.Equal(t, stsUID, v1.UID, "version 1's StatefulSet was not recreated")
		assert.True(t, v1.DeletionTimestamp.IsZero())
	}
	for name, uid := range pods {
		pod := &corev1.Pod{}
		if assert.NoError(t, suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, pod)) {
			assert.Equal(t, uid, pod.UID, "pod %s is the one created", name)
			assert.True(t, pod.DeletionTimestamp.IsZero(), "pod %s not deleted", name)
		}
	}
	assert.Empty(t, pd.list(), "no pod was deleted")
}

// TestClaimResize grows the claim template's storage request, with a StorageClass that allows volume
// expansion: every claim of the template below the new size is patched to it (a claim already larger is
// left alone), ClaimsResized reports the resize under way until the volumes have grown, Ready stays True
// all along, and no pod, StatefulSet or version is replaced.
func TestClaimResize(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	pods := f.withClaimsOf(f.storageClass("expandable", true))
	// A claim the user grew beyond the template by hand: it is never shrunk or touched.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pvc := f.claim("data-web-v1-2")
		pvc.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("3Gi")
		return suite.Client.Update(t.Context(), pvc)
	}))
	f.setCapacity("data-web-v1-2", "3Gi")
	ready := f.condition(extendedv1alpha1.ConditionReady)
	stsUID := f.sts(1).UID
	pd := watchPodDeletions(t, f.ns)

	f.setClaimStorage("2Gi")
	f.waitCondition(extendedv1alpha1.ConditionClaimsResized, metav1.ConditionFalse, extendedv1alpha1.ReasonResizeInProgress)
	c := f.condition(extendedv1alpha1.ConditionClaimsResized)
	assert.Contains(t, c.Message, "2 of 3 claims are growing")
	assert.Contains(t, c.Message, "data-web-v1-0 (1Gi of 2Gi)")
	assert.NotContains(t, c.Message, "data-web-v1-2")
	assert.Equal(t, "2Gi", f.request("data-web-v1-0"))
	assert.Equal(t, "2Gi", f.request("data-web-v1-1"))
	assert.Equal(t, "3Gi", f.request("data-web-v1-2"), "a claim above the template is untouched")
	f.waitEvent(extendedv1alpha1.EventClaimsResized, "data-web-v1-0 from 1Gi to 2Gi")

	f.setCapacity("data-web-v1-0", "2Gi")
	f.setCapacity("data-web-v1-1", "2Gi")
	f.waitCondition(extendedv1alpha1.ConditionClaimsResized, metav1.ConditionTrue, extendedv1alpha1.ReasonReconciled)

	after := f.condition(extendedv1alpha1.ConditionReady)
	assert.Equal(t, metav1.ConditionTrue, after.Status)
	assert.Equal(t, ready.LastTransitionTime, after.LastTransitionTime, "Ready never left True during the resize")
	assert.Equal(t, f.get().Generation, after.ObservedGeneration)
	f.assertUntouched(stsUID, pods, pd)
	v1 := f.sts(1)
	assert.Equal(t, templateHash(f.get()), v1.Annotations[extendedv1alpha1.TemplateHashAnnotation],
		"version 1 stands for the grown template")
}

// TestClaimResizeTwice grows the storage request twice: the second storage-only change is recognized
// against the storage version 1's template hash was computed with (the claim-storage annotation), not
// its StatefulSet's claim templates, which stay at 1Gi: still no new version, no pod replaced.
func TestClaimResizeTwice(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	pods := f.withClaimsOf(f.storageClass("expandable", true))
	stsUID := f.sts(1).UID
	pd := watchPodDeletions(t, f.ns)
	for _, size := range []string{"2Gi", "3Gi"} {
		f.setClaimStorage(size)
		want := templateHash(f.get())
		f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, want, sts.Annotations[extendedv1alpha1.TemplateHashAnnotation], "version 1 stands for the %s template", size)
		}, "version 1 restamped for "+size)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, size, f.request("data-web-v1-0"))
		}, wait, tick, "claims asked to grow to %s", size)
	}
	f.assertUntouched(stsUID, pods, pd)
}

// TestClaimResizeExpansionNotAllowed grows the claim template's storage request while the claims'
// StorageClass does not allow volume expansion: the claims are left as they are, ClaimsResized=False
// (ExpansionNotAllowed) names the class, a Warning Event says so, and the pods keep running with Ready
// True. Once the class allows expansion, the claims grow.
func TestClaimResizeExpansionNotAllowed(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	class := f.storageClass("fixed", false)
	pods := f.withClaimsOf(class)
	ready := f.condition(extendedv1alpha1.ConditionReady)
	stsUID := f.sts(1).UID
	pd := watchPodDeletions(t, f.ns)

	f.setClaimStorage("2Gi")
	f.waitCondition(extendedv1alpha1.ConditionClaimsResized, metav1.ConditionFalse, extendedv1alpha1.ReasonExpansionNotAllowed)
	c := f.condition(extendedv1alpha1.ConditionClaimsResized)
	assert.Contains(t, c.Message, fmt.Sprintf("StorageClass %q does not allow volume expansion", class))
	assert.Contains(t, c.Message, "3 claims stay below the template's storage request")
	f.waitEvent(extendedv1alpha1.ReasonExpansionNotAllowed, class)
	for i := range 3 {
		assert.Equal(t, "1Gi", f.request(fmt.Sprintf("data-web-v1-%d", i)), "claim %d unchanged", i)
	}
	after := f.condition(extendedv1alpha1.ConditionReady)
	assert.Equal(t, metav1.ConditionTrue, after.Status, after.Message)
	assert.Equal(t, ready.LastTransitionTime, after.LastTransitionTime)
	f.assertUntouched(stsUID, pods, pd)

	// The administrator allows expansion: the StorageClass watch resumes the claims.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sc := &storagev1.StorageClass{}
		require.NoError(t, suite.Client.Get(t.Context(), client.ObjectKey{Name: class}, sc))
		sc.AllowVolumeExpansion = ptr.To(true)
		return suite.Client.Update(t.Context(), sc)
	}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for i := range 3 {
			assert.Equal(c, "2Gi", f.request(fmt.Sprintf("data-web-v1-%d", i)), "claim %d grown", i)
		}
	}, wait, tick, "claims grown once the class allows it")
	f.waitCondition(extendedv1alpha1.ConditionClaimsResized, metav1.ConditionFalse, extendedv1alpha1.ReasonResizeInProgress)
	f.assertUntouched(stsUID, pods, pd)
}

// TestClaimResizeWithTemplateChange grows the storage request together with another template change
// (a new image): that is a new version, whose volumes move ordinal by ordinal (handover.go). The new
// version's claims, created on the moved volumes of 1Gi, ask for what their volume has, so that they
// bind; with no StorageClass (withVolumes' claims have none) they cannot grow, which ClaimsResized says.
func TestClaimResizeWithTemplateChange(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	volumes := f.withVolumes()
	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.Template.Spec.Template.Spec.Containers[0].Image = "app:2"
		e.Spec.Template.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
	})
	for k := int32(1); k <= 3; k++ {
		f.waitSTS(2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, k, ptr.Deref(sts.Spec.Replicas, 0), "version 2 runs ordinals [0, %d)", k)
		}, fmt.Sprintf("ordinal %d moved", k-1))
		claim := fmt.Sprintf("data-web-v2-%d", k-1)
		assert.Equal(t, volumes[int(k-1)], f.claimVolume(claim), "ordinal %d keeps its volume", k-1)
		assert.Equal(t, "1Gi", f.request(claim), "the moved claim asks what its volume has")
		f.setStatus(2, k)
	}
	f.waitGone(1)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
	f.waitCondition(extendedv1alpha1.ConditionClaimsResized, metav1.ConditionFalse, extendedv1alpha1.ReasonExpansionNotAllowed)
	assert.Contains(t, f.condition(extendedv1alpha1.ConditionClaimsResized).Message, "3 claims have no StorageClass")
}
