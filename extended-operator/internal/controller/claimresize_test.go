package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

func TestClaimTemplateOf(t *testing.T) {
	templates := map[string]resource.Quantity{"data": resource.MustParse("1Gi"), "data-z1": resource.MustParse("1Gi"), "logs": resource.MustParse("1Gi")}
	tests := map[string]string{
		"data-web-v1-0":        "data",
		"data-web-v12-10":      "data",
		"logs-web-z2-v3-1":     "logs",
		"data-z1-web-v1-0":     "data-z1", // the longer template name wins
		"data-web-v1":          "",        // no ordinal
		"data-webx-v1-0":       "",        // another ExtendedStatefulSet
		"cache-web-v1-0":       "",        // no such template
		"data-web-v1-0-backup": "",
		"data-web-2":           "data", // in place: no version in the StatefulSet's name
		"logs-web-z2-0":        "logs",
		"data-web-v-0":         "",
	}
	for claim, want := range tests {
		assert.Equal(t, want, claimTemplateOf("web", claim, templates), claim)
	}
}

// claimWith is a bound claim requesting req with capacity have ("" for none).
func claimWith(name, req, have string) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(req)}}},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
	if have != "" {
		pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(have)}
	}
	return pvc
}

func TestResizing(t *testing.T) {
	want := resource.MustParse("2Gi")
	assert.True(t, resizing(claimWith("a", "2Gi", "1Gi"), want), "capacity below the request")
	assert.False(t, resizing(claimWith("a", "2Gi", "2Gi"), want), "grown")
	assert.False(t, resizing(claimWith("a", "3Gi", "3Gi"), want), "larger than the template")
	assert.False(t, resizing(claimWith("a", "2Gi", ""), want), "no capacity reported")
	fsPending := claimWith("a", "2Gi", "2Gi")
	fsPending.Status.Conditions = []corev1.PersistentVolumeClaimCondition{
		{Type: corev1.PersistentVolumeClaimFileSystemResizePending, Status: corev1.ConditionTrue}}
	assert.True(t, resizing(fsPending, want), "the node's file system resize waits")
	unbound := claimWith("a", "2Gi", "")
	unbound.Status.Phase = corev1.ClaimPending
	assert.False(t, resizing(unbound, want), "not bound: provisioned at its request")
}

func TestClaimClass(t *testing.T) {
	pvc := &corev1.PersistentVolumeClaim{}
	assert.Empty(t, claimClass(pvc))
	pvc.Spec.StorageClassName = ptr.To("fast")
	assert.Equal(t, "fast", claimClass(pvc))
	pvc.Annotations = map[string]string{corev1.BetaStorageClassAnnotation: "legacy"}
	assert.Equal(t, "legacy", claimClass(pvc), "the resize admission reads the beta annotation first")
}

func TestClaimReportCondition(t *testing.T) {
	c := func(name, have string) claimState { return claimState{name: name, have: have, want: "2Gi"} }
	tests := map[string]struct {
		rep            claimReport
		status         bool
		reason         string
		contains, lack []string
	}{
		"all grown": {
			rep:    claimReport{total: 3},
			status: true, reason: extendedv1alpha1.ReasonReconciled,
			contains: []string{"every claim (3)"},
		},
		"growing, a few named": {
			rep:      claimReport{total: 5, pending: []claimState{c("d-0", "1Gi"), c("d-1", "1Gi"), c("d-2", "1Gi"), c("d-3", ""), c("d-4", "1Gi")}},
			reason:   extendedv1alpha1.ReasonResizeInProgress,
			contains: []string{"5 of 5 claims are growing", "d-0 (1Gi of 2Gi)", "d-2 (1Gi of 2Gi)", "and 2 more"},
			lack:     []string{"d-3"},
		},
		"not bound yet": {
			rep:      claimReport{total: 1, pending: []claimState{c("d-0", "")}},
			reason:   extendedv1alpha1.ReasonResizeInProgress,
			contains: []string{"d-0 (not bound yet, 2Gi requested)"},
		},
		"class without expansion, others growing": {
			rep: claimReport{total: 3, blocked: map[string][]claimState{"slow": {c("d-0", "1Gi")}},
				pending: []claimState{c("e-0", "1Gi"), c("e-1", "1Gi")}},
			reason: extendedv1alpha1.ReasonExpansionNotAllowed,
			contains: []string{`StorageClass "slow" does not allow volume expansion`, "1 claim stays below", "d-0 (1Gi of 2Gi)",
				"the pods keep running", "2 claims are growing: e-0"},
		},
		"no class": {
			rep:      claimReport{total: 2, blocked: map[string][]claimState{"": {c("d-0", "1Gi"), c("d-1", "1Gi")}}},
			reason:   extendedv1alpha1.ReasonExpansionNotAllowed,
			contains: []string{"2 claims have no StorageClass"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			status, reason, msg := tc.rep.condition()
			assert.Equal(t, tc.status, status)
			assert.Equal(t, tc.reason, reason)
			for _, s := range tc.contains {
				assert.Contains(t, msg, s)
			}
			for _, s := range tc.lack {
				assert.NotContains(t, msg, s)
			}
		})
	}
}

// TestStorageOnly checks which template changes keep a version: only a change of claim storage
// requests, with or without zones.
func TestStorageOnly(t *testing.T) {
	ests := &extendedv1alpha1.ExtendedStatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web"}}
	ests.Spec.Template.Spec = appsv1.StatefulSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "app:1"}}}},
		VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
			Spec: corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}},
	}
	for _, zones := range [][]string{nil, {"a", "b"}} {
		ests := ests.DeepCopy()
		if zones != nil {
			ests.Spec.AZ = &extendedv1alpha1.AvailabilityZones{Zones: zones}
		}
		z := desiredZones(ests)[len(zones)/2]
		v := &version{number: 1, sts: buildStatefulSet(ests, z, 1, "", extendedv1alpha1.PhaseDone, 1, metav1.Now().Time)}
		assert.False(t, storageOnly(ests, z, v), "unchanged: nothing to restamp")

		change := func(mutate func(*extendedv1alpha1.ExtendedStatefulSet)) bool {
			e := ests.DeepCopy()
			mutate(e)
			return storageOnly(e, desiredZones(e)[len(zones)/2], v)
		}
		setStorage := func(q string) func(*extendedv1alpha1.ExtendedStatefulSet) {
			return func(e *extendedv1alpha1.ExtendedStatefulSet) {
				e.Spec.Template.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse(q)
			}
		}
		assert.True(t, change(setStorage("2Gi")), "zones %v: storage grown", zones)
		assert.False(t, change(func(e *extendedv1alpha1.ExtendedStatefulSet) {
			setStorage("2Gi")(e)
			e.Spec.Template.Spec.Template.Spec.Containers[0].Image = "app:2"
		}), "zones %v: storage and image", zones)
		assert.False(t, change(func(e *extendedv1alpha1.ExtendedStatefulSet) {
			e.Spec.Template.Spec.VolumeClaimTemplates[0].Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
		}), "zones %v: access modes", zones)
		assert.False(t, change(func(e *extendedv1alpha1.ExtendedStatefulSet) {
			e.Spec.Template.Spec.VolumeClaimTemplates = append(e.Spec.Template.Spec.VolumeClaimTemplates, *e.Spec.Template.Spec.VolumeClaimTemplates[0].DeepCopy())
			e.Spec.Template.Spec.VolumeClaimTemplates[1].Name = "logs"
		}), "zones %v: a template added", zones)
	}
}
