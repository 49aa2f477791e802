package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SuccessWhen says which Prometheus query result counts as a passing check.
// +kubebuilder:validation:Enum=NoData;DataReturned
type SuccessWhen string

const (
	// SuccessWhenNoData is the original sts-plus-operator's semantic and the default, like a Prometheus alert: the check
	// passes when the query returns no data and fails when it returns any sample.
	SuccessWhenNoData SuccessWhen = "NoData"
	// SuccessWhenDataReturned is the inverse (the later public code's semantic): the check passes when
	// the query returns at least one sample ("healthy when data is returned") and fails on no data.
	SuccessWhenDataReturned SuccessWhen = "DataReturned"
)

// OnFailure says what happens when a rollout step runs out of check tries.
// +kubebuilder:validation:Enum=Pause;Rollback
type OnFailure string

const (
	// OnFailurePause stops the rollout (phase Failed) and leaves the partition where it is.
	OnFailurePause OnFailure = "Pause"
	// OnFailureRollback stops the rollout and re-applies the pod template of the StatefulSet's current
	// (previous) revision, so the pods already rolled return to it.
	OnFailureRollback OnFailure = "Rollback"
)

// ScaleUpPolicy says what happens to the StatefulSet's new ordinals when it is scaled up during a
// rollout.
// +kubebuilder:validation:Enum=HoldNew;Allow
type ScaleUpPolicy string

const (
	// ScaleUpHoldNew (default) raises the partition to the new replica count as soon as the operator
	// sees the scale-up, so the new ordinals are created at the current (old) revision, and the rollout
	// walks down again from the top, every step checked.
	ScaleUpHoldNew ScaleUpPolicy = "HoldNew"
	// ScaleUpAllow keeps the partition: the StatefulSet controller creates the new ordinals (all above
	// the partition) at the update revision, and the rollout continues where it was.
	ScaleUpAllow ScaleUpPolicy = "Allow"
)

// PhasedRolloutPhase is the coarse state of a PhasedRollout (status.phase).
// +kubebuilder:validation:Enum=Rolling;Verifying;Updated;Failed;Suspended;ErrorCannotManage;ErrorSTSNotFound;Paused;Aborted
type PhasedRolloutPhase string

// RollingPodState is the state of the current rollout step (status.rollingPodStatus.status).
// +kubebuilder:validation:Enum=WaitForPodToBeUpdated;WaitForAllPodsToBeAvailable;WaitForInitialDelay;WaitForChecks;PrometheusError;Inconclusive;CheckError;WaitForSwitchover
type RollingPodState string

// PhasedRolloutSpec is the desired behaviour of a PhasedRollout: which StatefulSet it rolls and how
// each step is checked.
// +kubebuilder:validation:XValidation:rule="!has(self.skipCheck) || !has(self.standardRollingUpdate) || self.skipCheck == self.standardRollingUpdate",message="spec.skipCheck and spec.standardRollingUpdate are aliases and must not have different values",fieldPath=".standardRollingUpdate"
// +kubebuilder:validation:XValidation:rule="(has(self.skipCheck) && self.skipCheck) || (has(self.standardRollingUpdate) && self.standardRollingUpdate) || (has(self.check) && (has(self.check.query) || has(self.check.webhook))) || (has(self.checks) && size(self.checks) > 0)",message="spec.check.query is required unless spec.skipCheck is true, spec.check.webhook is set or spec.checks is not empty",fieldPath=".check.query"
// +kubebuilder:validation:XValidation:rule="!has(self.analysisOnly) || !self.analysisOnly || !((has(self.skipCheck) && self.skipCheck) || (has(self.standardRollingUpdate) && self.standardRollingUpdate))",message="spec.analysisOnly runs the checks: it cannot be combined with spec.skipCheck (or standardRollingUpdate) true",fieldPath=".analysisOnly"
// +kubebuilder:validation:XValidation:rule="!has(self.checks) || !has(self.check) || !(has(self.check.query) || has(self.check.webhook)) || self.checks.all(c, c.name != 'check')",message="spec.checks[].name must not be \"check\" while spec.check has a query or a webhook: that is spec.check's name in status",fieldPath=".checks"
// +kubebuilder:validation:XValidation:rule="has(self.targetRef) != has(self.targetRefs)",message="exactly one of spec.targetRef and spec.targetRefs must be set"
// +kubebuilder:validation:XValidation:rule="has(self.targetRef) == has(oldSelf.targetRef)",message="spec.targetRef and spec.targetRefs are immutable: a PhasedRollout cannot switch between them"
type PhasedRolloutSpec struct {
	// targetRef is the name of the StatefulSet, in the PhasedRollout's namespace, to manage. Its
	// updateStrategy must be RollingUpdate; the operator owns
	// spec.updateStrategy.rollingUpdate.partition. Cannot be changed after creation: retargeting would
	// leave the previous StatefulSet's partition frozen. Create a new PhasedRollout instead.
	// At most 63 characters: a longer StatefulSet name makes pod names (<name>-<ordinal>) that are not
	// valid hostnames, so such a StatefulSet can have no pods. Exactly one of targetRef and targetRefs
	// is set.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.targetRef is immutable"
	TargetRef string `json:"targetRef,omitempty"`

	// targetRefs names several StatefulSets, in the PhasedRollout's namespace, rolled as one ordered
	// rollout (e.g. one StatefulSet per zone): never two of them rolling at once, and a StatefulSet
	// starts rolling only when every one before it in this list runs its update revision on every
	// pod and every pod is Ready. Each is rolled exactly as targetRef's, with the same checks and
	// steps; the StatefulSets whose turn has not come are held (partition = replicas). A rollout
	// under way finishes on its StatefulSet before an earlier one that changed meanwhile is rolled.
	// The status's rollout fields describe status.activeTarget; status.targets lists them all.
	// Exactly one of targetRef and targetRefs is set; immutable, like targetRef. At most 16 names.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(x, self.exists_one(y, y == x))",message="spec.targetRefs must not name a StatefulSet twice"
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.targetRefs is immutable (its order too)"
	TargetRefs []string `json:"targetRefs,omitempty"`

	// skipCheck, when true, suspends the phased rollout: the checks are skipped and the StatefulSet's
	// normal rolling update is resumed. Unset means false. standardRollingUpdate is an alias (the
	// later public code's name); if both are set they must be equal.
	// +optional
	SkipCheck *bool `json:"skipCheck,omitempty"`

	// standardRollingUpdate is an alias of skipCheck, accepted for manifests written for the later
	// public code. Prefer skipCheck; if both are set they must be equal.
	// +optional
	StandardRollingUpdate *bool `json:"standardRollingUpdate,omitempty"`

	// scaleUpDuringRollout says what happens when the StatefulSet is scaled up while a rollout is in
	// progress. "HoldNew" (default): the partition is raised to the new replica count, so the new
	// ordinals start at the current revision and the rollout walks down again from the top, every step
	// checked. "Allow": the partition stays, so the new ordinals (above it) start at the update
	// revision without a check of their own. The operator acts when it sees the scale-up: a pod the
	// StatefulSet controller created before that (with podManagementPolicy Parallel, all of them; with
	// OrderedReady, the first) keeps the update revision and is checked when the rollout reaches it.
	// +optional
	// +kubebuilder:default=HoldNew
	ScaleUpDuringRollout ScaleUpPolicy `json:"scaleUpDuringRollout,omitempty"`

	// check defines how every rollout step is verified before the next pod is rolled. When omitted,
	// its defaults apply (initialDelaySeconds 60, periodSeconds 60, successThreshold 3, successWhen
	// NoData, onFailure Pause), and check.query (or check.webhook) is then required unless skipCheck is
	// true.
	// +optional
	// +kubebuilder:default={}
	Check Check `json:"check,omitzero"`

	// checks are more checks each step must pass, beside spec.check (which, when it has a query, is
	// the first check, named "check" in status): each has a name and every field of spec.check with
	// the same defaults. A step advances only when every check reached its own successThreshold
	// consecutive passes; a check that did stops running for the rest of the step; a check that
	// used up its maxTries fails the step, and its onFailure applies (Rollback if any failing check
	// says Rollback). Each check waits its own initialDelaySeconds from when the pods are ready and
	// runs every its own periodSeconds. At most 16.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Checks []NamedCheck `json:"checks,omitempty"`

	// --- s8c: pause, dry run (issue 18). The annotations sts.plus/promote and sts.plus/abort complete them.

	// paused, when true, holds the rollout where it is: the partition does not move and no check runs;
	// the step's progress (its passes, its timers) is kept, so setting it back to false continues the
	// step. A rollout under way shows phase Paused; a new revision arriving while paused is held at
	// the partition = replicas. Unset means false.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// analyzeBeforeFirstPod says whether the first step of a rollout checks before the first pod rolls
	// (its checks then judge that pod still on the old revision: the service as it was). false rolls
	// the first pod at once, once every pod is available, and checks from it on. Unset means true.
	// +optional
	AnalyzeBeforeFirstPod *bool `json:"analyzeBeforeFirstPod,omitempty"`

	// analysisOnly, when true, is a dry run: every check runs at every step and the operator reports
	// what it would have done (status.dryRun, Events WouldAdvance and WouldFail), but the partition
	// stays held at replicas as when idle, so no pod rolls. The steps are simulated: a simulated
	// partition walks down as the checks pass, and each step's checks judge the pod that step would
	// roll (which still runs the current revision: the checks see the old pods). For trying checks on
	// production before trusting them. spec.paused holds the dry run too. Cannot be combined with
	// skipCheck true. Unset means false.
	// +optional
	AnalysisOnly bool `json:"analysisOnly,omitempty"`

	// Steps in batches and stuck-pod recovery (issue 18; types in phasedrollout_batches_types.go).

	// steps releases the pods in batches, as Kruise Rollouts' StatefulSet batches: after the checks of
	// a step pass, step i releases steps[i].pods more pods (the partition moves down by that many, in
	// one write when the StatefulSet's maxUnavailable allows it), its checks run once every released
	// pod is updated and available, then steps[i].pause waits before step i+1. The first step is
	// steps[0]; when the list is shorter than the rollout, its last step repeats. Unset: one pod per
	// step and no pause, the original behaviour. The checks judge the batch's lowest ordinal.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Steps []RolloutStep `json:"steps,omitempty"`

	// recreateStuckPods, when true, deletes a released pod that has not been Ready for longer than
	// progressDeadlineSeconds and runs an outdated revision (its controller-revision-hash is not the
	// StatefulSet's update revision, and its revision is older, a revert included), so that the StatefulSet
	// controller recreates it from the current template: the StatefulSet controller alone never
	// replaces a crash-looping pod after the template is fixed (kubernetes/kubernetes#67250). At most
	// one pod per step, never while more pods are unavailable than maxUnavailable allows. Unset means
	// false.
	// +optional
	RecreateStuckPods *bool `json:"recreateStuckPods,omitempty"`

	// progressDeadlineSeconds is how long, in seconds, a pod may stay not Ready before
	// recreateStuckPods deletes it. Defaults to 600. Used only when recreateStuckPods is true.
	// +optional
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	ProgressDeadlineSeconds *int32 `json:"progressDeadlineSeconds,omitempty"`
}

// Check describes how a rollout step is verified: after the rolled pod is updated and every pod is
// available, wait initialDelaySeconds, then run the query every periodSeconds until successThreshold
// consecutive checks pass (the partition then moves by one) or maxTries checks have run (onFailure
// then applies). An error or an unreachable Prometheus never counts as a pass.
// +kubebuilder:validation:XValidation:rule="!has(self.maxTries) || !has(self.successThreshold) || self.maxTries >= self.successThreshold",message="spec.check.maxTries must be >= spec.check.successThreshold (otherwise no step can pass)",fieldPath=".maxTries"
// +kubebuilder:validation:XValidation:rule="!(has(self.query) && has(self.webhook))",message="spec.check.query and spec.check.webhook are alternatives: set one of them",fieldPath=".webhook"
type Check struct {
	// initialDelaySeconds is how long, in seconds, to wait after the rolled pod and all other pods are
	// available before the first check, so Prometheus has fresh data about the new pod. Defaults to
	// 60; 0 is allowed.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	InitialDelaySeconds *int32 `json:"initialDelaySeconds,omitempty"`

	// periodSeconds is the interval, in seconds, between two checks. Defaults to 60; minimum 1.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	PeriodSeconds int32 `json:"periodSeconds,omitempty"`

	// maxTries is the number of checks a step may run without reaching successThreshold consecutive
	// passes; when it is exhausted the rollout stops and onFailure applies. Unset means no limit (the
	// rollout waits, never advancing on failed checks). Must be >= successThreshold.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxTries *int32 `json:"maxTries,omitempty"`

	// successThreshold is the number of consecutive passing checks after which a step is considered
	// safe and the next pod is rolled. Defaults to 3; minimum 1.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	SuccessThreshold int32 `json:"successThreshold,omitempty"`

	// successWhen says which query result passes a check. "NoData" (default, the original sts-plus-operator's semantic, like
	// a Prometheus alert): a query returning any sample fails the check, an empty result passes — e.g.
	// `rate(http_requests_total{code=~"5.."}[5m]) > 1`. "DataReturned": the check passes only when the
	// query returns at least one sample — e.g. `up{job="web"} == 1`. Note that under NoData a
	// misspelled metric also returns no data and passes.
	// +optional
	// +kubebuilder:default=NoData
	SuccessWhen SuccessWhen `json:"successWhen,omitempty"`

	// onFailure says what happens when a step used up maxTries: "Pause" (default) stops the rollout
	// with phase Failed and leaves the partition as it is; "Rollback" also re-applies the pod template
	// of the previous revision. Either way the user resumes by fixing the cause and re-triggering.
	// +optional
	// +kubebuilder:default=Pause
	OnFailure OnFailure `json:"onFailure,omitempty"`

	// query is the Prometheus query each check runs. Required unless skipCheck is true.
	// +optional
	Query *PrometheusQuery `json:"query,omitempty"`

	// CheckVerdict holds successCondition, noDataPolicy and errorPolicy.
	CheckVerdict `json:",inline"`

	// webhook makes the check a webhook gate instead of a Prometheus query (query and webhook are
	// alternatives): every check POSTs the step (rollout, StatefulSet, pod, partition, revisions) as
	// JSON to webhook.url; a 2xx answer passes, any other answer or none fails. successWhen does not
	// apply. See docs/rollout.md "Webhook gates" for the payload.
	// +optional
	Webhook *WebhookCheck `json:"webhook,omitempty"`
}

// PrometheusQuery describes the Prometheus instant query a check runs and how to reach Prometheus.
type PrometheusQuery struct {
	// expr is the PromQL expression to evaluate; how its result is judged is set by check.successWhen.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=16384
	Expr string `json:"expr"`

	// url is the base URL of the Prometheus HTTP API, without the /api/v1/query path, e.g.
	// "http://prometheus.monitoring:9090". A URL without a scheme (e.g. "prom:9000/xx") means http;
	// only http and https are accepted.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="!self.contains('://') || self.startsWith('http://') || self.startsWith('https://')",message="spec.check.query.url must use the http or https scheme (or no scheme, meaning http)"
	// +kubebuilder:validation:XValidation:rule="isURL(self.contains('://') ? self : 'http://' + self) && url(self.contains('://') ? self : 'http://' + self).getHostname() != ''",message="spec.check.query.url must be a URL with a host, e.g. http://prometheus.monitoring:9090"
	URL string `json:"url"`

	// secretRef is the name of a Secret, in the PhasedRollout's namespace, holding Prometheus
	// credentials: key "token" for bearer authentication, or keys "username" and "password" for basic
	// authentication. Optional.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	SecretRef string `json:"secretRef,omitempty"`

	// insecureSkipVerify, when true, skips verification of Prometheus's TLS certificate. Defaults to
	// false.
	// +optional
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// PhasedRolloutStatus is the observed state of a PhasedRollout, written by the operator.
type PhasedRolloutStatus struct {
	// observedGeneration is the metadata.generation of the PhasedRollout that the operator last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase is the coarse state: "Rolling" (a rollout is in progress), "Verifying" (every pod is
	// updated and the last pod's checks are running), "Updated" (idle: the rollout finished, or nothing
	// to roll and the partition is held at replicas; the original project's value), "Failed" (a step used up check.maxTries), "Suspended" (skipCheck is true),
	// "ErrorCannotManage" (e.g. the StatefulSet's updateStrategy is OnDelete), "ErrorSTSNotFound",
	// "Paused" (spec.paused holds a rollout under way) or "Aborted" (the sts.plus/abort annotation
	// stopped it).
	// +optional
	Phase PhasedRolloutPhase `json:"phase,omitempty"`

	// message is a human-readable explanation of the phase.
	// +optional
	Message string `json:"message,omitempty"`

	// currentRevision is the StatefulSet's current revision (the one pods are rolled from).
	// +optional
	CurrentRevision string `json:"currentRevision,omitempty"`

	// updateRevision is the StatefulSet's update revision (the one pods are rolled to).
	// +optional
	UpdateRevision string `json:"updateRevision,omitempty"`

	// rolloutStartTime is when the current or last rollout started.
	// +optional
	RolloutStartTime *metav1.Time `json:"rolloutStartTime,omitempty"`

	// rolloutEndTime is when the last rollout finished (Updated or Failed).
	// +optional
	RolloutEndTime *metav1.Time `json:"rolloutEndTime,omitempty"`

	// rollingPodStatus is the state of the current rollout step.
	// +optional
	RollingPodStatus *RollingPodStatus `json:"rollingPodStatus,omitempty"`

	// replicas is the StatefulSet's spec.replicas the operator last acted on; a larger value during a
	// rollout is a scale-up (see spec.scaleUpDuringRollout).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Replicas *int32 `json:"replicas,omitempty"`

	// adoptedPartition is set when the PhasedRollout was created during a rollout the StatefulSet
	// controller had already started (partition unset or lower): the partition it froze the
	// StatefulSet at, below the pods already on the update revision. Those pods were rolled before the
	// operator managed the StatefulSet, without checks; every later step is checked.
	// +optional
	// +kubebuilder:validation:Minimum=0
	AdoptedPartition *int32 `json:"adoptedPartition,omitempty"`

	// lastScaleUp records the last scale-up seen during a rollout and what was done about it.
	// +optional
	LastScaleUp *ScaleUpRecord `json:"lastScaleUp,omitempty"`

	// lastQueryResult summarises the last Prometheus query result in words, e.g. "2 samples returned:
	// check failed (successWhen NoData)".
	// +optional
	LastQueryResult string `json:"lastQueryResult,omitempty"`

	// lastError is the last error that kept the rollout from advancing (Prometheus unreachable, bad
	// credentials, invalid query, ...), in words a person can act on; empty once resolved.
	// +optional
	LastError string `json:"lastError,omitempty"`

	// --- s8c: promote, dry run (issue 18).

	// promotion records the last sts.plus/promote annotation the operator acted on: its value and the
	// partition of the step it passed. Recorded before the partition moves, so a promote passes
	// exactly one step, even when the operator restarts between the move and the annotation's removal.
	// +optional
	Promotion *PromotionRecord `json:"promotion,omitempty"`

	// dryRun is what spec.analysisOnly would have done: the simulated step and its last verdict.
	// +optional
	DryRun *DryRunStatus `json:"dryRun,omitempty"`

	// conditions describe the state in detail: "Ready" (the summary), "Updated" (the StatefulSet runs
	// its update revision on every pod and the last step passed), plus "Progressing" and "Degraded",
	// the kstatus pair "Reconciling" and "Stalled", and "Available" (every replica of the StatefulSet
	// is available).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// Steps in batches and stuck-pod recovery (issue 18; types in phasedrollout_batches_types.go).

	// batch is the batch of spec.steps being released or checked; unset when spec.steps is unset or no
	// batch was released in this rollout yet.
	// +optional
	Batch *BatchStatus `json:"batch,omitempty"`

	// activeTarget is the StatefulSet of spec.targetRefs that the rollout fields of this status
	// (phase, revisions, rollingPodStatus, ...) describe: the one rolling, or the last one rolled.
	// Unset with spec.targetRef.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	ActiveTarget string `json:"activeTarget,omitempty"`

	// targets is the state of each StatefulSet of spec.targetRefs, in their order. Unset with
	// spec.targetRef.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Targets []TargetStatus `json:"targets,omitempty"`

	// lastStuckPodRecreated is the last pod recreateStuckPods deleted.
	// +optional
	LastStuckPodRecreated *StuckPodRecord `json:"lastStuckPodRecreated,omitempty"`

	// switchover is the planned switchover of a StatefulSetLock's writer that the step under way
	// waits for before it rolls the writer's pod (types in phasedrollout_switchover_types.go); unset
	// when no step waits for one.
	// +optional
	Switchover *SwitchoverStatus `json:"switchover,omitempty"`
}

// PromotionRecord is one sts.plus/promote annotation the operator acted on.
type PromotionRecord struct {
	// value is the annotation's value.
	// +kubebuilder:validation:MaxLength=256
	Value string `json:"value"`
	// partition is the partition of the step the promotion passed.
	// +kubebuilder:validation:Minimum=0
	Partition int32 `json:"partition"`
	// time is when the operator accepted the promotion.
	Time metav1.Time `json:"time"`
}

// DryRunStatus is the state of a dry run (spec.analysisOnly): the simulated step and what the
// operator would have done after its checks.
type DryRunStatus struct {
	// revision is the update revision the dry run analyses.
	// +optional
	Revision string `json:"revision,omitempty"`
	// step is the simulated step: its partition is the one the StatefulSet would have now (it walks
	// down as the checks pass), its pod the one that step would roll and whose checks run, with the
	// step's counters as in status.rollingPodStatus.
	// +optional
	Step *RollingPodStatus `json:"step,omitempty"`
	// wouldAdvance is the last decision of the checks: "WouldAdvance" (a step passed: the partition
	// would have moved by one, or at partition 0 the rollout would be complete) or "WouldFail" (a step
	// used up check.maxTries: the rollout would have stopped; the dry run stops there).
	// +optional
	// +kubebuilder:validation:Enum=WouldAdvance;WouldFail
	WouldAdvance string `json:"wouldAdvance,omitempty"`
	// message says what would have been done, in words.
	// +optional
	Message string `json:"message,omitempty"`
}

// ScaleUpRecord is a scale-up of the StatefulSet seen during a rollout.
type ScaleUpRecord struct {
	// fromReplicas is spec.replicas before the scale-up.
	FromReplicas int32 `json:"fromReplicas"`
	// toReplicas is spec.replicas after the scale-up.
	ToReplicas int32 `json:"toReplicas"`
	// partition is the position the rollout had reached (the partition) when the scale-up was seen.
	Partition int32 `json:"partition"`
	// policy is the spec.scaleUpDuringRollout applied.
	Policy ScaleUpPolicy `json:"policy"`
	// heldAt is the partition the operator set: toReplicas with HoldNew, unchanged with Allow.
	HeldAt int32 `json:"heldAt"`
	// time is when the operator saw the scale-up.
	Time metav1.Time `json:"time"`
}

// RollingPodStatus is the state of one rollout step. Field names are the original sts-plus-operator's
// (analisysStartTime keeps its spelling so existing tooling keeps working).
type RollingPodStatus struct {
	// status is the step's state: "WaitForPodToBeUpdated", "WaitForAllPodsToBeAvailable",
	// "WaitForInitialDelay", "WaitForChecks" or "PrometheusError"; "Inconclusive" (a check found no
	// data under noDataPolicy Inconclusive: checks stop until the PhasedRollout is edited or promoted)
	// or "CheckError" (a check could not be evaluated under errorPolicy Pause: it retries by itself);
	// "WaitForSwitchover" (the step passed and waits for a StatefulSetLock's writer to move off the
	// pods its partition move rolls, see status.switchover).
	// +optional
	Status RollingPodState `json:"status,omitempty"`

	// partition is the StatefulSet partition of this step: pods with an ordinal >= partition are on
	// the update revision.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Partition *int32 `json:"partition,omitempty"`

	// pod is the name of the pod rolled in this step, the one the checks judge.
	// +optional
	Pod string `json:"pod,omitempty"`

	// analisysStartTime (sic) is when the checks of this step started (after initialDelaySeconds).
	// +optional
	AnalisysStartTime *metav1.Time `json:"analisysStartTime,omitempty"`

	// lastCheckTime is when the last check of this step ran.
	// +optional
	LastCheckTime *metav1.Time `json:"lastCheckTime,omitempty"`

	// consecutiveSuccessfulChecks is the number of passing checks in a row in this step.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ConsecutiveSuccessfulChecks int32 `json:"consecutiveSuccessfulChecks,omitempty"`

	// consecutiveFailedChecks is the number of failing checks in a row in this step.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ConsecutiveFailedChecks int32 `json:"consecutiveFailedChecks,omitempty"`

	// totalFailedChecks is the number of failing checks in this step.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TotalFailedChecks int32 `json:"totalFailedChecks,omitempty"`

	// totalChecks is the number of checks run in this step, compared with check.maxTries.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TotalChecks int32 `json:"totalChecks,omitempty"`

	// podsReadyTime is when the rolled pod and every pod were found available in this step (set
	// when spec.checks is used or a check has a verdict field): each check's initialDelaySeconds
	// counts from it.
	// +optional
	PodsReadyTime *metav1.Time `json:"podsReadyTime,omitempty"`

	// checks is each check's record in this step: "check" for spec.check (when it has a query),
	// then one per spec.checks element.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=17
	Checks []CheckStatus `json:"checks,omitempty"`
}

// PhasedRollout rolls a StatefulSet to a new revision one pod at a time through its partition: each
// step waits for the rolled pod and all other pods to be available, then for Prometheus checks to pass,
// before the next pod is rolled.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=statefulops,shortName=pr
// +kubebuilder:printcolumn:name="Target",type="string",JSONPath=".spec.targetRef",description="The StatefulSet this PhasedRollout manages (with spec.targetRef)"
// +kubebuilder:printcolumn:name="Active",type="string",JSONPath=".status.activeTarget",description="The StatefulSet of spec.targetRefs rolling, or last rolled"
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="Partition",type="integer",JSONPath=".status.rollingPodStatus.partition"
// +kubebuilder:printcolumn:name="Step",type="string",JSONPath=".status.rollingPodStatus.status",priority=1
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Rollout Start",type="date",JSONPath=".status.rolloutStartTime",priority=1
// +kubebuilder:printcolumn:name="Rollout End",type="date",JSONPath=".status.rolloutEndTime",priority=1
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type PhasedRollout struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec is the desired behaviour of the rollout.
	// +required
	Spec PhasedRolloutSpec `json:"spec"`

	// status is the observed state, written by the operator.
	// +optional
	Status PhasedRolloutStatus `json:"status,omitzero"`
}

// PhasedRolloutList is a list of PhasedRollouts.
// +kubebuilder:object:root=true
type PhasedRolloutList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitzero"`
	// items are the PhasedRollouts.
	Items []PhasedRollout `json:"items"`
}

func init() {
	SchemeBuilder.Register(&PhasedRollout{}, &PhasedRolloutList{})
}
