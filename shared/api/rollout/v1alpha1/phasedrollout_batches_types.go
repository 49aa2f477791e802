package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Steps in batches and stuck-pod recovery (issue 18): spec.steps, spec.recreateStuckPods,
// spec.progressDeadlineSeconds, status.batch and status.lastStuckPodRecreated.

// RolloutStep is one batch of a rollout: how many more pods it releases, and how long to wait after
// its checks passed.
type RolloutStep struct {
	// pods is how many more pods this step releases (the partition moves down by pods, never below
	// 0). Never more pods are unavailable at once than the StatefulSet's
	// spec.updateStrategy.rollingUpdate.maxUnavailable allows (default 1): the rest of the batch is
	// released as the first pods become available. Minimum 1.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	Pods int32 `json:"pods"`

	// pause is an extra wait after the step's checks passed, before the next step releases its pods
	// (Kruise Rollouts' order: the batch is updated, then analysed, then paused). Unset: no wait.
	// +optional
	Pause *StepPause `json:"pause,omitempty"`
}

// StepPause is a wait after a step's checks passed.
type StepPause struct {
	// duration is how long to wait, a Go duration such as "30s", "5m" or "1h30m", from 1s to 24h.
	// +required
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') && duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="pause.duration must be a duration such as 30s, 5m or 1h30m, from 1s to 24h"
	Duration string `json:"duration"`
}

// BatchStatus is the batch of spec.steps being released or checked.
type BatchStatus struct {
	// step is the index in spec.steps of the step this batch belongs to, counted from 0 (it keeps
	// counting when the last step repeats).
	// +kubebuilder:validation:Minimum=0
	Step int32 `json:"step"`

	// pods is the batch size: the step's pods, bounded by the pods left to release.
	// +kubebuilder:validation:Minimum=0
	Pods int32 `json:"pods"`

	// released is how many pods of the batch are released so far (below pods while maxUnavailable
	// holds the rest).
	// +kubebuilder:validation:Minimum=0
	Released int32 `json:"released"`

	// fromPartition is the partition before the batch.
	// +kubebuilder:validation:Minimum=0
	FromPartition int32 `json:"fromPartition"`

	// toPartition is the partition once the whole batch is released; its checks run there.
	// +kubebuilder:validation:Minimum=0
	ToPartition int32 `json:"toPartition"`

	// pausedUntil is set once the batch's checks passed and its step has a pause: the next step
	// starts then.
	// +optional
	PausedUntil *metav1.Time `json:"pausedUntil,omitempty"`
}

// StuckPodRecord is a pod deleted by recreateStuckPods.
type StuckPodRecord struct {
	// pod is the deleted pod's name.
	Pod string `json:"pod"`
	// uid is the deleted pod's UID.
	UID string `json:"uid"`
	// revision is the revision the pod ran (its controller-revision-hash label).
	Revision string `json:"revision"`
	// updateRevision is the StatefulSet's update revision when the pod was deleted.
	UpdateRevision string `json:"updateRevision"`
	// partition is the partition of the step that deleted it (one pod per step).
	Partition int32 `json:"partition"`
	// notReadySeconds is how long the pod had not been Ready.
	NotReadySeconds int64 `json:"notReadySeconds"`
	// time is when it was deleted.
	Time metav1.Time `json:"time"`
}

// Event reasons of steps in batches and stuck-pod recovery.
const (
	// EventStepReleased is recorded when a step of spec.steps releases pods (each write of the
	// partition of a batch).
	EventStepReleased = "StepReleased"
	// EventWaitForMaxUnavailable is recorded when a batch waits for released pods to become available
	// before releasing more (the StatefulSet's maxUnavailable).
	EventWaitForMaxUnavailable = "WaitForMaxUnavailable"
	// EventStepPaused is recorded when a step's checks passed and its pause starts.
	EventStepPaused = "StepPaused"
	// EventStuckPodRecreated is recorded when recreateStuckPods deletes a pod.
	EventStuckPodRecreated = "StuckPodRecreated"
)
