package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// FuzzCheckSpec checks the operator's own check of what the API server accepts (any query and URL):
// it never panics, gives the same answer twice, and an invalid spec makes the PhasedRollout Stalled
// and not Ready, with a reason the API server accepts.
func FuzzCheckSpec(f *testing.F) {
	f.Add(`errors{pod="{{pod}}"} > 0`, "prom:9090")
	f.Add(`invalid_promql{`, "http://prometheus:9090")
	f.Add(`up == {{ordinal}}`, "http://")
	f.Add(`sum(rate(x{namespace="{{namespace}}",statefulset="{{statefulset}}",rev="{{revision}}"}[2m]))`, "::not a url::")
	f.Fuzz(func(t *testing.T, expr, url string) {
		pr := &rolloutv1alpha1.PhasedRollout{}
		pr.Namespace, pr.Generation = "ns", 2
		pr.Spec.TargetRef = "web"
		pr.Spec.Check.Query = &rolloutv1alpha1.PrometheusQuery{Expr: expr, URL: url}
		p := checkSpec(pr)
		if again := checkSpec(pr); (p == nil) != (again == nil) || (p != nil && *p != *again) {
			t.Fatalf("checkSpec is not deterministic: %+v then %+v", p, again)
		}
		setConditions(pr)
		setInvalidSpec(pr, p)
		ready := meta.FindStatusCondition(pr.Status.Conditions, rolloutv1alpha1.ConditionReady)
		stalled := meta.FindStatusCondition(pr.Status.Conditions, rolloutv1alpha1.ConditionStalled)
		if p == nil {
			return
		}
		if p.message == "" || ready.Status != metav1.ConditionFalse || stalled.Status != metav1.ConditionTrue || !conditionReason.MatchString(stalled.Reason) {
			t.Fatalf("invalid spec %+v: Ready %+v, Stalled %+v", p, ready, stalled)
		}
	})
}
