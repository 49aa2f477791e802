package controller

import (
	"fmt"

	"github.com/prometheus/prometheus/promql/parser"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
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
		return &specProblem{reason: rolloutv1alpha1.ReasonInvalidQuery, message: fmt.Sprintf("spec.check.query.expr is not valid PromQL: %v", err)}
	}
	if _, err := NormalizeURL(q.URL); err != nil {
		return &specProblem{reason: rolloutv1alpha1.ReasonInvalidURL, message: err.Error()}
	}
	return nil
}
