package controller

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// What the manager's cache holds, and why.
//
// The controller reads PhasedRollouts from the cache; pods and StatefulSets only wake it up: every
// decision reads them from the API server (Reconciler.APIReader). A PhasedRollout targets a StatefulSet,
// and the StatefulSet controller labels each of its pods statefulset.kubernetes.io/pod-name, so only pods
// with that label are cached, stripped to what the pod watch's predicate and map function read (owner,
// revision label, readiness, deletion). An operator that cached every pod whole would grow with the
// cluster (10,000 unrelated pods cost it tens of MiB), not with its rollouts.

// CacheOptions scopes the manager's cache: pods of StatefulSets only, and slim. main passes it to
// shared/manager (Options.Cache).
func CacheOptions(o *cache.Options) {
	if o.ByObject == nil {
		o.ByObject = map[client.Object]cache.ByObject{}
	}
	o.ByObject[&corev1.Pod{}] = cache.ByObject{Label: statefulSetPods(), Transform: slimPod}
}

// statefulSetPods selects the pods a StatefulSet controller created.
func statefulSetPods() labels.Selector {
	req, err := labels.NewRequirement(appsv1.StatefulSetPodNameLabel, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant, valid requirement
	}
	return labels.NewSelector().Add(*req)
}

// slimPod keeps what the pod watch reads: identity, labels, owners, deletion and the Ready condition.
func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone (DeletedFinalStateUnknown) stays as it is
	}
	slim := &corev1.Pod{TypeMeta: pod.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
		Labels: pod.Labels, OwnerReferences: pod.OwnerReferences, DeletionTimestamp: pod.DeletionTimestamp,
	}}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			slim.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return slim, nil
}
