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
	// ConditionStalled (kstatus) is True while the StatefulSingleton cannot make progress without a
	// change by the user (an unparsable selector, a selector overlapping an older StatefulSingleton,
	// several pods without a start hold and none active): kstatus reads it as Failed. Its reason and
	// message are the Ready condition's.
	ConditionStalled = "Stalled"
	// ConditionReconciling (kstatus) is True while a handover is in progress (a new pod is held, also
	// past maxTransitionTime or while fencing waits for a node): kstatus reads it as InProgress.
	ConditionReconciling = "Reconciling"
	// ConditionSpecWarning is True while the spec is accepted and acted on safely but is probably not
	// what the user meant (reason GracePeriodExceedsTransitionTime). It never changes what the operator
	// does, and kstatus does not read it.
	ConditionSpecWarning = "SpecWarning"
	// ConditionStrategyAdvice is True, with the advice as its message, while the strategy of the
	// Deployment whose pods the singleton holds makes handovers slower than they need be (reason
	// SlowHandoverStrategy; a Normal Event once when it turns True). It never changes what the operator
	// does, and kstatus does not read it.
	ConditionStrategyAdvice = "StrategyAdvice"
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
	// ReasonInvalidSelector: spec.selector does not parse (unknown operator, invalid label value); the
	// message is the parser's. Nothing is observed or acted on; deletion completes at once.
	ReasonInvalidSelector = "InvalidSelector"
	// ReasonSelectorOverlap: the selector overlaps an older StatefulSingleton's, which manages the pods
	// (SelectorConflict, Ready and Stalled reason, Warning Event).
	ReasonSelectorOverlap = "SelectorOverlap"
	// ReasonSeveralActivePods: two or more released pods are not terminal (OverlapDetected reason).
	ReasonSeveralActivePods = "SeveralActivePods"
	// ReasonGracePeriodExceedsTransitionTime: spec.terminationGracePeriod is greater than
	// spec.maxTransitionTime, so a pod using its grace period makes the handover report TransitionTimedOut.
	ReasonGracePeriodExceedsTransitionTime = "GracePeriodExceedsTransitionTime"
	// ReasonSlowHandoverStrategy: a Wrapper singleton's Deployment uses Recreate, or RollingUpdate with a
	// maxSurge of 0, so its new pod is created only after the old one is gone and its whole start is in
	// the handover gap (StrategyAdvice reason and Event).
	ReasonSlowHandoverStrategy = "SlowHandoverStrategy"
	// ReasonHandover: the Reconciling condition's reason while a new pod is held.
	ReasonHandover = "Handover"
	// ReasonDeletionWaiting: the StatefulSingleton is being deleted and keeps its finalizer until no pod
	// is held (Event, once when the wait begins).
	ReasonDeletionWaiting = "DeletionWaiting"
	// ReasonOrphanHeld: a held pod that no StatefulSingleton selects any more waits until every other pod
	// of its workload is gone or terminal (Warning Event on the pod, once per pod).
	ReasonOrphanHeld = "OrphanHeld"
	// ReasonOrphanReleased: such a pod was released (Event on the pod).
	ReasonOrphanReleased = "OrphanReleased"
)

// Finalizer is on a StatefulSingleton only while one of its pods is held: the operator adds it before it
// acts on a held pod (before any release or handover deletion) and removes it once no pod is held. So
// deleting it mid-transition lets the transition finish first, and a StatefulSingleton at rest (one
// running pod, none held) has none, so that uninstalling the operator never leaves it Terminating.
const Finalizer = "apps.openshift.statefulsingleton.com/finalizer"
