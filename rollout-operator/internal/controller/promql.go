package controller

import (
	"fmt"

	"github.com/prometheus/prometheus/promql/parser"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// Condition types and reasons of the kstatus conventions (sigs.k8s.io/cli-utils/pkg/kstatus), and the
// Event reasons added with them. They belong beside the others in shared/api/rollout/v1alpha1; they
// are here until that package takes them.
const (
	// ConditionStalled is True when the PhasedRollout cannot make progress without a change by the
	// user: its StatefulSet is missing, cannot be managed, a step used up check.maxTries, or the spec
	// holds something the API server could not refuse (a query that does not parse).
	ConditionStalled = "Stalled"
	// ConditionReconciling is True while a rollout is in progress (phases Rolling and Verifying).
	ConditionReconciling = "Reconciling"
	// ReasonInvalidQuery: spec.check.query.expr is not valid PromQL.
	ReasonInvalidQuery = "InvalidQuery"
	// ReasonInvalidURL: spec.check.query.url does not parse or has no host.
	ReasonInvalidURL = "InvalidURL"
	// EventOwnershipTakenOver is recorded when a PhasedRollout takes over a StatefulSet whose
	// ManagedByAnnotation names a PhasedRollout that no longer exists or targets another StatefulSet.
	EventOwnershipTakenOver = "OwnershipTakenOver"
	// EventWaitForPodsToReturn is recorded when the template went back to the current revision and
	// the partition is held until the pods above it are back on it.
	EventWaitForPodsToReturn = "WaitForPodsToReturn"
)

// specProblem is what in a PhasedRollout's spec the operator can never act on although the API server
// accepted it: CEL has no PromQL parser, so the query is parsed here, at once on every create and
// update, instead of failing at the first rollout.
type specProblem struct {
	reason  string
	message string
}

// checkSpec returns the first problem of pr's check query, or nil. The placeholders are filled with
// sample values first ({{pod}} is not PromQL), the same way a step fills them. A PhasedRollout with
// skipCheck runs no check, so its query cannot stall it: it is checked once skipCheck is turned off.
func checkSpec(pr *rolloutv1alpha1.PhasedRollout) *specProblem {
	q := pr.Spec.Check.Query
	if q == nil || skipCheck(pr) {
		return nil
	}
	expr := expandQuery(q.Expr, pr.Namespace, pr.Spec.TargetRef, pr.Spec.TargetRef+"-0", 0, "revision")
	if _, err := parser.ParseExpr(expr); err != nil {
		return &specProblem{reason: ReasonInvalidQuery, message: fmt.Sprintf("spec.check.query.expr is not valid PromQL: %v", err)}
	}
	if _, err := NormalizeURL(q.URL); err != nil {
		return &specProblem{reason: ReasonInvalidURL, message: err.Error()}
	}
	return nil
}
