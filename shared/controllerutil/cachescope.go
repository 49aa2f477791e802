package controllerutil

import (
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Cache scopes: a controller's CacheOptions (its cache.go, passed to shared/manager as Options.Cache)
// says, per kind, which objects the manager's cache holds and how slim.

// ScopeCache sets how the manager's cache holds each kind of byObject, keeping what o already says about
// other kinds.
func ScopeCache(o *cache.Options, byObject map[client.Object]cache.ByObject) {
	if o.ByObject == nil {
		o.ByObject = make(map[client.Object]cache.ByObject, len(byObject))
	}
	for obj, by := range byObject {
		o.ByObject[obj] = by
	}
}

// HasLabel selects the objects that carry the label, whatever its value: e.g. the pods of StatefulSets
// (statefulset.kubernetes.io/pod-name), or the objects a controller labels as its own.
func HasLabel(key string) labels.Selector {
	req, err := labels.NewRequirement(key, selection.Exists, nil)
	if err != nil {
		panic(err) // a programming error: label keys are constants
	}
	return labels.NewSelector().Add(*req)
}
