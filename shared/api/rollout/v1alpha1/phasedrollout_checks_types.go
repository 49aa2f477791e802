package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Several checks per step and richer verdicts (issue 18): spec.checks, the verdict fields every
// check has (CheckVerdict, inlined in Check), and status.rollingPodStatus.checks.

// NamedCheck is one element of spec.checks: a name plus every field of spec.check (one definition),
// with its own query, delays, thresholds, verdict and onFailure.
// +kubebuilder:validation:XValidation:rule="has(self.query) != has(self.webhook)",message="spec.checks[] needs exactly one of query and webhook"
type NamedCheck struct {
	// name identifies the check in status.rollingPodStatus.checks, Events and the metrics' check
	// label: a DNS label, unique among spec.checks. "check" is the name of spec.check in status, so
	// an element may only use it when spec.check has neither a query nor a webhook.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Check is the check itself: the same fields, defaults and rules as spec.check.
	Check `json:",inline"`
}

// NoDataPolicy says how a successCondition judges a query that returned no sample.
// +kubebuilder:validation:Enum=Pass;Fail;Inconclusive
type NoDataPolicy string

const (
	// NoDataPass: no sample passes the check.
	NoDataPass NoDataPolicy = "Pass"
	// NoDataFail: no sample fails the check (it counts as a try).
	NoDataFail NoDataPolicy = "Fail"
	// NoDataInconclusive: no sample pauses the step (state Inconclusive) until the spec is edited or
	// the step is promoted.
	NoDataInconclusive NoDataPolicy = "Inconclusive"
)

// ErrorPolicy says what a check that could not be evaluated (Prometheus unreachable, an error
// answer, a successCondition that fails to evaluate) does.
// +kubebuilder:validation:Enum=CountAsFailure;Pause
type ErrorPolicy string

const (
	// ErrorCountAsFailure (default, the original behaviour): the error is a failed check and counts
	// towards maxTries.
	ErrorCountAsFailure ErrorPolicy = "CountAsFailure"
	// ErrorPause: the error counts neither as a try nor as a failure; the step pauses (state
	// CheckError) and the check retries every periodSeconds, resuming by itself once it is answered.
	ErrorPause ErrorPolicy = "Pause"
)

// CheckVerdict is how a check's query result is judged beyond successWhen. Inlined in Check, so
// spec.check and every spec.checks[] element have these fields.
// +kubebuilder:validation:XValidation:rule="!has(self.noDataPolicy) || has(self.successCondition)",message="noDataPolicy needs successCondition (without it, successWhen says what no data means)",fieldPath=".noDataPolicy"
type CheckVerdict struct {
	// successCondition is a CEL expression over the query's samples that must be true for the check
	// to pass; when set it replaces successWhen. Variables: `samples`, the list of samples, each
	// {labels: map(string, string), value: double} (a range query's series give their last value);
	// `result`, the value (double) of the only sample when exactly one is returned, otherwise the
	// same list as `samples`. Examples: `result < 0.01`, `samples.all(s, s.value < 0.01)`,
	// `size(samples) == 3`. A query returning no sample is judged by noDataPolicy, not by the
	// condition. A condition that does not compile (or is not boolean) stalls the PhasedRollout at
	// once (condition Stalled, reason InvalidSuccessCondition, with the compiler's message); one that
	// fails to evaluate on the samples (e.g. `result < 1` on two samples) is a check error (see
	// errorPolicy).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	SuccessCondition string `json:"successCondition,omitempty"`

	// noDataPolicy says how a check with a successCondition judges a query that returned no sample:
	// "Pass", "Fail", or "Inconclusive" (the step pauses, state Inconclusive, Event
	// CheckInconclusive, until the PhasedRollout is edited or promoted). Unset: what successWhen
	// implies (NoData: pass; DataReturned: fail). Only allowed with successCondition.
	// +optional
	NoDataPolicy NoDataPolicy `json:"noDataPolicy,omitempty"`

	// errorPolicy says what a check that could not be evaluated does: "CountAsFailure" (unset, the
	// original behaviour: a failed check that counts towards maxTries) or "Pause" (it counts neither
	// as a try nor as a failure and breaks the run of consecutive passes; the step waits in state
	// CheckError, Ready False with reason CheckError and an Event, retries every periodSeconds and
	// goes on by itself once the query is answered).
	// +optional
	ErrorPolicy ErrorPolicy `json:"errorPolicy,omitempty"`
}

// CheckResultKind is the outcome of a check's last run (status.rollingPodStatus.checks[].lastResult).
// +kubebuilder:validation:Enum=Pass;Fail;Inconclusive;Error
type CheckResultKind string

const (
	// CheckResultPass: the check passed.
	CheckResultPass CheckResultKind = "Pass"
	// CheckResultFail: the check failed.
	CheckResultFail CheckResultKind = "Fail"
	// CheckResultInconclusive: no sample, with noDataPolicy Inconclusive.
	CheckResultInconclusive CheckResultKind = "Inconclusive"
	// CheckResultError: the check could not be evaluated.
	CheckResultError CheckResultKind = "Error"
)

// CheckStatus is one check's record in the current step.
type CheckStatus struct {
	// name is the check's name: "check" for spec.check, else the spec.checks[] element's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// lastResult is the outcome of the check's last run: Pass, Fail, Inconclusive or Error.
	// +optional
	LastResult CheckResultKind `json:"lastResult,omitempty"`

	// lastValue summarises the samples of the check's last run (labels and value of the first ones,
	// truncated), or the error.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	LastValue string `json:"lastValue,omitempty"`

	// lastCheckTime is when the check last ran in this step.
	// +optional
	LastCheckTime *metav1.Time `json:"lastCheckTime,omitempty"`

	// totalChecks is the number of runs of the check in this step that count towards its maxTries
	// (an Inconclusive run, or an error under errorPolicy Pause, does not).
	// +optional
	// +kubebuilder:validation:Minimum=0
	TotalChecks int32 `json:"totalChecks,omitempty"`

	// consecutiveSuccessfulChecks is the number of passing runs in a row.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ConsecutiveSuccessfulChecks int32 `json:"consecutiveSuccessfulChecks,omitempty"`

	// consecutiveFailedChecks is the number of failing runs in a row.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ConsecutiveFailedChecks int32 `json:"consecutiveFailedChecks,omitempty"`

	// totalFailedChecks is the number of failing runs in this step.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TotalFailedChecks int32 `json:"totalFailedChecks,omitempty"`

	// passed is true once the check reached its successThreshold in this step: it does not run again
	// until the next step.
	// +optional
	Passed bool `json:"passed,omitempty"`
}

// States, condition reasons and Event reasons of several checks and richer verdicts.
const (
	// StepInconclusive: a check returned no data under noDataPolicy Inconclusive; the partition stays
	// and no check runs until the PhasedRollout is edited or the step is promoted.
	StepInconclusive RollingPodState = "Inconclusive"
	// StepCheckError: a check could not be evaluated under errorPolicy Pause; it retries every
	// periodSeconds and the step goes on by itself once it is answered.
	StepCheckError RollingPodState = "CheckError"

	// ReasonCheckInconclusive is the Ready condition's reason (and the Event's) in state Inconclusive.
	ReasonCheckInconclusive = "CheckInconclusive"
	// ReasonCheckError is the Ready condition's reason (and the Event's) in state CheckError.
	ReasonCheckError = "CheckError"
	// ReasonInvalidSuccessCondition: a successCondition does not compile.
	ReasonInvalidSuccessCondition = "InvalidSuccessCondition"

	// SeedCheckName is spec.check's name in status.rollingPodStatus.checks and the metrics.
	SeedCheckName = "check"
)
