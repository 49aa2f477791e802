package controllerutil

import (
	corev1 "k8s.io/api/core/v1"
)

// Readiness as the pod's and the node's Ready conditions say. (k8s.io/kubectl/pkg/util/podutils has
// the pod half, but pulls kubectl into every operator for two loops.)

// PodCondition returns the pod's condition of that type (the condition itself, not a copy), nil when
// it has none.
func PodCondition(pod *corev1.Pod, conditionType corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if c := &pod.Status.Conditions[i]; c.Type == conditionType {
			return c
		}
	}
	return nil
}

// PodReadyCondition returns the pod's Ready condition, nil when it has none.
func PodReadyCondition(pod *corev1.Pod) *corev1.PodCondition {
	return PodCondition(pod, corev1.PodReady)
}

// PodReady reports whether the pod's Ready condition is True.
func PodReady(pod *corev1.Pod) bool {
	c := PodReadyCondition(pod)
	return c != nil && c.Status == corev1.ConditionTrue
}

// NodeReadyStatus returns the status of the node's Ready condition, "" when it has none.
func NodeReadyStatus(node *corev1.Node) corev1.ConditionStatus {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

// NodeReady reports whether the node's Ready condition is True.
func NodeReady(node *corev1.Node) bool { return NodeReadyStatus(node) == corev1.ConditionTrue }
