package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// ConfigMaps watched as metadata are cut to their identity (Secrets are not in the manager's cache:
// secretaccess.go).
func TestCacheOptionsCutConfigMetadata(t *testing.T) {
	var o cache.Options
	CacheOptions(&o)
	require.Len(t, o.ByObject, 1)
	for obj, b := range o.ByObject {
		meta := obj.(*metav1.PartialObjectMetadata)
		assert.Equal(t, "ConfigMap", meta.Kind)
		in := &metav1.PartialObjectMetadata{TypeMeta: meta.TypeMeta, ObjectMeta: metav1.ObjectMeta{
			Name: "cfg", Namespace: "ns", UID: "u", ResourceVersion: "9",
			Labels:        map[string]string{"a": "b"},
			Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{...the data...}"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		}}
		out, err := b.Transform(in)
		require.NoError(t, err)
		got := out.(*metav1.PartialObjectMetadata)
		assert.Equal(t, metav1.ObjectMeta{Name: "cfg", Namespace: "ns", UID: "u", ResourceVersion: "9"}, got.ObjectMeta)
		assert.Equal(t, meta.TypeMeta, got.TypeMeta)
	}
}
