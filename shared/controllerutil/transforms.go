package controllerutil

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// Cache transforms (cache.ByObject.Transform): what a controller does not read, its cache does not
// hold. Each leaves anything that is not its kind (a tombstone, cache.DeletedFinalStateUnknown) as it is.

// StripManagedFields drops the managedFields of any object.
func StripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// SlimNode keeps a node's name, UID, resourceVersion, labels, taints and Ready condition: what
// readiness, zone and out-of-service decisions read.
func SlimNode(obj any) (any, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Node{TypeMeta: node.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: node.Name, UID: node.UID, ResourceVersion: node.ResourceVersion, Labels: node.Labels,
	}}
	slim.Spec.Taints = node.Spec.Taints
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			slim.Status.Conditions = []corev1.NodeCondition{c}
		}
	}
	return slim, nil
}

// SlimPod keeps a pod's metadata (without managedFields), node, phase and conditions: what readiness
// and placement decisions read.
func SlimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{TypeMeta: pod.TypeMeta, ObjectMeta: pod.ObjectMeta}
	slim.ManagedFields = nil
	slim.Spec.NodeName = pod.Spec.NodeName
	slim.Status.Phase = pod.Status.Phase
	slim.Status.Conditions = pod.Status.Conditions
	return slim, nil
}

var _ cache.TransformFunc = SlimNode
