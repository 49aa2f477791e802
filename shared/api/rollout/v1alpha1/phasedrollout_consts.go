package v1alpha1

// Phases of a PhasedRollout (status.phase). The names are the original sts-plus-operator's, capitalised.
const (
	// PhaseRolling: a rollout is in progress.
	PhaseRolling PhasedRolloutPhase = "Rolling"
	// PhaseVerifying: every pod is on the update revision and the last pod's checks are running.
	PhaseVerifying PhasedRolloutPhase = "Verifying"
	// PhaseUpdated: idle, nothing to roll: the rollout finished and the last step passed its checks,
	// or every pod already runs the StatefulSet's revision (the partition equals the replicas). The
	// original sts-plus-operator reports "Updated" when idle, and migrating users' tooling reads it.
	PhaseUpdated PhasedRolloutPhase = "Updated"
	// PhaseFailed: a step used up check.maxTries; check.onFailure was applied.
	PhaseFailed PhasedRolloutPhase = "Failed"
	// PhaseSuspended: skipCheck (or standardRollingUpdate) is true.
	PhaseSuspended PhasedRolloutPhase = "Suspended"
	// PhaseErrorCannotManage: the StatefulSet cannot be managed (e.g. updateStrategy OnDelete, or it is
	// managed by another PhasedRollout).
	PhaseErrorCannotManage PhasedRolloutPhase = "ErrorCannotManage"
	// PhaseErrorSTSNotFound: the StatefulSet named by targetRef does not exist.
	PhaseErrorSTSNotFound PhasedRolloutPhase = "ErrorSTSNotFound"
)

// States of a rollout step (status.rollingPodStatus.status). The names are the original sts-plus-operator's.
const (
	// StepWaitForPodToBeUpdated: the pod at the partition is not yet on the update revision and Ready.
	StepWaitForPodToBeUpdated RollingPodState = "WaitForPodToBeUpdated"
	// StepWaitForAllPodsToBeAvailable: some pod of the StatefulSet is not available.
	StepWaitForAllPodsToBeAvailable RollingPodState = "WaitForAllPodsToBeAvailable"
	// StepWaitForInitialDelay: waiting check.initialDelaySeconds before the first check.
	StepWaitForInitialDelay RollingPodState = "WaitForInitialDelay"
	// StepWaitForChecks: checks are running until check.successThreshold consecutive passes.
	StepWaitForChecks RollingPodState = "WaitForChecks"
	// StepPrometheusError: the last query could not be evaluated; it does not count as a pass.
	StepPrometheusError RollingPodState = "PrometheusError"
)

// Condition types of a PhasedRollout (status.conditions[].type).
const (
	// ConditionReady is the summary: True when the rollout is idle or progressing without error.
	ConditionReady = "Ready"
	// ConditionUpdated is True when every pod runs the update revision and the last step passed.
	ConditionUpdated = "Updated"
	// ConditionProgressing is True while a rollout is in progress.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when a rollout failed (check.maxTries exhausted) or cannot proceed.
	ConditionDegraded = "Degraded"
	// ConditionStalled (kstatus) is True when the PhasedRollout cannot make progress without a change
	// by the user: its StatefulSet is missing, cannot be managed, a step used up check.maxTries, or the
	// spec holds something the API server could not refuse (a query that does not parse).
	ConditionStalled = "Stalled"
	// ConditionReconciling (kstatus) is True while a rollout is in progress (phases Rolling and
	// Verifying).
	ConditionReconciling = "Reconciling"
)

// Condition reasons that are not a phase (the conditions derived from the phase carry it as reason).
const (
	// ReasonInvalidQuery: spec.check.query.expr is not valid PromQL.
	ReasonInvalidQuery = "InvalidQuery"
	// ReasonInvalidURL: spec.check.query.url does not parse or has no host.
	ReasonInvalidURL = "InvalidURL"
)

// Event reasons of a PhasedRollout. RolloutStarted, RolloutCompleted, CannotManage, Suspended and
// PrometheusConfigError are the original sts-plus-operator's.
const (
	EventRolloutStarted        = "RolloutStarted"
	EventRolloutCompleted      = "RolloutCompleted"
	EventCannotManage          = "CannotManage"
	EventSuspended             = "Suspended"
	EventPrometheusConfigError = "PrometheusConfigError"
	// EventRolloutFailed is recorded when a step used up check.maxTries.
	EventRolloutFailed = "RolloutFailed"
	// EventRolloutAdopted is recorded when a PhasedRollout takes over a rollout the StatefulSet
	// controller had already started.
	EventRolloutAdopted = "RolloutAdopted"
	// EventScaledDuringRollout is recorded when the StatefulSet is scaled up during a rollout.
	EventScaledDuringRollout = "ScaledDuringRollout"
	// EventPartitionLeftOnDeletion is recorded on the StatefulSet when a PhasedRollout deleted
	// mid-rollout leaves the partition in place instead of releasing the remaining pods unchecked.
	EventPartitionLeftOnDeletion = "PartitionLeftOnDeletion"
	// EventPartitionReleased is recorded on the StatefulSet when the PhasedRollout that managed it no
	// longer exists and it was idle: the partition goes to 0, the normal rolling update resumes.
	EventPartitionReleased = "PartitionReleased"
	// EventOwnershipTakenOver is recorded when a PhasedRollout takes over a StatefulSet whose
	// ManagedByAnnotation names a PhasedRollout that no longer exists or targets another StatefulSet.
	EventOwnershipTakenOver = "OwnershipTakenOver"
	// EventWaitForStatefulSetController is recorded when a new PhasedRollout waits for the
	// StatefulSet controller to compute the revisions of its StatefulSet's latest spec (the partition
	// is held at replicas meanwhile).
	EventWaitForStatefulSetController = "WaitForStatefulSetController"
	// EventWaitForPodsToReturn is recorded when the template went back to the current revision and
	// the partition is held until the pods above it are back on it.
	EventWaitForPodsToReturn = "WaitForPodsToReturn"
)

// Keys on the managed StatefulSet and the credentials Secret (the same keys as the original sts-plus-operator).
const (
	// ManagedByAnnotation on the StatefulSet names the PhasedRollout that owns its partition.
	ManagedByAnnotation = "sts.plus/phasedRollout"
	// LegacyFinalizer was put on every PhasedRollout by earlier versions of the operator. It is no
	// longer added (a finalizer wedged the uninstall: kubectl deleted the operator before the
	// PhasedRollouts) and is removed from any PhasedRollout that still carries it; the StatefulSet is
	// handed back once the PhasedRollout is gone.
	LegacyFinalizer = "sts.plus/finalizer"
	// FieldManager is the server-side-apply field manager that owns the partition.
	FieldManager = "phasedrollout"
	// SecretKeyToken is the Secret key of a bearer token.
	SecretKeyToken = "token"
	// SecretKeyUsername is the Secret key of the basic-authentication user name.
	SecretKeyUsername = "username"
	// SecretKeyPassword is the Secret key of the basic-authentication password.
	SecretKeyPassword = "password"
)

// s8c (issue 18): pause, promote, abort, dry run, health-tool conditions.
const (
	// PhasePaused: spec.paused holds a rollout under way; the partition and the step's progress are kept.
	PhasePaused PhasedRolloutPhase = "Paused"
	// PhaseAborted: the AbortAnnotation stopped a rollout under way; the partition is kept (no pod is
	// rolled back by the operator). Removing the annotation resumes the step.
	PhaseAborted PhasedRolloutPhase = "Aborted"

	// ConditionAvailable (for health tools) is True when every replica of the StatefulSet is
	// available (status.availableReplicas >= spec.replicas), whether idle with the partition held or
	// during a healthy rollout.
	ConditionAvailable = "Available"
	// ReasonPaused is the reason of Reconciling=False while spec.paused holds the rollout (kstatus
	// Current: intentionally not progressing).
	ReasonPaused = "Paused"
	// ReasonAnalysisOnly is the reason of the conditions while spec.analysisOnly runs a dry run.
	ReasonAnalysisOnly = "AnalysisOnly"

	// PromoteAnnotation on the PhasedRollout (any value) passes the current step once, skipping its
	// remaining waits (initial delay, period, remaining passes; not the wait for the rolled pod to be
	// updated and available); the operator then removes it.
	PromoteAnnotation = "sts.plus/promote"
	// AbortAnnotation on the PhasedRollout (any value) stops the rollout under way and keeps the
	// partition; removing it resumes.
	AbortAnnotation = "sts.plus/abort"

	EventPaused       = "Paused"
	EventResumed      = "Resumed"
	EventPromoted     = "Promoted"
	EventAborted      = "Aborted"
	EventWouldAdvance = "WouldAdvance"
	// EventAnalysisOnly is recorded when a dry run starts analysing a revision.
	EventAnalysisOnly = "AnalysisOnly"
	EventWouldFail    = "WouldFail"
)
