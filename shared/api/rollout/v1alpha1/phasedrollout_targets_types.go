package v1alpha1

// Several StatefulSets in one ordered rollout (spec.targetRefs).

// TargetState is the state of one StatefulSet of spec.targetRefs (status.targets[].state).
// +kubebuilder:validation:Enum=Updated;Active;Waiting;NotReady;NotFound
type TargetState string

const (
	// TargetUpdated: every pod runs the StatefulSet's update revision and is Ready.
	TargetUpdated TargetState = "Updated"
	// TargetActive: the StatefulSet the rollout works on (status.activeTarget).
	TargetActive TargetState = "Active"
	// TargetWaiting: its turn has not come; held at partition = replicas.
	TargetWaiting TargetState = "Waiting"
	// TargetNotReady: no rollout is pending but not every pod is Ready (or the StatefulSet controller
	// has not caught up yet): the StatefulSets after it wait.
	TargetNotReady TargetState = "NotReady"
	// TargetNotFound: the StatefulSet does not exist.
	TargetNotFound TargetState = "NotFound"
)

// TargetStatus is the state of one StatefulSet of spec.targetRefs.
type TargetStatus struct {
	// name is the StatefulSet's name.
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// state is "Updated", "Active", "Waiting", "NotReady" or "NotFound".
	State TargetState `json:"state"`
	// currentRevision is the StatefulSet's current revision.
	// +optional
	CurrentRevision string `json:"currentRevision,omitempty"`
	// updateRevision is the StatefulSet's update revision.
	// +optional
	UpdateRevision string `json:"updateRevision,omitempty"`
	// replicas is the StatefulSet's spec.replicas.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Replicas int32 `json:"replicas,omitempty"`
	// updatedReplicas is the number of its pods on the update revision.
	// +optional
	// +kubebuilder:validation:Minimum=0
	UpdatedReplicas int32 `json:"updatedReplicas,omitempty"`
	// readyReplicas is the number of its pods that are Ready.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// partition is its spec.updateStrategy.rollingUpdate.partition.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Partition *int32 `json:"partition,omitempty"`
}

// Targets returns the StatefulSets the PhasedRollout manages, in rollout order: spec.targetRefs, or
// spec.targetRef alone.
func (s *PhasedRolloutSpec) Targets() []string {
	if len(s.TargetRefs) > 0 {
		return s.TargetRefs
	}
	if s.TargetRef == "" {
		return nil
	}
	return []string{s.TargetRef}
}

// Events of spec.targetRefs.
const (
	// EventTargetStarted: the ordered rollout moves on to the next StatefulSet of spec.targetRefs.
	EventTargetStarted = "TargetStarted"
	// EventWaitForTarget: a StatefulSet of spec.targetRefs waits for an earlier one to be updated and
	// Ready.
	EventWaitForTarget = "WaitForTarget"
)
