package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	"github.com/prometheus/common/model"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// A check's successCondition: a CEL expression (github.com/google/cel-go) over the samples of the
// query. The environment has two variables:
//
//   - samples: list(map(string, dyn)), one {labels: map(string, string), value: double} per sample of
//     an instant vector, per series of a range vector (its last value), or one for a scalar (no labels);
//   - result: the value (double) of the only sample when exactly one is returned, otherwise the same
//     list as samples.
//
// The expression must be boolean. No sample: noDataPolicy decides, the condition is not evaluated.

// conditionEnv is the CEL environment of every successCondition.
var conditionEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("result", cel.DynType),
		cel.Variable("samples", cel.ListType(cel.MapType(cel.StringType, cel.DynType))),
	)
})

// conditionCostLimit bounds one evaluation (the samples are the endpoint's to choose).
const conditionCostLimit = 1_000_000

// maxCachedConditions bounds the cache of compiled conditions; it is emptied when full.
const maxCachedConditions = 512

// conditions caches the compiled programs by expression text, so each condition of a spec is
// compiled once, not at every check.
var conditions = struct {
	sync.Mutex
	programs map[string]cel.Program
}{programs: map[string]cel.Program{}}

// compileCondition returns the program of expr, compiled once; the error is the compiler's message.
func compileCondition(expr string) (cel.Program, error) {
	conditions.Lock()
	defer conditions.Unlock()
	if prg, ok := conditions.programs[expr]; ok {
		return prg, nil
	}
	env, err := conditionEnv()
	if err != nil {
		return nil, err
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
		return nil, fmt.Errorf("the expression is of type %s, it must be a boolean", t)
	}
	prg, err := env.Program(ast, cel.CostLimit(conditionCostLimit))
	if err != nil {
		return nil, err
	}
	if len(conditions.programs) >= maxCachedConditions {
		conditions.programs = map[string]cel.Program{}
	}
	conditions.programs[expr] = prg
	return prg, nil
}

// sample is one sample of a query result.
type sample struct {
	labels map[string]string
	value  float64
}

// samplesOf lists the samples of a query result (a range vector's series by their last value).
func samplesOf(v model.Value) ([]sample, error) {
	var out []sample
	labels := func(m model.Metric) map[string]string {
		l := make(map[string]string, len(m))
		for k, v := range m {
			l[string(k)] = string(v)
		}
		return l
	}
	switch r := v.(type) {
	case model.Vector:
		for _, s := range r {
			out = append(out, sample{labels: labels(s.Metric), value: float64(s.Value)})
		}
	case model.Matrix:
		for _, s := range r {
			if len(s.Values) > 0 {
				out = append(out, sample{labels: labels(s.Metric), value: float64(s.Values[len(s.Values)-1].Value)})
			}
		}
	case *model.Scalar:
		out = append(out, sample{labels: map[string]string{}, value: float64(r.Value)})
	default:
		return nil, fmt.Errorf("successCondition needs numeric samples; Prometheus returned a %s", v.Type())
	}
	return out, nil
}

// judgeCondition judges a query result with q's successCondition (no sample: its noDataPolicy).
func judgeCondition(ctx context.Context, q Query, v model.Value) CheckResult {
	list, err := samplesOf(v)
	if err != nil {
		return CheckResult{Verdict: VerdictError, Message: err.Error()}
	}
	value := summarizeSamples(list)
	if len(list) == 0 {
		return noDataVerdict(q)
	}
	prg, err := compileCondition(q.SuccessCondition)
	if err != nil {
		return CheckResult{Verdict: VerdictError, Message: fmt.Sprintf("successCondition does not compile: %v", err)}
	}
	vars := make([]any, len(list))
	for i, s := range list {
		vars[i] = map[string]any{"labels": s.labels, "value": s.value}
	}
	var result any = vars
	if len(list) == 1 {
		result = list[0].value
	}
	out, _, err := prg.ContextEval(ctx, map[string]any{"result": result, "samples": vars})
	if err != nil {
		return CheckResult{Verdict: VerdictError, Value: value, Message: fmt.Sprintf("successCondition %q could not be evaluated on %d samples (%s): %v", q.SuccessCondition, len(list), value, err)}
	}
	ok, isBool := out.Value().(bool)
	if !isBool {
		return CheckResult{Verdict: VerdictError, Value: value, Message: fmt.Sprintf("successCondition %q returned %v, not a boolean", q.SuccessCondition, out.Value())}
	}
	verdict, word := VerdictFail, "false: check failed"
	if ok {
		verdict, word = VerdictPass, "true: check passed"
	}
	return CheckResult{Verdict: verdict, Value: value, Message: fmt.Sprintf("%d samples returned (%s); successCondition %s", len(list), value, word)}
}

// noDataVerdict judges an empty result under a successCondition: noDataPolicy, or what successWhen
// implies when it is unset.
func noDataVerdict(q Query) CheckResult {
	policy := q.NoDataPolicy
	if policy == "" {
		policy = rolloutv1alpha1.NoDataPass
		if q.SuccessWhen == rolloutv1alpha1.SuccessWhenDataReturned {
			policy = rolloutv1alpha1.NoDataFail
		}
	}
	switch policy {
	case rolloutv1alpha1.NoDataPass:
		return CheckResult{Verdict: VerdictPass, Message: "0 samples returned: check passed (noDataPolicy Pass)"}
	case rolloutv1alpha1.NoDataInconclusive:
		return CheckResult{Verdict: VerdictInconclusive, Message: "0 samples returned: inconclusive (noDataPolicy Inconclusive)"}
	default:
		return CheckResult{Verdict: VerdictFail, Message: "0 samples returned: check failed (noDataPolicy Fail)"}
	}
}

// maxValueBytes bounds a check's lastValue in status.
const maxValueBytes = 200

// summarizeSamples writes the first samples as `{labels} value`, cut to maxValueBytes.
func summarizeSamples(list []sample) string {
	if len(list) == 0 {
		return "no data"
	}
	var b strings.Builder
	for i, s := range list {
		if i > 0 {
			b.WriteString(", ")
		}
		keys := make([]string, 0, len(s.labels))
		for k := range s.labels {
			if k != model.MetricNameLabel {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		pairs := make([]string, len(keys))
		for j, k := range keys {
			pairs[j] = fmt.Sprintf("%s=%q", k, s.labels[k])
		}
		if len(pairs) > 0 {
			fmt.Fprintf(&b, "{%s} ", strings.Join(pairs, ","))
		}
		fmt.Fprintf(&b, "%g", s.value)
		if b.Len() > maxValueBytes {
			break
		}
	}
	return cutUTF8(b.String(), maxValueBytes, "…")
}

// cutUTF8 makes s valid UTF-8 and cuts it to at most n bytes at a rune boundary, ending with
// suffix when it cut.
func cutUTF8(s string, n int, suffix string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	end := n - len(suffix)
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + suffix
}

// valueOf summarises a query result for lastValue (a string result as its text).
func valueOf(v model.Value) string {
	list, err := samplesOf(v)
	if err != nil {
		return cutUTF8(v.String(), maxValueBytes, "…")
	}
	return summarizeSamples(list)
}
