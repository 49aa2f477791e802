package controller

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// What the pod cache holds, and why.
//
// Pods are cached in every namespace, because an orphan that matches a StatefulCluster's selector is
// adopted, whatever its labels. But a pod that another controller controls (a ReplicaSet's, a Job's,
// a StatefulSet's) is never adopted, counted or touched (loadPods skips it, the node handler maps
// only StatefulCluster pods), so the cache keeps only what those checks read: identity, labels, owners,
// deletion and node (slimForeignPod). The cluster's Deployment and Job pods then cost a few hundred
// bytes each instead of a whole pod, and the operator's memory follows its own pods and the orphans.

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
