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

// checkSpec returns the first problem of pr's check queries and successConditions, or nil. The
// placeholders are filled with sample values first ({{pod}} is not PromQL), the same way a step fills
// them. A PhasedRollout with skipCheck runs no check, so its queries cannot stall it: they are checked
// once skipCheck is turned off.
func checkSpec(pr *rolloutv1alpha1.PhasedRollout) *specProblem {
	if skipCheck(pr) {
		return nil
	}
	if q := pr.Spec.Check.Query; q != nil {
		if p := queryProblem(pr, "spec.check", q); p != nil {
			return p
		}
	}
	return checksProblem(pr)
}

// queryProblem returns the problem of one check's query (field names the check: "spec.check" or
// "spec.checks[name]"), or nil.
func queryProblem(pr *rolloutv1alpha1.PhasedRollout, field string, q *rolloutv1alpha1.PrometheusQuery) *specProblem {
	sts := "statefulset"
	if targets := pr.Spec.Targets(); len(targets) > 0 {
		sts = targets[0]
	}
	expr := expandQuery(q.Expr, pr.Namespace, sts, sts+"-0", 0, "revision")
	if _, err := parser.ParseExpr(expr); err != nil {
		return &specProblem{reason: rolloutv1alpha1.ReasonInvalidQuery, message: fmt.Sprintf("%s.query.expr is not valid PromQL: %v", field, err)}
	}
	if _, err := NormalizeURL(q.URL); err != nil {
		msg := err.Error()
		if field != "spec.check" {
			msg = field + ": " + msg
		}
		return &specProblem{reason: rolloutv1alpha1.ReasonInvalidURL, message: msg}
	}
	return nil
}
