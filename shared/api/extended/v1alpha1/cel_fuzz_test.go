package v1alpha1

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/statefulops/statefulops/shared/api/crdvalidation"
)

// admit returns the errors the API server would answer on the create of obj (defaulted in place): the
// generated CRD's schema and CEL rules, evaluated offline by shared/api/crdvalidation.
func admit(t testing.TB, obj map[string]any) field.ErrorList {
	v, err := crdvalidation.ForKind("ExtendedStatefulSet")
	if err != nil {
		t.Fatal(err)
	}
	return v.Validate(t.Context(), obj)
}

// durationSyntax is the CRD's pattern for the watch times and the quiet period.
var durationSyntax = regexp.MustCompile(`^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$`)

// scalingInput is one fuzz case of the fields that the CRD's rules and the Go code both judge.
type scalingInput struct {
	scaling, hasMin, hasMax, oddOnly, hasReplicas bool
	min, max, replicas                            int64
	canary, quiet                                 string
	envChange, configChange                       int8 // -1 unset, 0 false, 1 true
}

// goVerdict is the Go reference of the rules the CRD documents: scaling.min in [0, 10000] (default 1),
// max in [1, 10000], min <= max, min odd with oddOnly; replicas within [min, max] and odd with oddOnly;
// canaryWatchTime a Go duration of at least 1s, configChangeQuietPeriod one of at most 1h, both in the
// plain unit syntax; updateOnEnvChange and updateOnConfigChange equal when both are set.
func (in scalingInput) goVerdict() bool {
	minimum := int64(1)
	if in.hasMin {
		minimum = in.min
	}
	ok := true
	if in.scaling {
		ok = ok && minimum >= 0 && minimum <= 10000
		ok = ok && (!in.hasMax || (in.max >= 1 && in.max <= 10000 && minimum <= in.max))
		ok = ok && (!in.oddOnly || minimum%2 == 1)
		if in.hasReplicas {
			ok = ok && in.replicas >= minimum && (!in.hasMax || in.replicas <= in.max)
			ok = ok && (!in.oddOnly || in.replicas%2 == 1)
		}
	}
	if in.hasReplicas {
		ok = ok && in.replicas >= -1<<31 && in.replicas < 1<<31 // an int32 field
	}
	if in.canary != "" {
		d, err := time.ParseDuration(in.canary)
		ok = ok && durationSyntax.MatchString(in.canary) && err == nil && d >= time.Second
	}
	if in.quiet != "" {
		d, err := time.ParseDuration(in.quiet)
		ok = ok && durationSyntax.MatchString(in.quiet) && err == nil && d <= time.Hour
	}
	if in.envChange >= 0 && in.configChange >= 0 {
		ok = ok && in.envChange == in.configChange
	}
	return ok
}

func (in scalingInput) object() map[string]any {
	spec := map[string]any{
		"template": map[string]any{"spec": map[string]any{
			"selector":    map[string]any{"matchLabels": map[string]any{"app": "a"}},
			"serviceName": "a",
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "a"}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "a", "image": "a"}}},
			},
		}},
	}
	if in.scaling {
		scaling := map[string]any{}
		if in.hasMin {
			scaling["min"] = in.min
		}
		if in.hasMax {
			scaling["max"] = in.max
		}
		if in.oddOnly {
			scaling["oddOnly"] = true
		}
		spec["scaling"] = scaling
	}
	if in.hasReplicas {
		spec["template"].(map[string]any)["spec"].(map[string]any)["replicas"] = in.replicas
	}
	strategy := map[string]any{}
	if in.canary != "" {
		strategy["canaryWatchTime"] = in.canary
	}
	if in.quiet != "" {
		strategy["configChangeQuietPeriod"] = in.quiet
	}
	spec["updateStrategy"] = strategy
	for name, v := range map[string]int8{"updateOnEnvChange": in.envChange, "updateOnConfigChange": in.configChange} {
		if v >= 0 {
			spec[name] = v == 1
		}
	}
	return map[string]any{
		"apiVersion": GroupVersion.String(), "kind": "ExtendedStatefulSet",
		"metadata": map[string]any{"name": "x", "namespace": "ns"},
		"spec":     spec,
	}
}

// FuzzCELMatchesGo generates specs around the ExtendedStatefulSet's scaling limits, watch times and
// aliases and compares the API server's verdict (the generated CRD's schema and CEL rules, evaluated
// offline with the API server's own validator) with the Go reference of the documented rules: the two
// must never disagree. Every admitted object must also decode into the Go type, and the Go code must read
// it within the limits: DesiredReplicas within [min, max] and odd with oddOnly, the watch time as CEL saw
// it, the alias resolved.
func FuzzCELMatchesGo(f *testing.F) {
	f.Add(true, true, int64(3), true, int64(13), true, true, int64(5), "5m", "2s", int8(1), int8(-1))
	f.Add(true, true, int64(3), true, int64(13), true, true, int64(4), "5m", "2s", int8(-1), int8(-1))
	f.Add(true, true, int64(4), false, int64(0), true, false, int64(0), "", "", int8(-1), int8(-1))
	f.Add(true, true, int64(5), true, int64(3), false, false, int64(0), "", "", int8(-1), int8(-1))
	f.Add(true, true, int64(0), false, int64(0), false, true, int64(0), "1s", "0s", int8(0), int8(1))
	f.Add(true, false, int64(0), false, int64(0), true, true, int64(2), "999ms", "1h0m1s", int8(-1), int8(-1))
	f.Add(false, false, int64(0), false, int64(0), false, true, int64(-3), "1.5h", "90m", int8(1), int8(1))
	f.Add(true, true, int64(10001), true, int64(0), false, false, int64(0), ".5s", "1e3s", int8(-1), int8(-1))
	f.Add(true, true, int64(-1), true, int64(10000), false, true, int64(10000), "99999999999999h", "-1s", int8(-1), int8(-1))
	f.Add(true, true, int64(1), false, int64(0), true, true, int64(1), "1h1m1s1ms1us1ns", "0.000000001s", int8(-1), int8(-1))
	f.Fuzz(func(t *testing.T, scaling, hasMin bool, minimum int64, hasMax bool, maximum int64, oddOnly, hasReplicas bool,
		replicas int64, canary, quiet string, envChange, configChange int8) {
		in := scalingInput{scaling: scaling, hasMin: hasMin, min: minimum, hasMax: hasMax, max: maximum,
			oddOnly: oddOnly, hasReplicas: hasReplicas, replicas: replicas, canary: canary, quiet: quiet,
			envChange: max(min(envChange, 1), -1), configChange: max(min(configChange, 1), -1)}
		if !utf8Valid(canary) || !utf8Valid(quiet) {
			return // JSON carries only valid UTF-8
		}
		obj := in.object()
		errs := admit(t, obj)
		want := in.goVerdict()
		if (len(errs) == 0) != want {
			t.Fatalf("CEL/schema and Go disagree on %+v: Go says valid=%v, the API server says %v", in, want, errs.ToAggregate())
		}
		if !want {
			return
		}
		raw, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		var ests ExtendedStatefulSet
		if err := json.Unmarshal(raw, &ests); err != nil {
			t.Fatalf("an admitted object does not decode: %v\n%s", err, raw)
		}
		spec := &ests.Spec
		if s := spec.Scaling; s != nil {
			r := spec.DesiredReplicas()
			if s.Min == nil || r < *s.Min || (s.Max != nil && r > *s.Max) || (s.OddOnly && r%2 != 1) {
				t.Fatalf("DesiredReplicas %d outside the admitted scaling %+v", r, *s)
			}
		}
		if canary != "" {
			d, _ := time.ParseDuration(canary)
			if got := spec.UpdateStrategy.CanaryWatchTime; got == nil || got.Duration != d {
				t.Fatalf("canaryWatchTime %q decoded as %v", canary, got)
			}
		}
		wantEnv := (in.envChange == 1) || (in.envChange < 0 && in.configChange == 1)
		if spec.EffectiveUpdateOnEnvChange() != wantEnv {
			t.Fatalf("EffectiveUpdateOnEnvChange = %v for %d/%d", spec.EffectiveUpdateOnEnvChange(), in.envChange, in.configChange)
		}
	})
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }
