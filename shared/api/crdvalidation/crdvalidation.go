// Package crdvalidation checks a custom resource offline, the way the API server checks it on create:
// the generated CRD's structural schema is applied in the API server's order (pruning of unknown fields,
// defaulting, the OpenAPI schema's types, enums, bounds, patterns and required fields, the metadata of
// the object and of its embedded resources, list-type invariants) and then, unless a blocking error
// came first, the CEL x-kubernetes-validations with the API server's cost budget.
//
// It exists so that unit tests and fuzz targets can ask "would `kubectl apply` accept this?" without an
// API server; an envtest in shared/api (TestCRDValidatorAgreesWithAPIServer) proves that its verdict
// matches a real kube-apiserver's on every case of docs/bad-input.md and on the documentation's examples.
package crdvalidation

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	metavalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// The API server's CEL limits (k8s.io/apiserver/pkg/apis/cel PerCallLimit and RuntimeCELCostBudget),
// repeated so that this module needs no direct dependency on k8s.io/apiserver.
const (
	PerCallLimit = 1000000
	CostBudget   = 10000000
)

// CRDFiles maps each kind to its generated CRD (`make generate` writes <operator>/config/crd/bases),
// relative to the repository root.
var CRDFiles = map[string]string{
	"StatefulSingleton":   "singleton-operator/config/crd/bases/apps.openshift.statefulsingleton.com_statefulsingletons.yaml",
	"StatefulCluster":     "cluster-operator/config/crd/bases/enge.me_statefulclusters.yaml",
	"StatefulSetLock":     "lease-operator/config/crd/bases/app.anukkrit.me_statefulsetlocks.yaml",
	"PhasedRollout":       "rollout-operator/config/crd/bases/sts.plus_phasedrollouts.yaml",
	"ExtendedStatefulSet": "extended-operator/config/crd/bases/fissile.cloudfoundry.org_extendedstatefulsets.yaml",
}

// Validator answers what the API server would answer on the create of one kind's object.
type Validator struct {
	Kind       string
	namespaced bool
	structural *structuralschema.Structural
	schema     apiservervalidation.SchemaCreateValidator
	cel        *cel.Validator
}

var (
	cacheMu sync.Mutex
	cache   = map[string]*Validator{}
)

// ForKind returns the validator of one of the five kinds, reading its CRD from the repository that
// contains the working directory (tests run inside it). Validators are built once per process: fuzz
// targets call this on every input.
func ForKind(kind string) (*Validator, error) {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if v, ok := cache[kind]; ok {
		return v, nil
	}
	rel, ok := CRDFiles[kind]
	if !ok {
		return nil, fmt.Errorf("no CRD file known for kind %q", kind)
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	v, err := Load(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	cache[kind] = v
	return v, nil
}

// RepoRoot is the nearest directory above the working directory that holds go.work.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work above the working directory: run inside the statefulops repository")
		}
		dir = parent
	}
}

// Load builds the validator of a CRD file (its first served version).
func Load(path string) (*Validator, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// Parse builds the validator of a CRD given as YAML.
func Parse(data []byte) (*Validator, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(data, crd); err != nil {
		return nil, err
	}
	if len(crd.Spec.Versions) == 0 || crd.Spec.Versions[0].Schema == nil {
		return nil, errors.New("the CRD has no version with a schema")
	}
	internal := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(crd.Spec.Versions[0].Schema.OpenAPIV3Schema, internal, nil); err != nil {
		return nil, err
	}
	s, err := structuralschema.NewStructural(internal)
	if err != nil {
		return nil, err
	}
	schemaValidator, _, err := apiservervalidation.NewSchemaValidator(internal)
	if err != nil {
		return nil, err
	}
	return &Validator{
		Kind:       crd.Spec.Names.Kind,
		namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
		structural: s,
		schema:     schemaValidator,
		cel:        cel.NewValidator(s, true, PerCallLimit),
	}, nil
}

// Validate prunes and defaults obj in place, as the API server stores it, and returns the errors the
// API server would answer on its create (none: accepted). obj is a whole object (apiVersion, kind,
// metadata, spec) as decoded from JSON or YAML.
func (v *Validator) Validate(ctx context.Context, obj map[string]any) field.ErrorList {
	// The request decoder's coercion (apiextensions-apiserver's unstructuredSchemaCoercer, with invalid
	// metadata refused rather than dropped): metadata that does not decode into ObjectMeta, at the root
	// or in an embedded resource, is a Bad Request; kind, apiVersion and metadata are set back clean.
	objectMeta, foundMeta, _, err := schemaobjectmeta.GetObjectMetaWithOptions(obj, schemaobjectmeta.ObjectMetaOptions{})
	if err != nil {
		return field.ErrorList{field.Invalid(field.NewPath("metadata"), nil, err.Error())}
	}
	kind, apiVersion := obj["kind"], obj["apiVersion"]
	structuralpruning.Prune(obj, v.structural, true)
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj, v.structural)
	if ferr, _ := schemaobjectmeta.CoerceWithOptions(nil, obj, v.structural, false, schemaobjectmeta.CoerceOptions{}); ferr != nil {
		return field.ErrorList{ferr}
	}
	for k, val := range map[string]any{"kind": kind, "apiVersion": apiVersion} {
		if val != nil {
			obj[k] = val
		}
	}
	if foundMeta {
		if err := schemaobjectmeta.SetObjectMeta(obj, objectMeta); err != nil {
			return field.ErrorList{field.Invalid(field.NewPath("metadata"), nil, err.Error())}
		}
	}
	structuraldefaulting.Default(obj, v.structural)
	// The API server decodes numbers as int64 when whole (k8s.io/apimachinery/pkg/util/json), the
	// schema's defaults and sigs.k8s.io/yaml give float64: CEL tells int from double.
	for k, e := range obj {
		obj[k] = wholeNumbers(e)
	}
	u := &unstructured.Unstructured{Object: obj}
	// The request's path sets the namespace (kubectl: the context's, "default" unless set).
	if v.namespaced && u.GetNamespace() == "" {
		u.SetNamespace(metav1.NamespaceDefault)
	}
	// On create the API server drops status (the status subresource writes it).
	delete(obj, "status")
	var errs field.ErrorList
	errs = append(errs, metavalidation.ValidateObjectMetaAccessor(u, v.namespaced, metavalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, v.schema)...)
	errs = append(errs, schemaobjectmeta.Validate(ctx, nil, obj, v.structural, false)...)
	errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, v.structural, obj)...)
	// The API server skips CEL when a blocking error came first, and says so.
	for _, err := range errs {
		switch err.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return append(errs, field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"))
		}
	}
	celErrs, _ := v.cel.Validate(ctx, nil, v.structural, obj, nil, CostBudget)
	return append(errs, celErrs...)
}

// ValidateYAML decodes one YAML document and validates it; it returns the object as it would be stored
// (pruned and defaulted).
func (v *Validator) ValidateYAML(ctx context.Context, doc []byte) (map[string]any, field.ErrorList, error) {
	obj := map[string]any{}
	if err := yaml.Unmarshal(doc, &obj); err != nil {
		return nil, nil, err
	}
	return obj, v.Validate(ctx, obj), nil
}

// ValidateObject validates a typed object (e.g. a *v1alpha1.StatefulCluster a fuzz target built) and,
// when it is accepted, writes the pruned and defaulted result back into it, so that what the caller
// goes on with is what the operator would read from the API server.
func (v *Validator) ValidateObject(ctx context.Context, obj runtime.Object) (field.ErrorList, error) {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	errs := v.Validate(ctx, content)
	if len(errs) > 0 {
		return errs, nil
	}
	return nil, runtime.DefaultUnstructuredConverter.FromUnstructured(content, obj)
}

// wholeNumbers returns v with every whole float64 turned into an int64, maps and lists changed in place.
func wholeNumbers(v any) any {
	switch t := v.(type) {
	case float64:
		if t == math.Trunc(t) && math.Abs(t) < 1<<63 {
			return int64(t)
		}
	case map[string]any:
		for k, e := range t {
			t[k] = wholeNumbers(e)
		}
	case []any:
		for i, e := range t {
			t[i] = wholeNumbers(e)
		}
	}
	return v
}
