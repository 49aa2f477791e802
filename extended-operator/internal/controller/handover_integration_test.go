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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// playStorage plays the parts of kube-controller-manager that envtest lacks for claims: the
// pvc-protection controller (a deleted claim no pod uses loses its finalizer) and the PV binder (a claim
// naming a volume whose claimRef names it becomes Bound, and the volume's claimRef gets its UID).
func (f *fixture) playStorage() {
	ctx, cancel := context.WithCancel(context.Background())
	f.t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			var pvcs corev1.PersistentVolumeClaimList
			if suite.Client.List(ctx, &pvcs, client.InNamespace(f.ns)) == nil {
				for i := range pvcs.Items {
					pvc := &pvcs.Items[i]
					if !pvc.DeletionTimestamp.IsZero() && len(pvc.Finalizers) > 0 {
						pvc.Finalizers = nil
						_ = suite.Client.Update(ctx, pvc)
						continue
					}
					if pvc.Spec.VolumeName == "" || pvc.Status.Phase == corev1.ClaimBound {
						continue
					}
					pv := &corev1.PersistentVolume{}
					if suite.Client.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv) != nil || pv.Spec.ClaimRef == nil ||
						pv.Spec.ClaimRef.Name != pvc.Name || pv.Spec.ClaimRef.Namespace != pvc.Namespace {
						continue
					}
					pv.Spec.ClaimRef.UID = pvc.UID
					if suite.Client.Update(ctx, pv) != nil {
						continue
					}
					pvc.Status.Phase = corev1.ClaimBound
					_ = suite.Client.Status().Update(ctx, pvc)
				}
			}
			time.Sleep(20 * time.Millisecond) // the test's simulated controller polls; the operator never sleeps
		}
	}()
}

// withVolumes creates ExtendedStatefulSet "web" of 3 pods with a volumeClaimTemplate "data", and version
// 1's claims bound to volumes (what the StatefulSet controller and the PV binder would do), Ready. It
// returns the volume of each ordinal.
func (f *fixture) withVolumes() map[int]string {
	t := f.t
	t.Helper()
	f.playStorage()
	ests := f.newESTS(3, "app:1")
	ests.Spec.Template.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}}
	f.create(ests)
	f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "version 1")
	volumes := map[int]string{}
	for i := range 3 {
		pvName := fmt.Sprintf("%s-pv-%d", f.ns, i)
		claim := fmt.Sprintf("data-web-v1-%d", i)
		require.NoError(t, suite.Client.Create(t.Context(), &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: pvName},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
				PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + pvName}},
				ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: f.ns, Name: claim},
			},
		}))
		t.Cleanup(func() {
			_ = suite.Client.Delete(context.Background(), &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName}})
		})
		pvc := ests.Spec.Template.Spec.VolumeClaimTemplates[0].DeepCopy()
		pvc.ObjectMeta = metav1.ObjectMeta{Name: claim, Namespace: f.ns}
		pvc.Spec.VolumeName = pvName
		require.NoError(t, suite.Client.Create(t.Context(), pvc))
		volumes[i] = pvName
	}
	f.setStatus(1, 3)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
	return volumes
}

// claimVolume returns the volume the claim names ("" without the claim).
func (f *fixture) claimVolume(name string) string {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, pvc); err != nil {
		return ""
	}
	return pvc.Spec.VolumeName
}

// waitVolumesReleased waits until no volume is held for a handover any more, each with its reclaim
// policy back.
func (f *fixture) waitVolumesReleased(volumes map[int]string) {
	f.t.Helper()
	require.EventuallyWithT(f.t, func(c *assert.CollectT) {
		for _, name := range volumes {
			pv := &corev1.PersistentVolume{}
			if assert.NoError(c, suite.Client.Get(context.Background(), client.ObjectKey{Name: name}, pv)) {
				assert.Equal(c, corev1.PersistentVolumeReclaimDelete, pv.Spec.PersistentVolumeReclaimPolicy, "reclaim policy of %s given back", name)
				assert.NotContains(c, pv.Labels, handoverLabel)
			}
		}
	}, wait, tick, "volumes released from the handover")
}

func (f *fixture) setImage(image string) {
	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.Template.Spec.Template.Spec.Containers[0].Image = image
	})
}

// TestVolumeHandover checks the ordinal-by-ordinal handover of a template with volumeClaimTemplates: the
// old version gives up ordinal k (its ordinals start past k) before the new version runs it, and the new
// version's claim of ordinal k is bound to the volume the old one had, whose reclaim policy is held at
// Retain during the move and given back after.
func TestVolumeHandover(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	volumes := f.withVolumes()
	f.setImage("app:2")
	for k := int32(1); k <= 3; k++ {
		f.waitSTS(2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, k, ptr.Deref(sts.Spec.Replicas, 0), "version 2 runs ordinals [0, %d)", k)
		}, fmt.Sprintf("ordinal %d moved", k-1))
		if k < 3 {
			v1 := f.sts(1)
			require.NotNil(t, v1)
			require.NotNil(t, v1.Spec.Ordinals)
			assert.Equal(t, k, v1.Spec.Ordinals.Start, "version 1 gave up ordinal %d before version 2 took it", k-1)
			assert.Equal(t, 3-k, ptr.Deref(v1.Spec.Replicas, 0))
		}
		assert.Equal(t, volumes[int(k-1)], f.claimVolume(fmt.Sprintf("data-web-v2-%d", k-1)), "ordinal %d keeps its volume", k-1)
		f.setStatus(2, k) // the moved pods become Ready
	}
	f.waitGone(1)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
	f.waitVolumesReleased(volumes)
}

// TestVolumeHandoverSuperseded checks a template change in the middle of a handover: the superseded
// version's ordinals, with their volumes, go back to the serving version before it is deleted, and the
// newest version then takes every ordinal with its original volume.
func TestVolumeHandoverSuperseded(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	volumes := f.withVolumes()
	f.setImage("app:2")
	require.Eventually(t, func() bool { return f.claimVolume("data-web-v2-0") == volumes[0] }, wait, tick, "ordinal 0 moved to version 2")
	f.setImage("app:3")
	f.waitGone(2)
	assert.Equal(t, volumes[0], f.claimVolume("data-web-v1-0"), "ordinal 0's volume back on version 1")
	for k := int32(1); k <= 3; k++ {
		f.waitSTS(3, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, k, ptr.Deref(sts.Spec.Replicas, 0))
		}, fmt.Sprintf("ordinal %d moved to version 3", k-1))
		f.setStatus(3, k)
	}
	f.waitGone(1)
	for i, v := range volumes {
		assert.Equal(t, v, f.claimVolume(fmt.Sprintf("data-web-v3-%d", i)), "ordinal %d keeps its volume", i)
	}
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
	f.waitVolumesReleased(volumes)
}

// TestVolumeHandoverWithFaults runs a handover while a quarter of the operator's writes fail and the
// operator is restarted after the first ordinal moved: every ordinal still ends on its own volume.
func TestVolumeHandoverWithFaults(t *testing.T) {
	var injected atomic.Int64
	funcs := faultyWrites(&injected)
	op := startOperator(t, funcs)
	f := newFixture(t)
	volumes := f.withVolumes()
	f.setImage("app:2")
	for k := int32(1); k <= 3; k++ {
		f.waitSTS(2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, k, ptr.Deref(sts.Spec.Replicas, 0))
		}, fmt.Sprintf("ordinal %d moved", k-1))
		if k == 1 {
			op.stop()
			op = startOperator(t, funcs)
		}
		f.setStatus(2, k)
	}
	f.waitGone(1)
	for i, v := range volumes {
		assert.Equal(t, v, f.claimVolume(fmt.Sprintf("data-web-v2-%d", i)), "ordinal %d keeps its volume", i)
	}
	f.waitVolumesReleased(volumes)
	t.Logf("injected %d API errors", injected.Load())
	assert.Positive(t, injected.Load())
}
