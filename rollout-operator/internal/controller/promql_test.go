package controller

import (
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

func TestCheckSpecIgnoresTheQueryWhileChecksAreSkipped(t *testing.T) {
	pr := &rolloutv1alpha1.PhasedRollout{}
	pr.Namespace, pr.Spec.TargetRef = "ns", "web"
	pr.Spec.Check.Query = &rolloutv1alpha1.PrometheusQuery{Expr: "invalid_promql{", URL: "http://prometheus:9090"}
	if p := checkSpec(pr); p == nil || p.reason != rolloutv1alpha1.ReasonInvalidQuery {
		t.Fatalf("an invalid query must be reported, got %+v", p)
	}
	for name, set := range map[string]func(){
		"skipCheck":             func() { pr.Spec.SkipCheck = ptr.To(true) },
		"standardRollingUpdate": func() { pr.Spec.SkipCheck, pr.Spec.StandardRollingUpdate = nil, ptr.To(true) },
	} {
		set()
		if p := checkSpec(pr); p != nil {
			t.Errorf("%s: a PhasedRollout that runs no check is not stalled by its query, got %+v", name, p)
		}
	}
}

func TestCheckSpecReportsAURLWithoutHost(t *testing.T) {
	pr := &rolloutv1alpha1.PhasedRollout{}
	pr.Namespace, pr.Spec.TargetRef = "ns", "web"
	pr.Spec.Check.Query = &rolloutv1alpha1.PrometheusQuery{Expr: "up == 0", URL: "http://"}
	p := checkSpec(pr)
	if p == nil || p.reason != rolloutv1alpha1.ReasonInvalidURL || !strings.Contains(p.message, "has no host") {
		t.Fatalf("a URL without a host must be reported as InvalidURL, got %+v", p)
	}
	pr.Spec.Check.Query.URL = "prom:9090"
	if p := checkSpec(pr); p != nil {
		t.Fatalf("a valid query and URL are no problem, got %+v", p)
	}
}
