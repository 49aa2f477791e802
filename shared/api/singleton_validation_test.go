//go:build integration

package api_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// seed000Singleton is the StatefulSingleton of seed 000, verbatim.
const seed000Singleton = `
apiVersion: apps.openshift.statefulsingleton.com/v1
kind: StatefulSingleton
metadata:
  name: my-database
  namespace: production
spec:
  selector:
    matchLabels:
      app: postgres-database
      tier: database
  terminationGracePeriod: 120  # 2 minutes
  maxTransitionTime: 300       # 5 minutes
`

func TestStatefulSingletonDefaults(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want map[string]any
	}{
		{
			name: "seed 000 example",
			doc:  seed000Singleton,
			want: map[string]any{
				"spec.terminationGracePeriod": 120,
				"spec.maxTransitionTime":      300,
				"spec.respectPodGracePeriod":  true,
				"spec.holdMode":               "Wrapper",
				"spec.antiAffinity":           "Preferred",
				"spec.successorWait":          10,
			},
		},
		{
			name: "only a selector",
			doc: `
apiVersion: apps.openshift.statefulsingleton.com/v1
kind: StatefulSingleton
metadata: {name: ss-minimal}
spec:
  selector: {matchLabels: {app: db}}
`,
			want: map[string]any{
				"spec.terminationGracePeriod": 30,
				"spec.maxTransitionTime":      300,
				"spec.respectPodGracePeriod":  true,
				"spec.holdMode":               "Wrapper",
				"spec.antiAffinity":           "Preferred",
				"spec.successorWait":          10,
			},
		},
		{
			name: "explicit values are kept",
			doc: `
apiVersion: apps.openshift.statefulsingleton.com/v1
kind: StatefulSingleton
metadata: {name: ss-explicit}
spec:
  selector:
    matchExpressions: [{key: app, operator: In, values: [db]}]
  terminationGracePeriod: 3600
  maxTransitionTime: 3600
  respectPodGracePeriod: false
  holdMode: SchedulingGate
  antiAffinity: Required
  successorWait: 0
`,
			want: map[string]any{
				"spec.terminationGracePeriod": 3600,
				"spec.maxTransitionTime":      3600,
				"spec.respectPodGracePeriod":  false,
				"spec.holdMode":               "SchedulingGate",
				"spec.antiAffinity":           "Required",
				"spec.successorWait":          0,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := readBack(t, mustApply(t, tt.doc))
			for path, want := range tt.want {
				require.EqualValues(t, want, field(t, got, path), path)
			}
		})
	}
}

// singletonBadInputs are StatefulSingletons the operator could never act on.
func singletonBadInputs() []badInput {
	const sel = "  selector: {matchLabels: {app: db}}\n"
	tests := []struct {
		name string
		spec string // the object's spec block, indented by two spaces
		want []string
	}{
		{"spec missing", "", []string{"spec"}},
		{"selector missing", "  maxTransitionTime: 300\n", []string{"spec.selector", "Required value"}},
		{"selector empty", "  selector: {}\n", []string{"spec.selector", "must not be empty"}},
		{"selector operator unknown", "  selector: {matchExpressions: [{key: app, operator: Bogus, values: [db]}]}\n", []string{"spec.selector.matchExpressions", "must be In, NotIn, Exists or DoesNotExist"}},
		{"selector operator in lower case", "  selector: {matchExpressions: [{key: app, operator: in, values: [db]}]}\n", []string{"spec.selector.matchExpressions", "must be In, NotIn, Exists or DoesNotExist"}},
		{"selector In without values", "  selector: {matchExpressions: [{key: app, operator: In}]}\n", []string{"spec.selector.matchExpressions", "must not be empty when the operator is In or NotIn"}},
		{"selector NotIn with empty values", "  selector: {matchExpressions: [{key: app, operator: NotIn, values: []}]}\n", []string{"spec.selector.matchExpressions", "must not be empty when the operator is In or NotIn"}},
		{"selector Exists with values", "  selector: {matchExpressions: [{key: app, operator: Exists, values: [db]}]}\n", []string{"spec.selector.matchExpressions", "must be empty when the operator is Exists or DoesNotExist"}},
		{"selector DoesNotExist with values", "  selector: {matchExpressions: [{key: app, operator: DoesNotExist, values: [db]}]}\n", []string{"spec.selector.matchExpressions", "must be empty when the operator is Exists or DoesNotExist"}},
		{"maxTransitionTime 0", sel + "  maxTransitionTime: 0\n", []string{"spec.maxTransitionTime"}},
		{"maxTransitionTime negative", sel + "  maxTransitionTime: -300\n", []string{"spec.maxTransitionTime"}},
		{"terminationGracePeriod not a number", sel + "  terminationGracePeriod: 30s\n", []string{"spec.terminationGracePeriod"}},
		{"terminationGracePeriod 0", sel + "  terminationGracePeriod: 0\n", []string{"spec.terminationGracePeriod"}},
		{"holdMode unknown", sel + "  holdMode: Sidecar\n", []string{"spec.holdMode", "Unsupported value"}},
		{"antiAffinity unknown", sel + "  antiAffinity: Hard\n", []string{"spec.antiAffinity", "Unsupported value"}},
		{"selector label value with a space", "  selector: {matchLabels: {app: 'my db'}}\n", []string{"spec.selector.matchLabels", "values must be label values"}},
		{"selector label value of 64 characters", "  selector: {matchLabels: {app: " + strings.Repeat("v", 64) + "}}\n", []string{"spec.selector.matchLabels", "may not be more than 63"}},
		{"selector label value ending in a dash", "  selector: {matchLabels: {app: db-}}\n", []string{"spec.selector.matchLabels", "values must be label values"}},
		{"selector label key beginning with a dash", "  selector: {matchLabels: {-app: db}}\n", []string{"spec.selector.matchLabels", "keys must be label keys"}},
		{"selector label key with two slashes", "  selector: {matchLabels: {a/b/c: db}}\n", []string{"spec.selector.matchLabels", "keys must be label keys"}},
		{"selector label key name of 64 characters", "  selector: {matchLabels: {" + strings.Repeat("k", 64) + ": db}}\n", []string{"spec.selector.matchLabels", "keys must be label keys"}},
		{"selector label key prefix of 254 characters", "  selector: {matchLabels: {" + strings.Repeat("p", 254) + "/app: db}}\n", []string{"spec.selector.matchLabels", "keys must be label keys"}},
		{"selector expression key invalid", "  selector: {matchExpressions: [{key: 'my app', operator: Exists}]}\n", []string{"spec.selector.matchExpressions", "key must be a label key"}},
		{"selector expression value invalid", "  selector: {matchExpressions: [{key: app, operator: In, values: ['db!']}]}\n", []string{"spec.selector.matchExpressions", "values must be label values"}},
		{"selector with 65 matchLabels", "  selector: {matchLabels: {" + manyLabels(65) + "}}\n", []string{"spec.selector.matchLabels", "must have at most 64 items"}},
		{"successorWait above 30", sel + "  successorWait: 60\n", []string{"spec.successorWait", "less than or equal to 30"}},
		{"successorWait negative", sel + "  successorWait: -1\n", []string{"spec.successorWait", "greater than or equal to 0"}},
		{"respectPodGracePeriod not a boolean", sel + "  respectPodGracePeriod: \"yes\"\n", []string{"spec.respectPodGracePeriod"}},
	}
	out := make([]badInput, 0, len(tests))
	for _, tt := range tests {
		doc := "apiVersion: apps.openshift.statefulsingleton.com/v1\nkind: StatefulSingleton\nmetadata: {name: ss-invalid}\n"
		input := "(no spec)"
		if tt.spec != "" {
			doc += "spec:\n" + tt.spec
			input = tt.spec
		}
		out = append(out, badInput{Case: tt.name, Input: input, Doc: doc, Want: tt.want})
	}
	return out
}

func TestStatefulSingletonRejectsInvalid(t *testing.T) {
	runBadInputs(t, singletonBadInputs())
}

// A manifest of the original project that we would refuse only as a matter of taste is accepted: the
// original e2e suite's StatefulSingleton has a grace period longer than maxTransitionTime (the operator
// reports that concern instead).
func TestStatefulSingletonAcceptsOriginalManifests(t *testing.T) {
	mustApply(t, `
apiVersion: apps.openshift.statefulsingleton.com/v1
kind: StatefulSingleton
metadata: {name: ss-original-e2e}
spec:
  selector: {matchLabels: {app: db}}
  terminationGracePeriod: 30
  maxTransitionTime: 1
`)
	mustApply(t, `
apiVersion: apps.openshift.statefulsingleton.com/v1
kind: StatefulSingleton
metadata: {name: ss-long-handover}
spec:
  selector: {matchLabels: {app: db}}
  terminationGracePeriod: 7200
  maxTransitionTime: 10800
`)
	mustApply(t, `
apiVersion: apps.openshift.statefulsingleton.com/v1
kind: StatefulSingleton
metadata: {name: ss-expressions}
spec:
  selector:
    matchExpressions:
    - {key: app, operator: In, values: [db]}
    - {key: tier, operator: NotIn, values: [cache]}
    - {key: role, operator: Exists}
    - {key: legacy, operator: DoesNotExist, values: []}
`)
}

func TestStatefulSingletonUpdates(t *testing.T) {
	const doc = `
apiVersion: apps.openshift.statefulsingleton.com/v1
kind: StatefulSingleton
metadata: {name: ss-update}
spec:
  selector: {matchLabels: {app: db}}
`
	t.Run("selector is immutable", func(t *testing.T) {
		obj := readBack(t, mustApply(t, doc))
		rejectUpdateOf(t, obj, func(u *unstructured.Unstructured) {
			require.NoError(t, unstructured.SetNestedStringMap(u.Object, map[string]string{"app": "other"}, "spec", "selector", "matchLabels"))
		}, "spec.selector", "immutable")
	})
	t.Run("other fields can change", func(t *testing.T) {
		obj := readBack(t, mustApply(t, doc))
		require.NoError(t, unstructured.SetNestedField(obj.Object, int64(600), "spec", "maxTransitionTime"))
		require.NoError(t, unstructured.SetNestedField(obj.Object, "SchedulingGate", "spec", "holdMode"))
		require.NoError(t, k8sClient.Update(t.Context(), obj))
	})
	t.Run("status.phase is an enum", func(t *testing.T) {
		obj := readBack(t, mustApply(t, doc))
		require.NoError(t, unstructured.SetNestedField(obj.Object, "Bogus", "status", "phase"))
		err := k8sClient.Status().Update(t.Context(), obj)
		require.Error(t, err)
		require.True(t, apierrors.IsInvalid(err), "want Invalid, got %v", err)
		require.Contains(t, err.Error(), "status.phase")
	})
}

// rejectUpdateOf re-reads obj, applies mutate and asserts that the API server refuses the update as
// invalid with an error naming each wanted string.
func rejectUpdateOf(t *testing.T, obj *unstructured.Unstructured, mutate func(*unstructured.Unstructured), want ...string) {
	t.Helper()
	cur := readBack(t, obj)
	mutate(cur)
	err := k8sClient.Update(t.Context(), cur)
	require.Error(t, err, "the API server accepted an invalid update")
	require.True(t, apierrors.IsInvalid(err), "want an Invalid error, got: %v", err)
	for _, w := range want {
		require.Contains(t, err.Error(), w)
	}
}
