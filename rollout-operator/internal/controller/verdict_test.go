package controller

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/common/model"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

func vector(values ...float64) model.Vector {
	v := model.Vector{}
	for i, x := range values {
		v = append(v, &model.Sample{Metric: model.Metric{"__name__": "m", "pod": model.LabelValue("web-" + string(rune('0'+i)))}, Value: model.SampleValue(x)})
	}
	return v
}

// A successCondition judges the samples: result is the single value, samples the list.
func TestSuccessConditionJudgesSamples(t *testing.T) {
	for _, tc := range []struct {
		cond   string
		value  model.Value
		want   Verdict
		inText string
	}{
		{"result < 0.01", vector(0.001), VerdictPass, `{pod="web-0"} 0.001`},
		{"result < 0.01", vector(0.5), VerdictFail, "false"},
		{"samples.all(s, s.value < 0.01)", vector(0.001, 0.002), VerdictPass, ""},
		{"samples.all(s, s.value < 0.01)", vector(0.001, 0.2), VerdictFail, ""},
		{"result.all(s, s.value < 0.01)", vector(0.001, 0.002), VerdictPass, ""},
		{"size(samples) == 3", vector(1, 2, 3), VerdictPass, ""},
		{"size(result) == 3", vector(1, 2), VerdictFail, ""},
		{`samples.exists(s, s.labels["pod"] == "web-1" && s.value > 1)`, vector(0, 2), VerdictPass, ""},
		{"result < 1", &model.Scalar{Value: 0.5}, VerdictPass, ""},
		// result is a list when there are two samples: comparing it with a number cannot be evaluated.
		{"result < 1", vector(0.5, 0.5), VerdictError, "could not be evaluated"},
		{"result < 1", &model.String{Value: "x"}, VerdictError, "numeric"},
	} {
		res := judgeCondition(context.Background(), Query{SuccessCondition: tc.cond}, tc.value)
		if res.Verdict != tc.want || !strings.Contains(res.Message+" "+res.Value, tc.inText) {
			t.Errorf("%s on %v: %s (%q, value %q), want %s containing %q", tc.cond, tc.value, res.Verdict, res.Message, res.Value, tc.want, tc.inText)
		}
	}
}

// No sample: noDataPolicy, or what successWhen implies.
func TestNoDataPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy rolloutv1alpha1.NoDataPolicy
		when   rolloutv1alpha1.SuccessWhen
		want   Verdict
	}{
		{"", "", VerdictPass},
		{"", rolloutv1alpha1.SuccessWhenNoData, VerdictPass},
		{"", rolloutv1alpha1.SuccessWhenDataReturned, VerdictFail},
		{rolloutv1alpha1.NoDataPass, rolloutv1alpha1.SuccessWhenDataReturned, VerdictPass},
		{rolloutv1alpha1.NoDataFail, "", VerdictFail},
		{rolloutv1alpha1.NoDataInconclusive, "", VerdictInconclusive},
	} {
		res := judgeCondition(context.Background(), Query{SuccessCondition: "result > 0", NoDataPolicy: tc.policy, SuccessWhen: tc.when}, model.Vector{})
		if res.Verdict != tc.want {
			t.Errorf("noDataPolicy %q successWhen %q: %s, want %s", tc.policy, tc.when, res.Verdict, tc.want)
		}
	}
}

// A condition that does not compile, or is not boolean, is a spec problem with the compiler's
// message (the PhasedRollout is Stalled at once); valid ones are compiled once.
func TestSuccessConditionCompileErrorsStall(t *testing.T) {
	base := func(cond string, checks ...rolloutv1alpha1.NamedCheck) *rolloutv1alpha1.PhasedRollout {
		pr := &rolloutv1alpha1.PhasedRollout{}
		pr.Spec.TargetRef = "web"
		pr.Spec.Check.Query = &rolloutv1alpha1.PrometheusQuery{Expr: "up", URL: "prom:9090"}
		pr.Spec.Check.SuccessCondition = cond
		pr.Spec.Checks = checks
		return pr
	}
	for cond, want := range map[string]string{
		"result <":       "Syntax error",
		"result + 1":     "must be a boolean",
		"size(nothing)":  "undeclared reference to 'nothing'",
		`"a" == 1 && tr`: "undeclared reference",
	} {
		p := checkSpec(base(cond))
		if p == nil || p.reason != rolloutv1alpha1.ReasonInvalidSuccessCondition || !strings.Contains(p.message, want) || !strings.HasPrefix(p.message, "spec.check.successCondition") {
			t.Errorf("%q: %+v, want %s containing %q", cond, p, rolloutv1alpha1.ReasonInvalidSuccessCondition, want)
		}
	}
	el := rolloutv1alpha1.NamedCheck{Name: "latency"}
	el.Query = &rolloutv1alpha1.PrometheusQuery{Expr: "up", URL: "prom:9090"}
	el.SuccessCondition = "result >"
	if p := checkSpec(base("result < 1", el)); p == nil || !strings.HasPrefix(p.message, "spec.checks[latency].successCondition") {
		t.Errorf("element condition: %+v", p)
	}
	el.SuccessCondition = "result > 1"
	el.Query.Expr = "up{"
	if p := checkSpec(base("", el)); p == nil || p.reason != rolloutv1alpha1.ReasonInvalidQuery || !strings.HasPrefix(p.message, "spec.checks[latency].query.expr") {
		t.Errorf("element query: %+v", p)
	}
	el.Query.Expr = "up"
	if p := checkSpec(base("result < 1", el)); p != nil {
		t.Errorf("valid: %+v", p)
	}
	a, err := compileCondition("result < 1")
	b, err2 := compileCondition("result < 1")
	if err != nil || err2 != nil || a != b {
		t.Errorf("compiled twice or failed: %v %v", err, err2)
	}
}

func TestSummarizeSamplesIsShort(t *testing.T) {
	many := make([]float64, 100)
	got := valueOf(vector(many...))
	if len(got) > maxValueBytes || !strings.HasSuffix(got, "…") {
		t.Errorf("%d bytes: %q", len(got), got)
	}
}
