package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// CacheOptions scopes the manager's cache: pods only with the managed label, which the webhook puts on
// every pod it admits for a singleton, so the cache grows with the singletons, not with the cluster.
// main passes it to shared/manager (Options.Cache) and the integration tests build their manager with
// it. The pods a StatefulSingleton selects without that label come from the per-selector caches of
// caches.go, whose scope changes at run time.
func CacheOptions(o *cache.Options) {
	if o.ByObject == nil {
		o.ByObject = map[client.Object]cache.ByObject{}
	}
	o.ByObject[&corev1.Pod{}] = cache.ByObject{Label: labels.SelectorFromSet(labels.Set{singletonv1.LabelManaged: "true"})}
}
