//go:build integration

package api_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/statefulops/statefulops/shared/api/selectorschema"
)

// The rules of package selectorschema (label selectors bounded, label keys and values valid, selectors
// satisfied by the pod template's labels), which `make generate` adds to the CRD files after
// controller-gen, accept what they should: the seeds' examples and valid selectors of every shape. What
// they refuse is in the kinds' bad-input tables (*_validation_test.go, docs/bad-input.md).

// TestCRDFilesHaveSelectorRules checks that the CRD files the API server serves here are bounded
// already: selectorschema.Apply changes nothing more (`make generate` ran boundselectors on them).
func TestCRDFilesHaveSelectorRules(t *testing.T) {
	for _, op := range operators {
		files, err := filepath.Glob(filepath.Join("..", "..", op, "config", "crd", "bases", "*.yaml"))
		require.NoError(t, err)
		require.NotEmpty(t, files)
		for _, file := range files {
			raw, err := os.ReadFile(file)
			require.NoError(t, err)
			crd := &apiextensionsv1.CustomResourceDefinition{}
			require.NoError(t, yaml.Unmarshal(raw, crd))
			before, err := yaml.Marshal(crd)
			require.NoError(t, err)
			require.NoError(t, selectorschema.Apply(crd))
			after, err := yaml.Marshal(crd)
			require.NoError(t, err)
			require.Equal(t, string(before), string(after), "%s lacks the selector rules: run `make generate`", file)
		}
	}
}

type acceptedCase struct {
	name string
	doc  string
}

func runAcceptedCases(t *testing.T, cases []acceptedCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { mustApply(t, tc.doc) })
	}
}

func TestSelectorRulesAcceptStatefulSingleton(t *testing.T) {
	doc := func(selector string) string {
		return "apiVersion: apps.openshift.statefulsingleton.com/v1\nkind: StatefulSingleton\nmetadata: {name: ss-bounded}\nspec:\n  selector: " + selector + "\n"
	}
	runAcceptedCases(t, []acceptedCase{
		{"original StatefulSingleton example", seed000Singleton},
		{"prefixed key, empty value", doc("{matchLabels: {app.kubernetes.io/name: db, empty: ''}}")},
		{"expressions", doc("{matchExpressions: [{key: app.kubernetes.io/name, operator: In, values: [db, db-2]}, {key: legacy, operator: DoesNotExist}]}")},
	})
}

func TestSelectorRulesAcceptStatefulCluster(t *testing.T) {
	// statefulCluster's template has the label tier: db; the selector's matchLabels are added to pods.
	withExpr := func(name, expr string) string {
		return withSelector(statefulCluster(name, ""), name, "    matchLabels: {app: "+name+"}\n    matchExpressions: ["+expr+"]\n")
	}
	runAcceptedCases(t, []acceptedCase{
		{"original StatefulCluster example", statefulClusterSeed},
		{"In on a template label", withExpr("sc-in", "{key: tier, operator: In, values: [db, web]}")},
		{"NotIn on a template label", withExpr("sc-notin", "{key: tier, operator: NotIn, values: [web]}")},
		{"Exists on a matchLabels key", withExpr("sc-exists", "{key: app, operator: Exists}")},
		{"DoesNotExist on an absent label", withExpr("sc-dne", "{key: legacy, operator: DoesNotExist}")},
		{"In on the operator's identity label", withExpr("sc-identity", "{key: enge.me/identity, operator: Exists}")},
	})
}

func TestSelectorRulesAcceptExtendedStatefulSet(t *testing.T) {
	// extendedStatefulSet's template has the label app: <name>, and selects it.
	withSel := func(name, sel string) string {
		return withSelector(extendedStatefulSet(name, "", ""), name, sel)
	}
	runAcceptedCases(t, []acceptedCase{
		{"original ExtendedStatefulSet example", extendedStatefulSetSeed},
		{"minimal", extendedStatefulSet("ests-min", "", "")},
		{"expressions on template labels", withSel("ests-expr", "        matchExpressions: [{key: app, operator: In, values: [ests-expr]}, {key: tier, operator: DoesNotExist}]\n")},
	})
}

// manyLabels returns n matchLabels entries in flow style.
func manyLabels(n int) string {
	var parts []string
	for i := range n {
		parts = append(parts, "l"+strings.Repeat("x", i%5)+string(rune('a'+i%26))+string(rune('a'+i/26))+": v")
	}
	return strings.Join(parts, ", ")
}
