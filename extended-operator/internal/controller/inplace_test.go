package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// In place (ES-06) with updateNotReady (ES-07): only a stuck pod at or above the partition may be
// recreated; below it the StatefulSet controller would bring it back on the old revision, and it does
// not wait for it anyway.
func TestStuckCandidatesRespectThePartition(t *testing.T) {
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: types.UID("s")}}
	sts.Status.UpdateRevision = "r2"
	pod := func(ordinal string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-" + ordinal,
			Labels:          map[string]string{appsv1.ControllerRevisionHashLabelKey: "r1"},
			OwnerReferences: []metav1.OwnerReference{{UID: sts.UID, Controller: ptr.To(true)}}}}
	}
	names := func(pods []*corev1.Pod) []string {
		out := []string{}
		for _, p := range pods {
			out = append(out, p.Name)
		}
		return out
	}
	pods := []corev1.Pod{pod("0"), pod("1"), pod("2")} // none Ready, all on r1
	assert.Equal(t, []string{"web-2"}, names(stuckCandidates(sts, pods, 2)), "the canary at the partition")
	pods[2].Labels[appsv1.ControllerRevisionHashLabelKey] = "r2"
	assert.Empty(t, names(stuckCandidates(sts, pods, 2)), "nothing below the partition")
	assert.Equal(t, []string{"web-1"}, names(stuckCandidates(sts, pods, 1)))
	assert.Equal(t, []string{"web-1", "web-0"}, names(stuckCandidates(sts, pods, 0)), "a versioned StatefulSet has partition 0")
}

// TestChangedFixedFields checks which template changes an in-place StatefulSet cannot take: a claim
// template's storage request can grow (the claims grow), anything else it fixes at creation is named.
func TestChangedFixedFields(t *testing.T) {
	claim := func(name, storage string) corev1.PersistentVolumeClaim {
		return corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(storage)}}}}
	}
	ests := &extendedv1alpha1.ExtendedStatefulSet{}
	ests.Spec.Template.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	ests.Spec.Template.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{claim("data", "1Gi")}
	v := &version{sts: &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{
		Annotations: map[string]string{extendedv1alpha1.FixedFieldsAnnotation: fixedFieldsAnnotation(ests)}}}}
	changed := func(edit func(s *appsv1.StatefulSetSpec)) []string {
		e := ests.DeepCopy()
		edit(&e.Spec.Template.Spec)
		return changedFixedFields(e, v)
	}
	assert.Empty(t, changed(func(s *appsv1.StatefulSetSpec) {}))
	assert.Empty(t, changed(func(s *appsv1.StatefulSetSpec) { s.VolumeClaimTemplates[0] = claim("data", "5Gi") }), "storage grows the claims")
	assert.Empty(t, changed(func(s *appsv1.StatefulSetSpec) { s.PodManagementPolicy = appsv1.OrderedReadyPodManagement }), "the default written out")
	assert.Empty(t, changed(func(s *appsv1.StatefulSetSpec) {
		s.Template.Spec.Containers = []corev1.Container{{Name: "app", Image: "app:2"}}
	}))
	assert.Equal(t, []string{"spec.template.spec.volumeClaimTemplates[data]"}, changed(func(s *appsv1.StatefulSetSpec) {
		s.VolumeClaimTemplates[0].Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
	}))
	assert.Equal(t, []string{"spec.template.spec.volumeClaimTemplates[logs]"}, changed(func(s *appsv1.StatefulSetSpec) {
		s.VolumeClaimTemplates = append(s.VolumeClaimTemplates, claim("logs", "1Gi"))
	}), "a claim template added")
	assert.Equal(t, []string{"spec.template.spec.volumeClaimTemplates[data]"}, changed(func(s *appsv1.StatefulSetSpec) {
		s.VolumeClaimTemplates = nil
	}), "a claim template removed")
	assert.Equal(t, []string{"spec.template.spec.podManagementPolicy", "spec.template.spec.selector", "spec.template.spec.serviceName"},
		changed(func(s *appsv1.StatefulSetSpec) {
			s.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
			s.ServiceName = "web"
			s.PodManagementPolicy = appsv1.ParallelPodManagement
		}), "stored before the CRD refused these")
	delete(v.sts.Annotations, extendedv1alpha1.FixedFieldsAnnotation)
	assert.Empty(t, changed(func(s *appsv1.StatefulSetSpec) { s.ServiceName = "web" }), "made before the annotation: not known")
}
