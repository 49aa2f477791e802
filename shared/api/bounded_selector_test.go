//go:build integration

package api_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/statefulops/statefulops/shared/api/selectorschema"
)

// The rules of package selectorschema, which need bounds that controller-gen cannot put on a
// metav1.LabelSelector, are checked here on copies of the generated CRDs (served under a test group)
// with the bounds and rules added: the API server takes the CRDs (the CEL cost budget holds) and the
// rules refuse what they should and accept the seeds' examples. Once `make generate` applies
// selectorschema to the CRDs it writes, these cases move to the kinds' bad-input tables.

// installBounded serves a copy of the CRD in file under group, with selectorschema.Apply applied, and
// returns a function that rewrites a manifest's apiVersion to that group.
func installBounded(t *testing.T, file, group string) func(doc string) string {
	t.Helper()
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	crd := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, yaml.Unmarshal(raw, crd))
	oldGroup := crd.Spec.Group
	crd.Spec.Group = group
	crd.Name = crd.Spec.Names.Plural + "." + group
	require.NoError(t, selectorschema.Apply(crd))
	require.NoError(t, selectorschema.Apply(crd), "applying it twice")
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	require.NoError(t, err)
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion("apiextensions.k8s.io/v1")
	u.SetKind("CustomResourceDefinition")
	require.NoError(t, k8sClient.Create(t.Context(), u), "the API server refuses the CRD with the bounded selector rules")
	require.Eventually(t, func() bool {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(u.GroupVersionKind())
		if k8sClient.Get(t.Context(), client.ObjectKeyFromObject(u), got) != nil {
			return false
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return true
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond)
	return func(doc string) string {
		return strings.Replace(doc, "apiVersion: "+oldGroup+"/", "apiVersion: "+group+"/", 1)
	}
}

// eventuallyApply creates doc, retrying while the client does not know the new kind yet.
func eventuallyApply(t *testing.T, doc string) error {
	t.Helper()
	var err error
	for range 50 {
		_, err = applyYAML(t, doc)
		if err == nil || !strings.Contains(err.Error(), "no matches for kind") {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

type boundedCase struct {
	name string
	doc  string
	want []string // empty: accepted
}

func runBoundedCases(t *testing.T, rewrite func(string) string, cases []boundedCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := eventuallyApply(t, rewrite(tc.doc))
			if len(tc.want) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err, "the API server accepted an invalid object")
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestBoundedSelectorStatefulSingleton(t *testing.T) {
	rewrite := installBounded(t, filepath.Join("..", "..", "singleton-operator", "config", "crd", "bases", "apps.openshift.statefulsingleton.com_statefulsingletons.yaml"),
		"bounded.statefulsingleton.test")
	doc := func(selector string) string {
		return "apiVersion: apps.openshift.statefulsingleton.com/v1\nkind: StatefulSingleton\nmetadata: {name: ss-bounded}\nspec:\n  selector: " + selector + "\n"
	}
	runBoundedCases(t, rewrite, []boundedCase{
		{"seed 000", seed000Singleton, nil},
		{"prefixed key, empty value", doc("{matchLabels: {app.kubernetes.io/name: db, empty: ''}}"), nil},
		{"expressions", doc("{matchExpressions: [{key: app.kubernetes.io/name, operator: In, values: [db, db-2]}, {key: legacy, operator: DoesNotExist}]}"), nil},
		{"label value with a space", doc("{matchLabels: {app: 'my db'}}"), []string{"spec.selector.matchLabels", "values must be label values"}},
		{"label value of 64 characters", doc("{matchLabels: {app: " + strings.Repeat("v", 64) + "}}"), []string{"spec.selector.matchLabels", "may not be more than 63"}},
		{"label value ending in a dash", doc("{matchLabels: {app: db-}}"), []string{"spec.selector.matchLabels", "values must be label values"}},
		{"label key beginning with a dash", doc("{matchLabels: {-app: db}}"), []string{"spec.selector.matchLabels", "keys must be label keys"}},
		{"label key with two slashes", doc("{matchLabels: {a/b/c: db}}"), []string{"spec.selector.matchLabels", "keys must be label keys"}},
		{"label key name of 64 characters", doc("{matchLabels: {" + strings.Repeat("k", 64) + ": db}}"), []string{"spec.selector.matchLabels", "keys must be label keys"}},
		{"label key prefix of 254 characters", doc("{matchLabels: {" + strings.Repeat("p", 254) + "/app: db}}"), []string{"spec.selector.matchLabels", "keys must be label keys"}},
		{"expression key invalid", doc("{matchExpressions: [{key: 'my app', operator: Exists}]}"), []string{"spec.selector.matchExpressions", "key must be a label key"}},
		{"expression value invalid", doc("{matchExpressions: [{key: app, operator: In, values: ['db!']}]}"), []string{"spec.selector.matchExpressions", "values must be label values"}},
		{"65 matchLabels", doc("{matchLabels: {" + manyLabels(65) + "}}"), []string{"spec.selector.matchLabels", "must have at most 64 items"}},
	})
}

func TestBoundedSelectorStatefulCluster(t *testing.T) {
	rewrite := installBounded(t, filepath.Join("..", "..", "cluster-operator", "config", "crd", "bases", "enge.me_statefulclusters.yaml"),
		"bounded.enge.test")
	// statefulCluster's template has the label tier: db; the selector's matchLabels are added to pods.
	withExpr := func(name, expr string) string {
		return withSelector(statefulCluster(name, ""), name, "    matchLabels: {app: "+name+"}\n    matchExpressions: ["+expr+"]\n")
	}
	runBoundedCases(t, rewrite, []boundedCase{
		{"seed 001", statefulClusterSeed, nil},
		{"In on a template label", withExpr("sc-in", "{key: tier, operator: In, values: [db, web]}"), nil},
		{"NotIn on a template label", withExpr("sc-notin", "{key: tier, operator: NotIn, values: [web]}"), nil},
		{"Exists on a matchLabels key", withExpr("sc-exists", "{key: app, operator: Exists}"), nil},
		{"DoesNotExist on an absent label", withExpr("sc-dne", "{key: legacy, operator: DoesNotExist}"), nil},
		{"In on the operator's identity label", withExpr("sc-identity", "{key: enge.me/identity, operator: Exists}"), nil},
		{"In without the template's value", withExpr("sc-in-bad", "{key: tier, operator: In, values: [web]}"), []string{"spec.selector.matchExpressions", "must be satisfied by the pod template's labels"}},
		{"NotIn with the template's value", withExpr("sc-notin-bad", "{key: tier, operator: NotIn, values: [db]}"), []string{"spec.selector.matchExpressions", "must be satisfied by the pod template's labels"}},
		{"Exists on an absent label", withExpr("sc-exists-bad", "{key: zone, operator: Exists}"), []string{"spec.selector.matchExpressions", "must be satisfied by the pod template's labels"}},
		{"DoesNotExist on a template label", withExpr("sc-dne-bad", "{key: tier, operator: DoesNotExist}"), []string{"spec.selector.matchExpressions", "must be satisfied by the pod template's labels"}},
		{"In on an absent label", withExpr("sc-in-absent", "{key: zone, operator: In, values: [a]}"), []string{"spec.selector.matchExpressions", "must be satisfied by the pod template's labels"}},
		{"label value invalid", withSelector(statefulCluster("sc-bad-value", ""), "sc-bad-value", "    matchLabels: {app: 'a b'}\n"), []string{"spec.selector.matchLabels", "values must be label values"}},
	})
}

func TestBoundedSelectorExtendedStatefulSet(t *testing.T) {
	rewrite := installBounded(t, filepath.Join("..", "..", "extended-operator", "config", "crd", "bases", "fissile.cloudfoundry.org_extendedstatefulsets.yaml"),
		"bounded.fissile.test")
	// extendedStatefulSet's template has the label app: <name>, and selects it.
	withSel := func(name, sel string) string {
		return withSelector(extendedStatefulSet(name, "", ""), name, sel)
	}
	runBoundedCases(t, rewrite, []boundedCase{
		{"seed 004", extendedStatefulSetSeed, nil},
		{"minimal", extendedStatefulSet("ests-min", "", ""), nil},
		{"expressions on template labels", withSel("ests-expr", "        matchExpressions: [{key: app, operator: In, values: [ests-expr]}, {key: tier, operator: DoesNotExist}]\n"), nil},
		{"matchLabels value differs from the template", withSel("ests-other", "        matchLabels: {app: other}\n"), []string{"spec.template.spec.selector.matchLabels", "must all be in spec.template.spec.template.metadata.labels"}},
		{"matchLabels key not in the template", withSel("ests-missing", "        matchLabels: {app: ests-missing, tier: db}\n"), []string{"spec.template.spec.selector.matchLabels", "must all be in spec.template.spec.template.metadata.labels"}},
		{"In without the template's value", withSel("ests-in-bad", "        matchExpressions: [{key: app, operator: In, values: [other]}]\n"), []string{"spec.template.spec.selector.matchExpressions", "must be satisfied by the pod template's labels"}},
		{"DoesNotExist on a template label", withSel("ests-dne-bad", "        matchLabels: {app: ests-dne-bad}\n        matchExpressions: [{key: app, operator: DoesNotExist}]\n"), []string{"spec.template.spec.selector.matchExpressions", "must be satisfied by the pod template's labels"}},
		{"label key invalid", withSel("ests-bad-key", "        matchLabels: {'app name': x}\n"), []string{"spec.template.spec.selector.matchLabels", "keys must be label keys"}},
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
