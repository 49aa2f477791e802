package controller

import (
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// podState is how the controller sees one pod of a singleton.
type podState int

const (
	// stateTerminal: Succeeded or Failed with every container terminated, or being deleted with the exit
	// of every app process reported (exitReported); it can never run its app again.
	stateTerminal podState = iota
	// stateHeld: admitted with a hold that is still in place; its main process cannot run.
	stateHeld
	// stateReleased: released by the operator (it carries the epoch annotation); it may run.
	stateReleased
	// stateUngated: matches the selector but carries no hold and was never released (admitted around
	// the webhook, or its hold was removed by someone else); it may run.
	stateUngated
	// stateConditional: released on the exit of another pod (AnnotationStartOnExit) and not yet
	// released outright; the grant server starts its app as soon as it accepts that pod's exit report,
	// so it may run.
	stateConditional
)

// classify tells what a pod of a singleton is. A pod being deleted is not terminal: until the kubelet
// confirms the stop it is still in the API, and restarts or CrashLoopBackOff never count as gone —
// unless its status-sidecar reported the exit of every app process (exitReported).
func classify(pod *corev1.Pod) podState {
	if terminal(pod) || exitReported(pod) {
		return stateTerminal
	}
	if _, ok := pod.Annotations[singletonv1.AnnotationEpoch]; ok {
		return stateReleased
	}
	if _, ok := pod.Annotations[singletonv1.AnnotationStartGranted]; ok {
		return stateReleased // a grant is never taken back
	}
	if _, ok := pod.Annotations[singletonv1.AnnotationStartOnExit]; ok {
		return stateConditional // also when the value does not parse: it may have been granted
	}
	if pod.Labels[singletonv1.LabelManaged] != "true" {
		return stateUngated
	}
	switch singletonv1.HoldMode(pod.Annotations[singletonv1.AnnotationHoldMode]) {
	case singletonv1.HoldModeWrapper:
		return stateHeld
	case singletonv1.HoldModeSchedulingGate:
		if hasSchedulingGate(pod) {
			return stateHeld
		}
	}
	return stateUngated
}

// terminal reports whether the pod is Succeeded or Failed and none of its containers still runs.
func terminal(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		return false
	}
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, cs := range statuses {
			if cs.State.Terminated == nil && (cs.State.Running != nil || cs.State.Waiting != nil) {
				return false
			}
		}
	}
	return true
}

// exitReported reports whether the pod is being deleted and the operator recorded its status-sidecar's
// report that the process of every app container exited (singletonv1.ExitRecorded). Such a pod cannot
// run its app again: the sidecar reports only after it fenced the pod, and a wrapper finding the fence
// starts no app — also one the kubelet restarts while the pod terminates, which it does.
func exitReported(pod *corev1.Pod) bool { return singletonv1.ExitRecorded(pod) }

// awaitsRelease reports whether the pod is held, or released only on another pod's exit: either way the
// operator has a release of it to write.
func awaitsRelease(pod *corev1.Pod) bool {
	state := classify(pod)
	return state == stateHeld || state == stateConditional
}

func hasSchedulingGate(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
		return g.Name == singletonv1.SchedulingGate
	})
}

// podEpoch is the fencing epoch stamped on a released pod, 0 if none.
func podEpoch(pod *corev1.Pod) int64 {
	v, err := strconv.ParseInt(pod.Annotations[singletonv1.AnnotationEpoch], 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// readinessGateTrue reports whether the pod's singleton readiness gate condition is True.
func readinessGateTrue(pod *corev1.Pod) bool {
	c := opsutil.PodCondition(pod, singletonv1.ReadinessGate)
	return c != nil && c.Status == corev1.ConditionTrue
}

// nodeFenced reports whether a pod that vanished from node may be taken as stopped: the node is Ready
// (its kubelet confirmed the stop) or carries the out-of-service taint (an administrator confirmed the
// node is shut down). A node that no longer exists counts as fenced: it is removed only once the
// machine is gone.
func nodeFenced(node *corev1.Node) bool {
	if node == nil {
		return true
	}
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeOutOfService {
			return true
		}
	}
	return opsutil.NodeReady(node)
}

// startPrepared reports whether a held pod can start its main process at once when released: a Wrapper
// pod whose containers all run (the wrapper waits for the grant; the kubelet has pulled, created and
// started everything), or any SchedulingGate pod, which cannot be prepared before its release.
func startPrepared(pod *corev1.Pod) bool {
	if singletonv1.HoldMode(pod.Annotations[singletonv1.AnnotationHoldMode]) != singletonv1.HoldModeWrapper || hasSchedulingGate(pod) {
		return true
	}
	if len(pod.Status.ContainerStatuses) < len(pod.Spec.Containers) {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Running == nil {
			return false
		}
	}
	return true
}
