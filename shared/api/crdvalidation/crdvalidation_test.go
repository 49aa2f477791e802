package crdvalidation_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/statefulops/statefulops/shared/api/crdvalidation"
)

// Three bad inputs per kind, from docs/bad-input.md, are refused naming the field the doc names; the
// envtest TestCRDValidatorAgreesWithAPIServer (shared/api) checks all of them against a real API server.
func TestRefusesBadInputs(t *testing.T) {
	cases := map[string][]struct{ name, field string }{
		"StatefulSingleton": {
			{"selector operator unknown", "spec.selector.matchExpressions"},
			{"selector label value of 64 characters", "spec.selector.matchLabels"},
			{"holdMode unknown", "spec.holdMode"},
		},
		"StatefulCluster": {
			{"selector In on a label the template lacks", "spec.selector.matchExpressions"},
			{"name too long for pod hostnames", "metadata.name must be at most 52 characters"},
			{"maxUnavailable and maxSurge both 0", "spec.updateStrategy.rollingUpdate"},
		},
		"StatefulSetLock": {
			{"metadata.name of 64 characters", "metadata.name must be at most 63 characters"},
			{"leaseName not a DNS name", "spec.leaseName"},
			{"leaseDurationSeconds above 3600", "spec.leaseDurationSeconds"},
		},
		"PhasedRollout": {
			{"query.url without a host (CEL)", "spec.check.query.url"},
			{"query.url not a URL (CEL)", "spec.check.query.url"},
			{"maxTries below the default successThreshold (CEL after defaulting)", "spec.check.maxTries"},
		},
		"ExtendedStatefulSet": {
			{"selector matchLabels value differs from the template", "spec.template.spec.selector.matchLabels"},
			{"even replicas with oddOnly", "spec.template.spec.replicas"},
			{"name too long", "metadata.name must be at most 40 characters"},
		},
	}
	for kind, want := range cases {
		v, err := crdvalidation.ForKind(kind)
		require.NoError(t, err)
		all, err := crdvalidation.BadInputs(kind)
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(all), 12, kind)
		docs := map[string]string{}
		for _, c := range all {
			docs[c.Name] = c.Doc
		}
		for _, w := range want {
			t.Run(kind+"/"+w.name, func(t *testing.T) {
				doc, ok := docs[w.name]
				require.True(t, ok, "no bad input %q in %s", w.name, crdvalidation.BadInputFile)
				_, errs, err := v.ValidateYAML(t.Context(), []byte(doc))
				require.NoError(t, err)
				require.NotEmpty(t, errs)
				require.Contains(t, errs.ToAggregate().Error(), w.field)
			})
		}
	}
}

// Every documented example of every kind (samples, docs/*.md, README.md) is accepted, and gets its
// schema defaults.
func TestAcceptsDocumentedExamples(t *testing.T) {
	examples, err := crdvalidation.Examples("")
	require.NoError(t, err)
	kinds := map[string]int{}
	for _, ex := range examples {
		kinds[ex.Kind]++
		t.Run(ex.Kind+"/"+ex.Name, func(t *testing.T) {
			v, err := crdvalidation.ForKind(ex.Kind)
			require.NoError(t, err)
			stored, errs, err := v.ValidateYAML(t.Context(), []byte(ex.Doc))
			require.NoError(t, err)
			require.Empty(t, errs)
			require.Equal(t, "default", stored["metadata"].(map[string]any)["namespace"])
		})
	}
	require.Len(t, kinds, len(crdvalidation.CRDFiles), "an example of every kind: %v", kinds)
}

// Defaults are applied as the API server applies them, whole numbers as int64 (CEL tells int from
// double), and fields the schema does not know are pruned.
func TestDefaultsAndPrunes(t *testing.T) {
	v, err := crdvalidation.ForKind("StatefulSetLock")
	require.NoError(t, err)
	stored, errs, err := v.ValidateYAML(t.Context(), []byte(`
apiVersion: app.anukkrit.me/v1
kind: StatefulSetLock
metadata: {name: db, namespace: prod}
spec: {statefulSetName: db, leaseName: db-lease, leaseDurationSeconds: 30, bogus: 1}
`))
	require.NoError(t, err)
	require.Empty(t, errs)
	spec := stored["spec"].(map[string]any)
	require.NotContains(t, spec, "bogus")
	require.IsType(t, int64(0), spec["leaseDurationSeconds"])
	require.Equal(t, "prod", stored["metadata"].(map[string]any)["namespace"])
}

// Mutate is deterministic (a fuzz input replays), never panics on any program, and changes the object.
func TestMutate(t *testing.T) {
	examples, err := crdvalidation.Examples("StatefulCluster")
	require.NoError(t, err)
	require.NotEmpty(t, examples)
	parse := func() map[string]any {
		obj := map[string]any{}
		require.NoError(t, yaml.Unmarshal([]byte(examples[0].Doc), &obj))
		return obj
	}
	ops := []byte(strings.Repeat("\x07\x00\x13\x20\x01\x00\x05\x02\x30\x11\x03\x00\x09\x04\x00\x02\x05\x21", 4))
	a, b := parse(), parse()
	stepsA, stepsB := crdvalidation.Mutate(a, ops), crdvalidation.Mutate(b, ops)
	require.Equal(t, stepsA, stepsB)
	require.True(t, reflect.DeepEqual(a, b))
	require.NotEmpty(t, stepsA)
	require.False(t, reflect.DeepEqual(a, parse()))
	for i := range 256 {
		crdvalidation.Mutate(parse(), []byte{byte(i), byte(i / 7), byte(i * 13), byte(i), 5, byte(255 - i)})
	}
}
