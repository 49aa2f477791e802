package testsupport

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KstatusProblems lists what in one status breaks the kstatus conventions every kind follows: a
// condition whose observedGeneration is not the status's, or Stalled and Reconciling both True. The
// status checkers of the operators' envtests start from it and add their kind's own rules.
func KstatusProblems(conditions []metav1.Condition, observedGeneration int64) []string {
	var out []string
	for _, c := range conditions {
		if c.ObservedGeneration != observedGeneration {
			out = append(out, fmt.Sprintf("condition %s observedGeneration %d, status %d", c.Type, c.ObservedGeneration, observedGeneration))
		}
	}
	if meta.IsStatusConditionTrue(conditions, "Stalled") && meta.IsStatusConditionTrue(conditions, "Reconciling") {
		out = append(out, "Stalled and Reconciling both True")
	}
	return out
}
