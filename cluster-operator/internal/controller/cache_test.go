package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Pods of other controllers are cached slim; the operator's own pods and orphans stay whole.
func TestPodCacheSlimsOnlyOtherControllersPods(t *testing.T) {
	pod := func(owner string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: "p", Namespace: "ns", UID: "u", ResourceVersion: "3", Labels: map[string]string{"app": "a"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}},
			},
			Spec:   corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "main", Image: "x"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		}
		if owner != "" {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: owner, Name: "o", Controller: ptr.To(true)}}
		}
		return p
	}
	transform := podCache().Transform
	for _, owner := range []string{"", "StatefulCluster"} {
		out, err := transform(pod(owner))
		require.NoError(t, err)
		got := out.(*corev1.Pod)
		assert.Len(t, got.Spec.Containers, 1, "owner %q: kept whole", owner)
		assert.Equal(t, corev1.PodRunning, got.Status.Phase)
		assert.Empty(t, got.ManagedFields, "managedFields are stripped")
	}
	out, err := transform(pod("ReplicaSet"))
	require.NoError(t, err)
	got := out.(*corev1.Pod)
	assert.Empty(t, got.Spec.Containers, "another controller's pod is slim")
	assert.Empty(t, got.Status.Phase)
	assert.Equal(t, "n1", got.Spec.NodeName, "the node index still sees it")
	assert.Equal(t, "ReplicaSet", metav1.GetControllerOf(got).Kind, "loadPods still sees its controller")
	assert.Equal(t, map[string]string{"app": "a"}, got.Labels)
	assert.Equal(t, "3", got.ResourceVersion)
}
