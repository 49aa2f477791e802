package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HoldMode names the mechanism that keeps a new pod of a singleton from running its main process until
// the operator has confirmed that the previous pod is gone.
// +kubebuilder:validation:Enum=Wrapper;SchedulingGate
type HoldMode string

const (
	// HoldModeWrapper is the original StatefulSingleton operator's mechanism and the default: the pod is scheduled and started ahead of
	// time, but every app container's entrypoint is wrapped and blocked until the operator grants the
	// start (status-sidecar, start signal under /var/run/signal, original command in ORIGINAL_ENTRYPOINT).
	HoldModeWrapper HoldMode = "Wrapper"
	// HoldModeSchedulingGate creates the pod with a scheduling gate that the operator removes when it is
	// safe. No command rewrite and no sidecar, but image pulls and volume attachment happen only after
	// the release.
	HoldModeSchedulingGate HoldMode = "SchedulingGate"
)

// AntiAffinityMode says how strictly the pods of one singleton are kept off each other's node.
// +kubebuilder:validation:Enum=Preferred;Required
type AntiAffinityMode string

const (
	// AntiAffinityPreferred is the original StatefulSingleton operator's term and the default: preferred
	// pod anti-affinity, weight 100 on kubernetes.io/hostname; the scheduler may still place two pods of
	// the singleton on one node.
	AntiAffinityPreferred AntiAffinityMode = "Preferred"
	// AntiAffinityRequired also adds the same term as requiredDuringSchedulingIgnoredDuringExecution: a
	// new pod is never scheduled on a node where another pod of the singleton is (hard spread).
	AntiAffinityRequired AntiAffinityMode = "Required"
)

// StatefulSingletonPhase is the coarse state of a StatefulSingleton.
// +kubebuilder:validation:Enum=Running;Transitioning;Failed
type StatefulSingletonPhase string

// StatefulSingletonSpec is the desired behaviour of a StatefulSingleton: which pods form the singleton
// and how a handover from one pod to the next is timed.
type StatefulSingletonSpec struct {
	// selector selects, in the StatefulSingleton's namespace, the pods of which at most one may run its
	// main process at any time (typically the pods of one Deployment or StatefulSet). It must not be
	// empty and cannot be changed after creation: changing it would move pods in and out of the
	// singleton in the middle of a handover. Create a new StatefulSingleton instead.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.selector is immutable"
	// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",message="spec.selector must not be empty (an empty selector would select every pod in the namespace)"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="spec.selector.matchExpressions[].operator must be In, NotIn, Exists or DoesNotExist",fieldPath=".matchExpressions"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['In', 'NotIn']) || (has(e.values) && size(e.values) > 0))",message="spec.selector.matchExpressions[].values must not be empty when the operator is In or NotIn",fieldPath=".matchExpressions"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['Exists', 'DoesNotExist']) || !has(e.values) || size(e.values) == 0)",message="spec.selector.matchExpressions[].values must be empty when the operator is Exists or DoesNotExist",fieldPath=".matchExpressions"
	Selector metav1.LabelSelector `json:"selector"`

	// terminationGracePeriod is the grace period, in seconds, given to a managed pod to shut down
	// cleanly; it is written into the pod's terminationGracePeriodSeconds at creation (see
	// respectPodGracePeriod). Defaults to 30; must be at least 1 (no upper bound, as in the original
	// operator). A value greater than maxTransitionTime is accepted (the original operator's manifests
	// use it) but makes every slow shutdown report a timed-out transition, so keep it at most
	// maxTransitionTime.
	// +optional
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=1
	TerminationGracePeriod int32 `json:"terminationGracePeriod,omitempty"`

	// maxTransitionTime is the time, in seconds, a handover (old pod terminating → new pod released) is
	// expected to take at most. Past it the operator reports the transition as timed out (phase Failed,
	// condition TransitionTimedOut, Event TransitionTimeout) but keeps holding the new pod: a deadline
	// never releases a pod while the old one may still run. Defaults to 300; must be at least 1 (no
	// upper bound, as in the original operator).
	// +optional
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=1
	MaxTransitionTime int32 `json:"maxTransitionTime,omitempty"`

	// respectPodGracePeriod, when true, keeps a pod's own terminationGracePeriodSeconds if it is longer
	// than terminationGracePeriod; when false, terminationGracePeriod always wins. Defaults to true.
	// +optional
	// +kubebuilder:default=true
	RespectPodGracePeriod *bool `json:"respectPodGracePeriod,omitempty"`

	// holdMode selects how a new pod is kept from running until the previous one is gone.
	// "Wrapper" (default, the original StatefulSingleton operator's mechanism): the pod is scheduled and its containers started ahead of
	// time, each app container's entrypoint wrapped and blocked until the operator grants the start, so
	// the handover gap is only the process start. "SchedulingGate": the pod is created with a
	// scheduling gate that the operator removes when safe; no entrypoint rewrite or sidecar, but the
	// gap includes scheduling, image pull and container creation. A pod whose entrypoint cannot be
	// determined in Wrapper mode falls back to SchedulingGate (with an Event saying why).
	// +optional
	// +kubebuilder:default=Wrapper
	HoldMode HoldMode `json:"holdMode,omitempty"`

	// antiAffinity selects the pod anti-affinity admission adds against the other pods of this
	// singleton on the same node (kubernetes.io/hostname). "Preferred" (default, the original
	// StatefulSingleton operator's term): preferred, weight 100. "Required": the same term is also added
	// as requiredDuringSchedulingIgnoredDuringExecution, so a new pod is only scheduled on a node
	// without another pod of the singleton (hard spread, e.g. to keep a handover off a failing node).
	// With Required, a RollingUpdate rollout needs a second schedulable node: the new pod is created
	// while the old one still runs, and stays Pending on a single node. Applies to pods admitted after
	// the change.
	// +optional
	// +kubebuilder:default=Preferred
	AntiAffinity AntiAffinityMode `json:"antiAffinity,omitempty"`

	// successorWait is the longest time, in seconds, the app of a running Wrapper-mode pod that is
	// deleted from outside (kubectl delete, an eviction, a node drain) keeps running before it gets the
	// stop signal, while the Deployment's replacement pod starts: the app is stopped as soon as the
	// replacement runs and waits for its grant, so the gap between the two processes is the
	// handover's, not the new pod's scheduling and start. It never takes more than half the deletion's
	// grace period, and the app is stopped at once when no replacement can be prepared: a pod not of a
	// ReplicaSet (a StatefulSet creates the replacement only once the old pod is gone), no replacement
	// within a second (scale to zero), or one held with the scheduling gate. A rollout's old pod is
	// deleted by the operator once the new one runs and does not wait. 0 stops the app at once, as
	// Kubernetes does. Defaults to 10; at most 30.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=30
	SuccessorWait *int32 `json:"successorWait,omitempty"`
}

// StatefulSingletonStatus is the observed state of a StatefulSingleton, written by the operator.
type StatefulSingletonStatus struct {
	// observedGeneration is the metadata.generation of the StatefulSingleton that the operator last
	// acted on; status fields describe that generation.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// activePod is the name of the pod currently allowed to run its main process, empty if none.
	// +optional
	ActivePod string `json:"activePod,omitempty"`

	// activePodUID is the UID of activePod. Pods of a StatefulSet reuse their name, so the UID is what
	// identifies the pod that was released.
	// +optional
	ActivePodUID string `json:"activePodUID,omitempty"`
	// activePodNode is the node of activePod once it is scheduled. When the active pod disappears the
	// operator checks this node: if it is NotReady or Unknown the pod's stop was never confirmed, and
	// no other pod is released until the node is Ready again or tainted node.kubernetes.io/out-of-service.
	// +optional
	ActivePodNode string `json:"activePodNode,omitempty"`

	// phase is the coarse state: "Running" (one active pod, nothing pending), "Transitioning" (a new
	// pod is held while the previous one terminates) or "Failed" (a transition exceeded
	// maxTransitionTime or cannot proceed; see message and conditions — the new pod stays held).
	// +optional
	Phase StatefulSingletonPhase `json:"phase,omitempty"`

	// transitionTimestamp is when the current or last transition started.
	// +optional
	TransitionTimestamp *metav1.Time `json:"transitionTimestamp,omitempty"`

	// statusTimestamp is when the operator last wrote this status.
	// +optional
	StatusTimestamp *metav1.Time `json:"statusTimestamp,omitempty"`

	// message is a human-readable explanation of the phase (e.g. which pod is awaited and for how long).
	// +optional
	Message string `json:"message,omitempty"`

	// epoch is the fencing epoch: it increases by one on every release of a pod, is never reused (also
	// across operator restarts) and is stamped on the released pod as the annotation
	// apps.statefulsingleton.com/epoch, so the application can read it through the downward API and
	// fence its storage writes against an older instance.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Epoch int64 `json:"epoch,omitempty"`

	// lastTransitionDuration is how long the last completed handover held the new pod after the old
	// one was gone (old pod gone → new pod released), e.g. "850ms".
	// +optional
	LastTransitionDuration *metav1.Duration `json:"lastTransitionDuration,omitempty"`

	// handover describes the pod the current handover waits for while it terminates, so a reader sees
	// how long the handover will still wait; it is unset when no handover waits for a terminating pod.
	// +optional
	Handover *HandoverStatus `json:"handover,omitempty"`

	// conditions describe the state in detail. "Ready" is the summary (True when an active pod runs and
	// no transition is stuck); others include TransitionTimedOut, FencingRequired, UngatedPod,
	// OverlapDetected and SelectorConflict.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// HandoverStatus is the grace-period progress of the pod a handover waits for. It records when the
// pod's grace period started and how long it is, not the elapsed time: the operator does not rewrite
// the status every second. The time the pod has been terminating is now − terminatingSince (the
// "Terminating" printer column shows it as an age); it is given at most gracePeriodSeconds before the
// kubelet kills it, after which the handover waits only for the kubelet's confirmation.
type HandoverStatus struct {
	// waitingFor is the name of the terminating pod the held pod waits for.
	// +required
	WaitingFor string `json:"waitingFor"`

	// waitingForUID is the UID of waitingFor.
	// +optional
	WaitingForUID string `json:"waitingForUID,omitempty"`

	// gracePeriodSeconds is the pod's deletion grace period (metadata.deletionGracePeriodSeconds).
	// +optional
	// +kubebuilder:validation:Minimum=0
	GracePeriodSeconds int64 `json:"gracePeriodSeconds,omitempty"`

	// terminatingSince is when the pod's deletion was requested: metadata.deletionTimestamp −
	// metadata.deletionGracePeriodSeconds. Elapsed = now − terminatingSince.
	// +required
	TerminatingSince metav1.Time `json:"terminatingSince"`
}

// StatefulSingleton makes the pods it selects (typically those of a one-replica Deployment or
// StatefulSet) run their main process one at a time: a new pod is held until the previous one is gone,
// then released, so two instances never run in parallel during rollouts, drains or pod deletions.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=statefulops,shortName=sss
// +kubebuilder:printcolumn:name="Status",type="string",JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="Active Pod",type="string",JSONPath=".status.activePod"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Waiting For",type="string",JSONPath=".status.handover.waitingFor",priority=1
// +kubebuilder:printcolumn:name="Terminating",type="date",JSONPath=".status.handover.terminatingSince",priority=1
// +kubebuilder:printcolumn:name="Grace",type="integer",JSONPath=".status.handover.gracePeriodSeconds",priority=1
// +kubebuilder:printcolumn:name="Hold Mode",type="string",JSONPath=".spec.holdMode",priority=1
// +kubebuilder:printcolumn:name="Epoch",type="integer",JSONPath=".status.epoch",priority=1
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type StatefulSingleton struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec is the desired behaviour of the singleton.
	// +required
	Spec StatefulSingletonSpec `json:"spec"`

	// status is the observed state, written by the operator.
	// +optional
	Status StatefulSingletonStatus `json:"status,omitzero"`
}

// StatefulSingletonList is a list of StatefulSingletons.
// +kubebuilder:object:root=true
type StatefulSingletonList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitzero"`
	// items are the StatefulSingletons.
	Items []StatefulSingleton `json:"items"`
}

func init() {
	SchemeBuilder.Register(&StatefulSingleton{}, &StatefulSingletonList{})
}
