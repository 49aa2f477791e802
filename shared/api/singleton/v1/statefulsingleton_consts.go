package v1

// Phases of a StatefulSingleton (status.phase).
const (
	// PhaseRunning: one pod is active and no other pod of the singleton is pending.
	PhaseRunning StatefulSingletonPhase = "Running"
	// PhaseTransitioning: a new pod is held while the previous one terminates.
	PhaseTransitioning StatefulSingletonPhase = "Transitioning"
	// PhaseFailed: a transition exceeded maxTransitionTime or cannot proceed; the new pod stays held.
	PhaseFailed StatefulSingletonPhase = "Failed"
)

// Condition types of a StatefulSingleton (status.conditions[].type).
const (
	// ConditionReady is the summary: True when an active pod runs and no transition is stuck.
	ConditionReady = "Ready"
	// ConditionTransitionTimedOut is True while a transition has lasted longer than maxTransitionTime.
	ConditionTransitionTimedOut = "TransitionTimedOut"
	// ConditionFencingRequired is True while the previous pod vanished from a node that is NotReady or
	// Unknown, so its stop was never confirmed; release waits for the node to be Ready again or to carry
	// the node.kubernetes.io/out-of-service taint.
	ConditionFencingRequired = "FencingRequired"
	// ConditionUngatedPod is True while a pod matches the selector but carries no hold (it was admitted
	// around the webhook).
	ConditionUngatedPod = "UngatedPod"
	// ConditionOverlapDetected is True when container timestamps show that a new pod started before the
	// previous one finished.
	ConditionOverlapDetected = "OverlapDetected"
	// ConditionSelectorConflict is True when the selector overlaps another StatefulSingleton's in the
	// same namespace; the older StatefulSingleton keeps the pods.
	ConditionSelectorConflict = "SelectorConflict"
)

// Condition reasons and Event reasons of a StatefulSingleton.
const (
	// ReasonPodStarted: a pod was released and is the active pod (the original operator's Event reason).
	ReasonPodStarted = "PodStarted"
	// ReasonPodTransition: a handover from one pod to another started (the original operator's Event reason).
	ReasonPodTransition = "PodTransition"
	// ReasonTransitionTimeout: a transition exceeded maxTransitionTime (the original operator's Event reason).
	ReasonTransitionTimeout = "TransitionTimeout"
	// ReasonHoldFallback: a pod of a Wrapper singleton was admitted with the scheduling gate instead
	// (Event on the pod; the annotation apps.statefulsingleton.com/hold-fallback-reason says why).
	ReasonHoldFallback = "HoldFallback"
	// ReasonActive: the Ready condition's reason when a pod is active and nothing is pending.
	ReasonActive = "Active"
	// ReasonNoPods: no pod matches the selector.
	ReasonNoPods = "NoPods"
	// ReasonWaitingForOldPod: a new pod is held until the previous one is gone.
	ReasonWaitingForOldPod = "WaitingForOldPod"
	// ReasonNodeNotReady: the previous pod's node is NotReady/Unknown (FencingRequired).
	ReasonNodeNotReady = "NodeNotReady"
)

// Finalizer is put on every StatefulSingleton so that deleting it mid-transition finishes or releases
// safely instead of stranding a held pod.
const Finalizer = "apps.openshift.statefulsingleton.com/finalizer"
