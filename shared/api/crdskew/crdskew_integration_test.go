//go:build integration

// Package crdskew checks that every operator's CRD survives the manifest upgrades and rollbacks of
// docs/upgrading.md against a real kube-apiserver and etcd (envtest): a newer CRD applied over an older
// one, client-side and server-side, keeps every existing custom resource valid and served, a rollback
// does too, and a field only the newer CRD knows is pruned by the older one and ignored by the older
// operator's typed client.
package crdskew

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

var operators = []string{"singleton-operator", "cluster-operator", "lease-operator", "rollout-operator", "extended-operator"}

// nextField is the optional spec field of the CRD one release ahead ("N+1") in the reverse skew.
const nextField = "statefulopsNextReleaseField"

// skew is one operator's CRD in its three versions and the custom resource of its sample.
type skew struct {
	operator string
	current  *apiextensionsv1.CustomResourceDefinition
	// older is current without removed, one of its optional spec fields: the CRD of the release before.
	older   *apiextensionsv1.CustomResourceDefinition
	removed string
	// next is current with the optional spec field nextField: the CRD of the release after.
	next   *apiextensionsv1.CustomResourceDefinition
	sample *unstructured.Unstructured
}

// Per operator, with the CRD one release behind (the current one without an optional spec field its
// sample sets): resources created then, with the field (pruned), stay valid and served (get, list,
// update) once the current CRD is applied over it client-side (Update), after a rollback applied
// server-side (Apply, force), and after the current CRD is applied server-side again; the field is kept
// while the current CRD is installed and pruned while the older one is. Then the CRD one release ahead
// (an extra optional spec field): a resource carrying the field is read, listed and patched by the
// current typed client (the operator one release behind it) without error, the patch keeps the field,
// and rolling the CRD back prunes it from what the API server serves.
func TestCRDUpgradesAndRollbacksKeepEveryResourceServed(t *testing.T) {
	env := &envtest.Environment{}
	cfg, err := env.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	c := newClient(t, cfg)
	for _, ns := range namespaces {
		require.NoError(t, c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}

	skews := make([]*skew, 0, len(operators))
	for _, op := range operators {
		skews = append(skews, loadSkew(t, op))
	}
	for _, s := range skews {
		t.Run(s.operator, func(t *testing.T) {
			t.Logf("older CRD: %s without spec.%s", s.current.Name, s.removed)
			// Release N-1: the older CRD, and resources created with it.
			require.NoError(t, c.Create(t.Context(), s.older.DeepCopy()))
			waitEstablished(t, c, s.current.Name)
			waitPruned(t, c, s.sample, s.removed, true)
			created := []string{} // the namespaces holding a copy of the sample
			for _, name := range []string{"before-upgrade-1", "before-upgrade-2"} {
				obj := named(s.sample, name)
				require.NoError(t, c.Create(t.Context(), obj), "creating %s with the older CRD", name)
				assert.False(t, hasSpecField(t, c, obj, s.removed), "the older CRD prunes spec.%s", s.removed)
				created = append(created, name)
			}

			// Upgrade client-side: an Update of the CRD, as `kubectl apply` without --server-side sends.
			upgrade := s.current.DeepCopy()
			existing := &apiextensionsv1.CustomResourceDefinition{}
			require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: s.current.Name}, existing))
			upgrade.ResourceVersion = existing.ResourceVersion
			require.NoError(t, c.Update(t.Context(), upgrade), "client-side upgrade of %s", s.current.Name)
			waitPruned(t, c, s.sample, s.removed, false)
			requireServed(t, c, s.sample, created)
			for _, name := range created {
				// What the older CRD pruned is gone; a default of the newer CRD is served in its place.
				defaulted := s.current.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties[s.removed].Default != nil
				assert.Equal(t, defaulted, hasSpecField(t, c, named(s.sample, name), s.removed),
					"%s, created before the upgrade, is served with spec.%s only if the newer CRD defaults it", name, s.removed)
			}
			obj := named(s.sample, "after-upgrade")
			require.NoError(t, c.Create(t.Context(), obj))
			assert.True(t, hasSpecField(t, c, obj, s.removed), "the current CRD keeps spec.%s", s.removed)
			created = append(created, "after-upgrade")

			// Roll back server-side (the previous manifest, `kubectl apply --server-side --force-conflicts`).
			serverSideApply(t, c, s.older)
			waitPruned(t, c, s.sample, s.removed, true)
			requireServed(t, c, s.sample, created)
			assert.False(t, hasSpecField(t, c, named(s.sample, "after-upgrade"), s.removed), "after the rollback the API server serves %s without spec.%s", obj.GetNamespace(), s.removed)

			// Upgrade server-side.
			serverSideApply(t, c, s.current)
			waitPruned(t, c, s.sample, s.removed, false)
			requireServed(t, c, s.sample, created)

			// Release N+1: its CRD with an optional field the current operator does not know.
			serverSideApply(t, c, s.next)
			waitPruned(t, c, s.sample, nextField, false)
			ahead := named(s.sample, "from-next-release")
			require.NoError(t, unstructured.SetNestedField(ahead.Object, "set by a newer client", "spec", nextField))
			require.NoError(t, c.Create(t.Context(), ahead))
			created = append(created, ahead.GetNamespace())
			requireServed(t, c, s.sample, created)
			typed := typedObject(t, c, s.sample.GroupVersionKind())
			require.NoError(t, c.Get(t.Context(), client.ObjectKeyFromObject(ahead), typed), "the current typed client reads a resource of the newer CRD")
			typedList := typedList(t, c, s.sample.GroupVersionKind())
			require.NoError(t, c.List(t.Context(), typedList), "the current typed client lists resources of the newer CRD")
			items, err := metaItems(typedList)
			require.NoError(t, err)
			assert.Len(t, items, len(created))
			// A merge patch from the current operator (what PatchStatus and EnsureFinalizer send) keeps what
			// it does not know; a full Update from it would drop the field, which is why no operator updates
			// a spec it read.
			before := typed.DeepCopyObject().(client.Object)
			typed.SetAnnotations(map[string]string{"statefulops.dev/crdskew": "patched by the older operator"})
			require.NoError(t, c.Patch(t.Context(), typed, client.MergeFrom(before)))
			assert.True(t, hasSpecField(t, c, ahead, nextField), "the older operator's patch keeps spec.%s", nextField)

			// Roll back to the current CRD: the newer field is pruned from what is served.
			serverSideApply(t, c, s.current)
			waitPruned(t, c, s.sample, nextField, true)
			assert.False(t, hasSpecField(t, c, ahead, nextField), "after the rollback spec.%s is not served", nextField)
			requireServed(t, c, s.sample, created)
		})
	}
}

// loadSkew reads the operator's CRD and sample and derives the older and newer CRDs.
func loadSkew(t *testing.T, op string) *skew {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "..", op, "config", "crd", "bases", "*.yaml"))
	require.NoError(t, err)
	require.Len(t, files, 1, "one CRD for %s", op)
	raw, err := os.ReadFile(files[0])
	require.NoError(t, err)
	current := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, utilyaml.Unmarshal(raw, current))
	require.Len(t, current.Spec.Versions, 1, "%s serves one version (no conversion)", current.Name)

	var sample *unstructured.Unstructured
	samples, err := os.ReadFile(filepath.Join("..", "..", "..", op, "config", "samples", sampleFile(op)))
	require.NoError(t, err)
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(samples), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			require.True(t, errors.Is(err, io.EOF), "decoding the samples of %s: %v", op, err)
			break
		}
		if u.GetKind() == current.Spec.Names.Kind {
			sample = u
		}
	}
	require.NotNil(t, sample, "a %s in the samples of %s", current.Spec.Names.Kind, op)
	sample.SetNamespace(metav1.NamespaceDefault)

	schemaProps := current.Spec.Versions[0].Schema.OpenAPIV3Schema
	specSchema := schemaProps.Properties["spec"]
	removed := removableField(t, current, specSchema, sample)
	older := current.DeepCopy()
	olderSpec := older.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	delete(olderSpec.Properties, removed)
	older.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = olderSpec

	next := current.DeepCopy()
	nextSpec := next.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	nextSpec.Properties[nextField] = apiextensionsv1.JSONSchemaProps{Type: "string", MaxLength: ptr(int64(64)),
		Description: "An optional field of the next release (crdskew test)."}
	next.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = nextSpec
	return &skew{operator: op, current: current, older: older, removed: removed, next: next, sample: sample}
}

func sampleFile(op string) string {
	entries, _ := filepath.Glob(filepath.Join("..", "..", "..", op, "config", "samples", "*.yaml"))
	if len(entries) != 1 {
		return ""
	}
	return filepath.Base(entries[0])
}

// removableField is an optional spec field that no CEL rule and no printer column names, the field a
// release could have added without changing anything else of its CRD, with a value: the sample's, or
// else the field's default, which is then set in sample.
func removableField(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition, spec apiextensionsv1.JSONSchemaProps, sample *unstructured.Unstructured) string {
	t.Helper()
	sampleSpec, _, err := unstructured.NestedMap(sample.Object, "spec")
	require.NoError(t, err)
	var rules []string
	collectRules(*crd.Spec.Versions[0].Schema.OpenAPIV3Schema, &rules)
	for _, col := range crd.Spec.Versions[0].AdditionalPrinterColumns {
		rules = append(rules, col.JSONPath)
	}
	var names []string
	for name := range spec.Properties {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		_, set := sampleSpec[name]
		def := spec.Properties[name].Default
		if (!set && def == nil) || slices.Contains(spec.Required, name) {
			continue
		}
		word := regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\b`)
		if slices.ContainsFunc(rules, word.MatchString) {
			continue
		}
		if !set {
			var value any
			require.NoError(t, json.Unmarshal(def.Raw, &value))
			require.NoError(t, unstructured.SetNestedField(sample.Object, runtime.DeepCopyJSONValue(value), "spec", name))
		}
		return name
	}
	t.Fatalf("%s: no optional spec field of the sample that no rule names", crd.Name)
	return ""
}

func collectRules(s apiextensionsv1.JSONSchemaProps, rules *[]string) {
	for _, v := range s.XValidations {
		*rules = append(*rules, v.Rule, v.MessageExpression)
	}
	for _, p := range s.Properties {
		collectRules(p, rules)
	}
	if s.Items != nil && s.Items.Schema != nil {
		collectRules(*s.Items.Schema, rules)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		collectRules(*s.AdditionalProperties.Schema, rules)
	}
}

func newClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme,
		singletonv1.AddToScheme, clusterv1alpha1.AddToScheme, leasev1.AddToScheme, rolloutv1alpha1.AddToScheme, extendedv1alpha1.AddToScheme} {
		require.NoError(t, add(scheme))
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	return c
}

func waitEstablished(t *testing.T, c client.Client, name string) {
	t.Helper()
	require.Eventually(t, func() bool {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if c.Get(t.Context(), client.ObjectKey{Name: name}, crd) != nil {
			return false
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true
			}
		}
		return false
	}, time.Minute, 100*time.Millisecond, "CRD %s established", name)
}

// waitPruned waits until the API server serves the CRD just applied: a dry-run create of the sample
// with spec.field set returns it pruned (pruned) or kept (!pruned).
func waitPruned(t *testing.T, c client.Client, sample *unstructured.Unstructured, field string, pruned bool) {
	t.Helper()
	var lastErr error
	defer func() {
		if t.Failed() && lastErr != nil {
			t.Logf("the last dry-run create failed: %v", lastErr)
		}
	}()
	require.Eventually(t, func() bool {
		probe := named(sample, "probe")
		if _, set, _ := unstructured.NestedFieldNoCopy(probe.Object, "spec", field); !set {
			if unstructured.SetNestedField(probe.Object, "probe", "spec", field) != nil {
				return false
			}
		}
		if err := c.Create(t.Context(), probe, client.DryRunAll); err != nil {
			lastErr = err
			return false
		}
		_, kept, _ := unstructured.NestedFieldNoCopy(probe.Object, "spec", field)
		return kept != pruned
	}, time.Minute, 100*time.Millisecond, "spec.%s %s by the CRD just applied", field, map[bool]string{true: "pruned", false: "kept"}[pruned])
}

// requireServed gets, lists and updates the sample's copy in each of the namespaces.
func requireServed(t *testing.T, c client.Client, sample *unstructured.Unstructured, namespaces []string) {
	t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(sample.GroupVersionKind().GroupVersion().WithKind(sample.GetKind() + "List"))
	require.NoError(t, c.List(t.Context(), list))
	var listed []string
	for _, item := range list.Items {
		listed = append(listed, item.GetNamespace())
	}
	assert.ElementsMatch(t, namespaces, listed, "every resource is listed")
	for _, ns := range namespaces {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(sample.GroupVersionKind())
		name := ns + "/" + sample.GetName()
		require.NoError(t, c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: sample.GetName()}, obj), "get %s", name)
		labels := obj.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels["statefulops.dev/crdskew-updates"] = time.Now().Format("150405.000000")
		obj.SetLabels(labels)
		require.NoError(t, c.Update(t.Context(), obj), "update %s: it stays valid under the CRD just applied", name)
	}
}

func serverSideApply(t *testing.T, c client.Client, crd *apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	raw, err := json.Marshal(crd)
	require.NoError(t, err)
	obj := &unstructured.Unstructured{}
	require.NoError(t, obj.UnmarshalJSON(raw))
	obj.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	obj.SetResourceVersion("")
	unstructured.RemoveNestedField(obj.Object, "status")
	unstructured.RemoveNestedField(obj.Object, "metadata", "creationTimestamp")
	require.NoError(t, c.Patch(t.Context(), obj, client.Apply, client.ForceOwnership, client.FieldOwner("kubectl")),
		"server-side apply of %s", crd.Name)
}

// named is the sample in namespace ns: the samples' names are part of their rules (a selector names
// its object), so each copy keeps the name and gets a namespace of its own (namespaces).
func named(sample *unstructured.Unstructured, ns string) *unstructured.Unstructured {
	obj := sample.DeepCopy()
	obj.SetNamespace(ns)
	return obj
}

// namespaces are the namespaces of named.
var namespaces = []string{"before-upgrade-1", "before-upgrade-2", "after-upgrade", "from-next-release", "probe"}

func hasSpecField(t *testing.T, c client.Client, obj *unstructured.Unstructured, field string) bool {
	t.Helper()
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(obj.GroupVersionKind())
	require.NoError(t, c.Get(t.Context(), client.ObjectKeyFromObject(obj), got))
	_, found, err := unstructured.NestedFieldNoCopy(got.Object, "spec", field)
	require.NoError(t, err)
	return found
}

func typedObject(t *testing.T, c client.Client, gvk schema.GroupVersionKind) client.Object {
	t.Helper()
	obj, err := c.Scheme().New(gvk)
	require.NoError(t, err)
	return obj.(client.Object)
}

func typedList(t *testing.T, c client.Client, gvk schema.GroupVersionKind) client.ObjectList {
	t.Helper()
	obj, err := c.Scheme().New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	require.NoError(t, err)
	return obj.(client.ObjectList)
}

func metaItems(list client.ObjectList) ([]runtime.Object, error) {
	return meta.ExtractList(list)
}

func ptr[T any](v T) *T { return &v }
