package controller

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// What the manager's cache holds, and why.
//
// ExtendedStatefulSets, their StatefulSets and nodes are cached whole. ConfigMaps are watched
// cluster-wide as metadata only (ConfigMapMeta), Secrets likewise but only in the namespaces where the
// operator holds Secret access (secretaccess.go: it has no cluster-wide Secret right, so they are not
// in the manager's cache): a watch event only names the object, whose
// referrers the field index finds, and the config hash reads the referenced objects' data from the API
// server. The metadata is cut further to name, namespace, UID and resourceVersion (slimConfigMeta): an
// object's labels and annotations (kubectl's last-applied-configuration holds a full copy of the data)
// are never read. So 10,000 unrelated ConfigMaps and Secrets cost a few hundred bytes each, and Secret
// data never sits in the operator's memory.

// ConfigMapMeta is a ConfigMap watched as metadata only.
func ConfigMapMeta() *metav1.PartialObjectMetadata { return partialMeta("ConfigMap") }

func partialMeta(kind string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: kind}}
}

// CacheOptions cuts the cached metadata of ConfigMaps (see above). main passes it to
// shared/manager (Options.Cache).
func CacheOptions(o *cache.Options) {
	if o.ByObject == nil {
		o.ByObject = map[client.Object]cache.ByObject{}
	}
	o.ByObject[ConfigMapMeta()] = cache.ByObject{Transform: slimConfigMeta}
}

// slimConfigMeta keeps what the ConfigMap and Secret watches read: the object's identity (also the
// transform of the per-namespace Secret informers).
func slimConfigMeta(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil // a tombstone (DeletedFinalStateUnknown) stays as it is
	}
	return &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		DeletionTimestamp: m.DeletionTimestamp,
	}}, nil
}
