package controller

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

// The cache holds the pods of StatefulSets and the locks' Leases, Services and EndpointSlices only, slim pods and
// nodes, and StatefulSets as metadata.
func TestCacheOptionsScopeEachKind(t *testing.T) {
	var o cache.Options
	CacheOptions(&o)
	by := map[string]cache.ByObject{}
	for obj, b := range o.ByObject {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			by["metadata "+m.Kind] = b
			continue
		}
		by[fmt.Sprintf("%T", obj)] = b
	}
	require.Len(t, by, 6)
	pods, leases, nodes, services, slices := by["*v1.Pod"], by["*v1.Lease"], by["*v1.Node"], by["*v1.Service"], by["*v1.EndpointSlice"]
	require.NotNil(t, pods.Label)
	assert.True(t, pods.Label.Matches(labels.Set{appsv1.StatefulSetPodNameLabel: "db-0"}))
	assert.False(t, pods.Label.Matches(labels.Set{"app": "db"}), "a pod of no StatefulSet is not cached")
	assert.NotNil(t, pods.Transform)
	require.NotNil(t, leases.Label)
	assert.True(t, leases.Label.Matches(labels.Set{leasev1.LockLabel: "lock"}))
	assert.False(t, leases.Label.Matches(labels.Set{}), "a Lease of no lock is not cached")
	assert.NotNil(t, nodes.Transform)
	require.NotNil(t, services.Label)
	assert.True(t, services.Label.Matches(labels.Set{leasev1.LockLabel: "lock"}))
	assert.False(t, services.Label.Matches(labels.Set{"app": "db"}), "a Service of no lock is not cached")
	require.NotNil(t, slices.Label)
	assert.True(t, slices.Label.Matches(labels.Set{leasev1.LockLabel: "lock"}))
	assert.False(t, slices.Label.Matches(labels.Set{"kubernetes.io/service-name": "web"}), "an EndpointSlice of no lock is not cached")
	assert.Contains(t, by, "metadata StatefulSet")
}
