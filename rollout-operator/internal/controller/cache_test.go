package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// The cache keeps only StatefulSet pods, and of them what the pod watch reads.
func TestCacheOptionsKeepSlimStatefulSetPods(t *testing.T) {
	var o cache.Options
	CacheOptions(&o)
	var byPod cache.ByObject
	for obj, b := range o.ByObject {
		if _, ok := obj.(*corev1.Pod); ok {
			byPod = b
		}
	}
	require.NotNil(t, byPod.Label)
	assert.True(t, byPod.Label.Matches(labels.Set{appsv1.StatefulSetPodNameLabel: "web-0"}))
	assert.False(t, byPod.Label.Matches(labels.Set{"app": "web"}), "a pod of no StatefulSet is not cached")

	now := metav1.Now()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-0", Namespace: "ns", UID: "u", ResourceVersion: "7",
			Labels:            map[string]string{appsv1.ControllerRevisionHashLabelKey: "web-1"},
			OwnerReferences:   []metav1.OwnerReference{{Kind: "StatefulSet", Name: "web", Controller: ptr.To(true)}},
			DeletionTimestamp: &now,
			ManagedFields:     []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}},
			Annotations:       map[string]string{"big": "annotation"},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "x"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}},
	}
	out, err := byPod.Transform(pod)
	require.NoError(t, err)
	slim := out.(*corev1.Pod)
	assert.True(t, opsutil.PodReady(slim), "readiness is kept")
	assert.Equal(t, "web", metav1.GetControllerOf(slim).Name, "the owner is kept")
	assert.Equal(t, "web-1", slim.Labels[appsv1.ControllerRevisionHashLabelKey], "the revision label is kept")
	assert.False(t, slim.DeletionTimestamp.IsZero(), "deletion is kept")
	assert.Equal(t, "7", slim.ResourceVersion)
	assert.Empty(t, slim.ManagedFields)
	assert.Empty(t, slim.Annotations)
	assert.Empty(t, slim.Spec.Containers)

	tomb := toolscache.DeletedFinalStateUnknown{Key: "ns/web-0", Obj: pod}
	out, err = byPod.Transform(tomb)
	require.NoError(t, err)
	assert.Equal(t, tomb, out, "a tombstone passes unchanged")
}
