package controller

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// What the manager's cache holds, and why.
//
// Claims and ControllerRevisions only when they carry the operator's label (enge.me/cluster-name: the
// operator labels every claim and revision it creates), nodes stripped to readiness and taints, and
// nothing with its managedFields. The scope is fixed for the life of the process, so it is the manager's
// one cache, not a private one.
//
// Pods are cached in every namespace, because an orphan that matches a StatefulCluster's selector is
// adopted, whatever its labels. But a pod that another controller controls (a ReplicaSet's, a Job's,
// a StatefulSet's) is never adopted, counted or touched (loadPods skips it, the node handler maps
// only StatefulCluster pods), so the cache keeps only what those checks read: identity, labels, owners,
// deletion and node (slimForeignPod). The cluster's Deployment and Job pods then cost a few hundred
// bytes each instead of a whole pod, and the operator's memory follows its own pods and the orphans.

// CacheOptions scopes the manager's cache as above. main passes it to shared/manager (Options.Cache),
// and the envtests build their manager with it, so that they read through the same cache.
func CacheOptions(o *cache.Options) {
	ours, err := labels.Parse(clusterv1alpha1.ClusterNameLabel) // the label exists, whatever its value
	if err != nil {
		panic(err) // a constant, valid selector
	}
	labelled := cache.ByObject{Label: ours}
	if o.ByObject == nil {
		o.ByObject = map[client.Object]cache.ByObject{}
	}
	o.ByObject[&corev1.Pod{}] = podCache() // other controllers' pods slim (below)
	o.ByObject[&corev1.PersistentVolumeClaim{}] = labelled
	o.ByObject[&appsv1.ControllerRevision{}] = labelled
	o.ByObject[&corev1.Node{}] = cache.ByObject{Transform: opsutil.SlimNode}
	o.DefaultTransform = cache.TransformStripManagedFields()
}

// podCache is the cache configuration of pods: whole when they are the operator's own or orphans,
// slim when another controller controls them.
func podCache() cache.ByObject { return cache.ByObject{Transform: slimForeignPod} }

// slimForeignPod strips a pod that another controller controls to identity, labels, owners, deletion
// and node; every other pod is kept whole, without its managedFields.
func slimForeignPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone (DeletedFinalStateUnknown) stays as it is
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind == "StatefulCluster" {
		pod.ManagedFields = nil
		return pod, nil
	}
	slim := &corev1.Pod{TypeMeta: pod.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
		Labels: pod.Labels, OwnerReferences: pod.OwnerReferences, DeletionTimestamp: pod.DeletionTimestamp,
	}}
	slim.Spec.NodeName = pod.Spec.NodeName
	return slim, nil
}
