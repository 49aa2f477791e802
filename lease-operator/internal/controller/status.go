package controller

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

var (
	failovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lease_operator_failovers_total",
		Help: "Changes of writer, by reason (InitialElection, WriterNotReady, WriterTerminating, WriterGone, NodeNotReady, Switchover).",
	}, []string{"reason"})
	failoverLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "lease_operator_failover_latency_seconds",
		Help:    "Time from the operator observing the writer unusable to the new writer labelled.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"reason"})
)

// stalledStates need the user: another lock manages the StatefulSet, the StatefulSet does not exist,
// or the Lease belongs to someone else. The operator keeps looking, and the lock recovers on its own
// once the user has fixed it.
var stalledStates = map[string]bool{
	leasev1.ReasonStatefulSetNotFound: true, leasev1.ReasonLeaseConflict: true, leasev1.ReasonStatefulSetConflict: true,
}

// reconcilingStates are on their way to a writer without the user: the next Ready pod is elected, a
// delayed failover happens when due, an error is retried.
var reconcilingStates = map[string]bool{
	leasev1.ReasonNoReadyPods: true, leasev1.ReasonFailoverDelayed: true, leasev1.ReasonReconcileError: true,
}

// errorStates are the states in which the Error condition is True.
var errorStates = map[string]bool{
	leasev1.ReasonStatefulSetNotFound: true, leasev1.ReasonLeaseConflict: true,
	leasev1.ReasonStatefulSetConflict: true, leasev1.ReasonReconcileError: true,
}

// applyStatus computes the lock's status from what the reconcile found and decided. Conditions change
// their lastTransitionTime only when their status changes.
func applyStatus(o *scope) {
	lock := o.lock
	st := &lock.Status
	if o.known {
		st.WriterPod, st.WriterPodUID, st.LeaseTransitions = o.writer.Name, string(o.writer.UID), o.transitions
	}
	if o.failoverReason != "" {
		st.LastFailoverTime = &metav1.Time{Time: o.failoverTime}
		st.LastFailoverReason = o.failoverReason
	}
	st.ObservedGeneration = lock.Generation
	message := o.message
	if message == "" {
		message = stateMessage(o)
	}
	set := func(condType string, status bool) {
		s := metav1.ConditionFalse
		if status {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: condType, Status: s, Reason: o.state, Message: message, ObservedGeneration: lock.Generation,
		})
	}
	set(leasev1.ConditionStalled, stalledStates[o.state])
	if o.switchoverPending != "" && o.state == leasev1.ReasonAvailable {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: leasev1.ConditionReconciling, Status: metav1.ConditionTrue, Reason: leasev1.ReasonSwitchoverPending,
			Message: o.switchoverPending, ObservedGeneration: lock.Generation,
		})
	} else {
		set(leasev1.ConditionReconciling, reconcilingStates[o.state])
	}
	if o.state == leasev1.ReasonReconcileError {
		// The election state is unknown: keep Available and Progressing as they were.
		set(leasev1.ConditionError, true)
		set(leasev1.ConditionReady, false)
		return
	}
	set(leasev1.ConditionAvailable, o.state == leasev1.ReasonAvailable || o.state == leasev1.ReasonFailoverDelayed)
	set(leasev1.ConditionProgressing, o.state == leasev1.ReasonFailoverDelayed)
	set(leasev1.ConditionError, errorStates[o.state])
	set(leasev1.ConditionReady, o.state == leasev1.ReasonAvailable && o.writer.Name != "")
}

func stateMessage(o *scope) string {
	switch o.state {
	case leasev1.ReasonAvailable:
		return fmt.Sprintf("Pod %s is the writer (epoch %d)", o.writer.Name, o.transitions)
	case leasev1.ReasonNoReadyPods:
		return "No pod of the StatefulSet is Ready: there is no writer"
	}
	return o.state
}
