//go:build integration

package api_test

import (
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
`,
			want: map[string]any{
				"spec.terminationGracePeriod": 3600,
				"spec.maxTransitionTime":      3600,
				"spec.respectPodGracePeriod":  false,
				"spec.holdMode":               "SchedulingGate",
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

func TestStatefulSingletonRejectsInvalid(t *testing.T) {
	tests := []struct {
		name string
		spec string // the object's spec block, indented by two spaces
		want []string
	}{
		{"spec missing", "", []string{"spec"}},
		{"selector missing", "  maxTransitionTime: 300\n", []string{"spec.selector", "Required value"}},
		{"selector empty", "  selector: {}\n", []string{"spec.selector", "must not be empty"}},
		{"maxTransitionTime 0", "  selector: {matchLabels: {app: db}}\n  maxTransitionTime: 0\n", []string{"spec.maxTransitionTime"}},
		{"maxTransitionTime above 3600", "  selector: {matchLabels: {app: db}}\n  maxTransitionTime: 3601\n", []string{"spec.maxTransitionTime"}},
		{"terminationGracePeriod 0", "  selector: {matchLabels: {app: db}}\n  terminationGracePeriod: 0\n", []string{"spec.terminationGracePeriod"}},
		{
			"terminationGracePeriod above maxTransitionTime (CEL)",
			"  selector: {matchLabels: {app: db}}\n  terminationGracePeriod: 600\n  maxTransitionTime: 300\n",
			[]string{"spec.terminationGracePeriod", "must be <= spec.maxTransitionTime"},
		},
		{
			"terminationGracePeriod above the default maxTransitionTime (CEL after defaulting)",
			"  selector: {matchLabels: {app: db}}\n  terminationGracePeriod: 301\n",
			[]string{"spec.terminationGracePeriod", "must be <= spec.maxTransitionTime"},
		},
		{"holdMode unknown", "  selector: {matchLabels: {app: db}}\n  holdMode: Sidecar\n", []string{"spec.holdMode", "Unsupported value"}},
		{"respectPodGracePeriod not a boolean", "  selector: {matchLabels: {app: db}}\n  respectPodGracePeriod: \"yes\"\n", []string{"spec.respectPodGracePeriod"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := "apiVersion: apps.openshift.statefulsingleton.com/v1\nkind: StatefulSingleton\nmetadata: {name: ss-invalid}\n"
			if tt.spec != "" {
				doc += "spec:\n" + tt.spec
			}
			mustReject(t, doc, tt.want...)
		})
	}
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
