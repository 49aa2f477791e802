package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// A rollout aware of a StatefulSetLock's writer (lease-operator, app.anukkrit.me/v1): before a step
// lowers the partition over the lock's writer pod, the operator asks the lock for a planned
// switchover (the lock's app.anukkrit.me/switchover-to annotation) and lowers the partition once the
// lock's status.writerPod is another pod, so the writer's pod is deleted for update only after the
// writer role left it.

// SwitchoverStatus is the planned switchover a step waits for.
type SwitchoverStatus struct {
	// lock is the StatefulSetLock whose writer the step would roll.
	// +kubebuilder:validation:MaxLength=253
	Lock string `json:"lock"`
	// from is the writer pod the step would roll.
	// +kubebuilder:validation:MaxLength=253
	From string `json:"from"`
	// to is the pod the switchover was asked to move the writer to; unset while no pod can take over.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	To string `json:"to,omitempty"`
	// partition is the partition of the step that waits.
	// +kubebuilder:validation:Minimum=0
	Partition int32 `json:"partition"`
	// since is when the step started waiting.
	Since metav1.Time `json:"since"`
	// requestedAt is when the switchover annotation was written; the step waits for the lock at most
	// the operator's switchover timeout from then, then rolls the pod anyway (a failover).
	// +optional
	RequestedAt *metav1.Time `json:"requestedAt,omitempty"`
}

// The step state, and the Events, of a switchover.
const (
	// StepWaitForSwitchover: the step's checks passed; its partition move would roll the pod of a
	// StatefulSetLock's writer, and it waits for the lock to move the writer to another pod.
	StepWaitForSwitchover RollingPodState = "WaitForSwitchover"

	// EventSwitchoverRequested: the operator annotated a StatefulSetLock to move its writer off a pod
	// the next partition move rolls.
	EventSwitchoverRequested = "SwitchoverRequested"
	// EventSwitchoverTimedOut (Warning): the lock did not move its writer within the switchover
	// timeout; the partition moves anyway and the lock fails over when the pod is deleted.
	EventSwitchoverTimedOut = "SwitchoverTimedOut"
	// EventNoSwitchoverTarget (Warning): the StatefulSet has no other pod to take the writer role
	// (one replica); the partition moves and the write outage is the pod's restart.
	EventNoSwitchoverTarget = "NoSwitchoverTarget"
)
