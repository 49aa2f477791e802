package controller

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// What the manager's cache holds, and why.
//
// Pods, claims and ControllerRevisions only when they carry the operator's label (enge.me/cluster-name:
// the operator labels every pod, claim and revision it creates, and every orphan it adopts), nodes
// stripped to readiness and taints, and nothing with its managedFields. The API server filters by the
// label, so the cluster's other pods (Deployments', Jobs', everyone's) are never sent to the operator and
// its memory follows its own pods, whatever else runs. The scope is fixed for the life of the process, so
// it is the manager's one cache, not a private one.
//
// An orphan without the label that matches a StatefulCluster's selector is not in the cache: each
// reconcile finds such orphans with one uncached list, filtered by the API server on the selector and
// the label's absence (unlabelledOrphans). So adopting one waits for the StatefulCluster's next reconcile
// rather than following the orphan's creation.

// CacheOptions scopes the manager's cache as above. main passes it to shared/manager (Options.Cache),
// and the envtests build their manager with it, so that they read through the same cache.
func CacheOptions(o *cache.Options) {
	labelled := cache.ByObject{Label: opsutil.HasLabel(clusterv1alpha1.ClusterNameLabel)}
	opsutil.ScopeCache(o, map[client.Object]cache.ByObject{
		&corev1.Pod{}:                   labelled,
		&corev1.PersistentVolumeClaim{}: labelled,
		&appsv1.ControllerRevision{}:    labelled,
		&corev1.Node{}:                  {Transform: opsutil.SlimNode},
	})
	o.DefaultTransform = cache.TransformStripManagedFields()
}

// withoutOperatorLabel narrows selector to the objects that lack the operator's label.
func withoutOperatorLabel(selector labels.Selector) labels.Selector {
	req, err := labels.NewRequirement(clusterv1alpha1.ClusterNameLabel, selection.DoesNotExist, nil)
	if err != nil {
		panic(err) // a constant, valid key
	}
	return selector.Add(*req)
}
