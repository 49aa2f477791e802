package controller

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// Replacement rules. A pod is retired (deleted, never force-deleted) and replaced by a new identity
// when it Failed, when its node has been lost past the tolerance (or is out of service), when it has
// been Pending past pendingThresholdSeconds, when it has been not Ready past unhealthyThresholdSeconds
// after having been Ready, or never Ready past startupThresholdSeconds. Each rule that has not fired
// yet returns the moment it would, so that the reconcile is requeued then instead of sleeping.

// outOfServiceTaint is the taint an administrator or fencing agent sets on a node that is shut down.
const outOfServiceTaint = "node.kubernetes.io/out-of-service"

// verdict is what the rules say about one pod.
type verdict struct {
	reason  clusterv1alpha1.RetirementReason // empty: keep the pod
	message string
	stuck   *stuck    // kept although past pendingThresholdSeconds: replacing it cannot help (stuck.go)
	since   time.Time // when the pod became unusable, for the replacement-latency metric
	recheck time.Time // when a rule that has not fired yet would fire; zero: none
}

func (v *verdict) later(t time.Time) {
	if v.recheck.IsZero() || t.Before(v.recheck) {
		v.recheck = t
	}
}

// nodeLost reports whether the node counts as lost at now, since when it has been unusable, and when
// it would count as lost if it does not yet.
func nodeLost(sc *clusterv1alpha1.StatefulCluster, node *corev1.Node, now time.Time) (lost bool, since, at time.Time, msg string) {
	if node == nil {
		return true, now, time.Time{}, "node not found"
	}
	if ptr.Deref(sc.Spec.ReplaceOnNodeOutOfService, false) {
		for _, t := range node.Spec.Taints {
			if t.Key == outOfServiceTaint {
				since := now
				if t.TimeAdded != nil {
					since = t.TimeAdded.Time
				}
				return true, since, time.Time{}, fmt.Sprintf("node %s is tainted %s", node.Name, outOfServiceTaint)
			}
		}
	}
	for _, c := range node.Status.Conditions {
		if c.Type != corev1.NodeReady || c.Status == corev1.ConditionTrue {
			continue
		}
		tolerance := time.Duration(ptr.Deref(sc.Spec.NodeLossToleranceSeconds, 0)) * time.Second
		since := c.LastTransitionTime.Time
		if now.Sub(since) >= tolerance {
			return true, since, time.Time{}, fmt.Sprintf("node %s not Ready (%s) for %ds", node.Name, c.Status, int(now.Sub(since).Seconds()))
		}
		return false, since, since.Add(tolerance), ""
	}
	return false, time.Time{}, time.Time{}, ""
}

// judge applies the replacement rules to a pod that is not terminating. wasReady says whether the
// operator has seen the pod Ready before. whyStuck, when not nil, says why replacing a Pending pod
// cannot help (stuck.go); it is asked only once the pod is past pendingThresholdSeconds.
func judge(sc *clusterv1alpha1.StatefulCluster, pod *corev1.Pod, node *corev1.Node, wasReady bool, now time.Time, whyStuck func() *stuck) verdict {
	var v verdict
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		v.reason, v.since = clusterv1alpha1.RetiredFailed, now
		v.message = fmt.Sprintf("pod phase %s", pod.Status.Phase)
		if pod.Status.Reason != "" {
			v.message += ": " + pod.Status.Reason
		}
		return v
	}
	if pod.Spec.NodeName != "" {
		lost, since, at, msg := nodeLost(sc, node, now)
		if lost {
			v.reason, v.since, v.message = clusterv1alpha1.RetiredNodeLost, since, msg
			return v
		}
		if !at.IsZero() {
			v.later(at)
		}
	}
	if pod.Status.Phase == "" || pod.Status.Phase == corev1.PodPending {
		threshold := time.Duration(ptr.Deref(sc.Spec.PendingThresholdSeconds, 0)) * time.Second
		created := pod.CreationTimestamp.Time
		if c := opsutil.PodCondition(pod, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionTrue && c.LastTransitionTime.After(created) {
			// Scheduled at last (e.g. once its claim bound): the pod gets the threshold again to start.
			created = c.LastTransitionTime.Time
		}
		if now.Sub(created) >= threshold {
			if whyStuck != nil {
				if v.stuck = whyStuck(); v.stuck != nil {
					return v // reported, not replaced; a change of the pod or its claims wakes the reconcile
				}
			}
			v.reason, v.since = clusterv1alpha1.RetiredPending, created.Add(threshold)
			v.message = fmt.Sprintf("pending for %ds", int(now.Sub(created).Seconds()))
			return v
		}
		v.later(created.Add(threshold))
		return v
	}
	cond := opsutil.PodReadyCondition(pod)
	if opsutil.PodReady(pod) {
		return v
	}
	if wasReady && cond != nil {
		threshold := time.Duration(ptr.Deref(sc.Spec.UnhealthyThresholdSeconds, 0)) * time.Second
		since := cond.LastTransitionTime.Time
		if now.Sub(since) >= threshold {
			v.reason, v.since = clusterv1alpha1.RetiredUnhealthy, since
			v.message = fmt.Sprintf("not Ready for %ds after having been Ready", int(now.Sub(since).Seconds()))
			return v
		}
		v.later(since.Add(threshold))
		return v
	}
	if sc.Spec.StartupThresholdSeconds != nil {
		threshold := time.Duration(*sc.Spec.StartupThresholdSeconds) * time.Second
		start := pod.CreationTimestamp.Time
		if pod.Status.StartTime != nil {
			start = pod.Status.StartTime.Time
		}
		if now.Sub(start) >= threshold {
			v.reason, v.since = clusterv1alpha1.RetiredUnhealthy, start
			v.message = fmt.Sprintf("never Ready in %ds", int(now.Sub(start).Seconds()))
			return v
		}
		v.later(start.Add(threshold))
	}
	return v
}

// everReady reports whether a not-Ready pod was Ready before, as far as its status tells after an
// operator restart (the operator's memory is the primary source): the kubelet sets Ready=False when
// the pod starts, so a Ready transition well after the start means it went Ready and back.
func everReady(pod *corev1.Pod) bool {
	cond := opsutil.PodReadyCondition(pod)
	if cond == nil || pod.Status.StartTime == nil {
		return false
	}
	return cond.LastTransitionTime.Sub(pod.Status.StartTime.Time) > 5*time.Second
}

// available reports whether a Ready pod has been Ready for minReadySeconds, and when it will be if not.
func available(sc *clusterv1alpha1.StatefulCluster, pod *corev1.Pod, now time.Time) (bool, time.Time) {
	cond := opsutil.PodReadyCondition(pod)
	if !opsutil.PodReady(pod) {
		return false, time.Time{}
	}
	at := cond.LastTransitionTime.Add(time.Duration(sc.Spec.MinReadySeconds) * time.Second)
	if sc.Spec.MinReadySeconds == 0 || !now.Before(at) {
		return true, time.Time{}
	}
	return false, at
}
