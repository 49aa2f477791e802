// Package selectorschema bounds the schema of a metav1.LabelSelector inside a generated CRD and adds
// the CEL rules that refuse, at apply, selectors the operators could never use: label keys and values
// that are not valid labels, and (for kinds that build pods from a template) selectors that do not
// select the template's own pods.
//
// controller-gen cannot put markers on the fields of metav1.LabelSelector, so its schema has no
// maxItems, maxProperties or maxLength, and the API server refuses any rule that iterates over it as
// too costly. These functions edit the generated schema instead: a post-processing step of `make
// generate` (like shared/hack/crdslim) calls them on the CRD file. The bounds are far above any real
// selector (64 labels, 64 expressions of 64 values) and the length limits are Kubernetes' own.
package selectorschema

import (
	"fmt"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Bounds of a bounded selector. Key and value lengths are Kubernetes' label limits (a key is an
// optional DNS subdomain prefix of at most 253 characters, '/', and a name of at most 63).
const (
	MaxMatchLabels      = 64
	MaxMatchExpressions = 64
	MaxValues           = 64
	MaxKeyLength        = 253 + 1 + 63
	MaxValueLength      = 63
)

// KeyRegex and ValueRegex are Kubernetes' qualified-name and label-value syntax; the prefix's length
// (at most 253) is checked apart.
const (
	KeyRegex   = `^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`
	ValueRegex = `^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$`
)

// keyOK is the CEL condition that the string k is a valid label key.
func keyOK(k string) string {
	return fmt.Sprintf("%s.matches('%s') && !%s.matches('^[^/]{254,}/')", k, KeyRegex, k)
}

// Rules returns the rules of a bounded selector, to be set on the selector's own schema; path is the
// selector's path as the user sees it (e.g. "spec.selector").
func Rules(path string) []apiextensionsv1.ValidationRule {
	const (
		key   = "an optional DNS subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit"
		value = "empty, or at most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit"
	)
	// rule checks field (matchLabels or matchExpressions) when the selector has it.
	rule := func(field, check, message string) apiextensionsv1.ValidationRule {
		return apiextensionsv1.ValidationRule{
			Rule:      "!has(self." + field + ") || " + check,
			Message:   path + "." + field + message,
			FieldPath: "." + field,
		}
	}
	return []apiextensionsv1.ValidationRule{
		rule("matchLabels", "self.matchLabels.all(k, "+keyOK("k")+")", " keys must be label keys: "+key),
		rule("matchLabels", "self.matchLabels.all(k, self.matchLabels[k].matches('"+ValueRegex+"'))", " values must be label values: "+value),
		rule("matchExpressions", "self.matchExpressions.all(e, "+keyOK("e.key")+")", "[].key must be a label key: "+key),
		rule("matchExpressions", "self.matchExpressions.all(e, !has(e.values) || e.values.all(v, v.matches('"+ValueRegex+"')))", "[].values must be label values: "+value),
	}
}

// MatchRule returns the rule that every matchExpression of the selector at selector (a CEL path from
// the rule's object, e.g. "self.selector") is satisfied by a pod whose labels are those of the given
// label maps (CEL paths, earlier maps winning), keys for which skip (a CEL condition on e.key) holds
// being the operator's own and not checked. path and fieldPath name the selector.
func MatchRule(selector string, labelMaps []string, skip, path, fieldPath string) apiextensionsv1.ValidationRule {
	present := func(m string) string {
		// has() needs a field selection: "self.a.b" → "has(self.a) && has(self.a.b)" for each step.
		parts := strings.Split(m, ".")
		var conds []string
		for i := 2; i <= len(parts); i++ {
			conds = append(conds, "has("+strings.Join(parts[:i], ".")+")")
		}
		return "(" + strings.Join(conds, " && ") + " && e.key in " + m + ")"
	}
	satisfied := func(v string) string {
		return fmt.Sprintf("(e.operator == 'Exists' || (e.operator == 'In' && has(e.values) && %[1]s in e.values) || (e.operator == 'NotIn' && !(has(e.values) && %[1]s in e.values)))", v)
	}
	expr := "e.operator in ['NotIn', 'DoesNotExist']"
	for i := len(labelMaps) - 1; i >= 0; i-- {
		m := labelMaps[i]
		expr = present(m) + " ? " + satisfied(m+"[e.key]") + " : (" + expr + ")"
	}
	return apiextensionsv1.ValidationRule{
		Rule:      fmt.Sprintf("!has(%[1]s) || !has(%[1]s.matchExpressions) || %[1]s.matchExpressions.all(e, %[2]s || (%[3]s))", selector, skip, expr),
		Message:   path + ".matchExpressions must be satisfied by the pod template's labels, or the selector would not select the pods made from it",
		FieldPath: fieldPath + ".matchExpressions",
	}
}

// SubsetRule returns the rule that every matchLabels entry of the selector at selector is in the label
// map labels with the same value (keys for which skip, a CEL condition on k, holds excepted).
func SubsetRule(selector, labels, skip, path, labelsPath, fieldPath string) apiextensionsv1.ValidationRule {
	parts := strings.Split(labels, ".")
	var has []string
	for i := 2; i <= len(parts); i++ {
		has = append(has, "has("+strings.Join(parts[:i], ".")+")")
	}
	return apiextensionsv1.ValidationRule{
		Rule: fmt.Sprintf("!has(%[1]s) || !has(%[1]s.matchLabels) || %[1]s.matchLabels.all(k, %[2]s || (%[3]s && k in %[4]s && %[4]s[k] == %[1]s.matchLabels[k]))",
			selector, skip, strings.Join(has, " && "), labels),
		Message:   path + ".matchLabels must all be in " + labelsPath + " with the same values, or the selector would not select the pods made from it",
		FieldPath: fieldPath + ".matchLabels",
	}
}

// Bound sets the bounds of a metav1.LabelSelector schema and appends Rules(path) to it.
func Bound(sel *apiextensionsv1.JSONSchemaProps, path string) error {
	ml, ok := sel.Properties["matchLabels"]
	if !ok || ml.AdditionalProperties == nil || ml.AdditionalProperties.Schema == nil {
		return fmt.Errorf("%s: not a label selector schema (no matchLabels map)", path)
	}
	ml.MaxProperties = ptr(int64(MaxMatchLabels))
	ml.AdditionalProperties.Schema.MaxLength = ptr(int64(MaxValueLength))
	sel.Properties["matchLabels"] = ml

	me, ok := sel.Properties["matchExpressions"]
	if !ok || me.Items == nil || me.Items.Schema == nil {
		return fmt.Errorf("%s: not a label selector schema (no matchExpressions list)", path)
	}
	me.MaxItems = ptr(int64(MaxMatchExpressions))
	item := me.Items.Schema
	for name, max := range map[string]int64{"key": MaxKeyLength, "operator": 16} {
		p := item.Properties[name]
		p.MaxLength = ptr(max)
		item.Properties[name] = p
	}
	values := item.Properties["values"]
	if values.Items == nil || values.Items.Schema == nil {
		return fmt.Errorf("%s: not a label selector schema (no matchExpressions[].values list)", path)
	}
	values.MaxItems = ptr(int64(MaxValues))
	values.Items.Schema.MaxLength = ptr(int64(MaxValueLength))
	item.Properties["values"] = values
	sel.Properties["matchExpressions"] = me

	sel.XValidations = appendNew(sel.XValidations, Rules(path)...)
	return nil
}

// MaxLabels bounds a plain label map the operator copies onto pods (a pod template's labels), so that
// its rules stay within the API server's CEL cost limit; far above the labels of any real pod.
const MaxLabels = 64

// BoundLabels bounds a plain label map (a map of strings at path, e.g. a pod template's labels) and
// adds the rules that its keys are label keys and its values label values: the apps API refuses a
// StatefulSet whose pod template carries any other, so the CRD refuses it at apply instead of the
// operator reporting InvalidTemplate later.
func BoundLabels(m *apiextensionsv1.JSONSchemaProps, path string) error {
	if m.AdditionalProperties == nil || m.AdditionalProperties.Schema == nil {
		return fmt.Errorf("%s: not a label map schema", path)
	}
	m.MaxProperties = ptr(int64(MaxLabels))
	m.AdditionalProperties.Schema.MaxLength = ptr(int64(MaxValueLength))
	m.XValidations = appendNew(m.XValidations,
		apiextensionsv1.ValidationRule{Rule: "self.all(k, " + keyOK("k") + ")",
			Message: path + " keys must be label keys: an optional DNS subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit"},
		apiextensionsv1.ValidationRule{Rule: "self.all(k, self[k].matches('" + ValueRegex + "'))",
			Message: path + " values must be label values: empty, or at most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit"},
	)
	return nil
}

// Edit calls edit on the schema at a dotted path (e.g. "spec.selector") below root and stores the
// result (the schema's properties are held by value).
func Edit(root *apiextensionsv1.JSONSchemaProps, path string, edit func(*apiextensionsv1.JSONSchemaProps) error) error {
	if path == "" {
		return edit(root)
	}
	name, rest, _ := strings.Cut(path, ".")
	child, ok := root.Properties[name]
	if !ok {
		return fmt.Errorf("no field %q in the schema", name)
	}
	if err := Edit(&child, rest, edit); err != nil {
		return fmt.Errorf("%s.%w", name, err)
	}
	root.Properties[name] = child
	return nil
}

func ptr[T any](v T) *T { return &v }

// Apply bounds the label selectors of a statefulops CRD and adds their rules: for StatefulSingleton
// spec.selector; for StatefulCluster spec.selector, which the pods' labels (the template's plus the
// selector's matchLabels, which the operator adds) must satisfy; for ExtendedStatefulSet
// spec.template.spec.selector, which the pod template's labels must satisfy, as a StatefulSet
// requires, and the pod template's labels themselves (BoundLabels). Labels the operators set themselves are not checked. Other CRDs are left as they are.
// Applying it twice changes nothing more.
func Apply(crd *apiextensionsv1.CustomResourceDefinition) error {
	type edit struct {
		path string
		fn   func(*apiextensionsv1.JSONSchemaProps) error
	}
	bound := func(path string) edit {
		return edit{path, func(s *apiextensionsv1.JSONSchemaProps) error { return Bound(s, path) }}
	}
	rules := func(path string, rules ...apiextensionsv1.ValidationRule) edit {
		return edit{path, func(s *apiextensionsv1.JSONSchemaProps) error {
			s.XValidations = appendNew(s.XValidations, rules...)
			return nil
		}}
	}
	var edits []edit
	switch crd.Spec.Names.Kind {
	case "StatefulSingleton":
		edits = []edit{bound("spec.selector")}
	case "StatefulCluster":
		edits = []edit{bound("spec.selector"), rules("spec", MatchRule("self.selector",
			[]string{"self.selector.matchLabels", "self.template.metadata.labels"},
			"e.key in ['enge.me/statefulcluster', 'enge.me/identity', 'controller-revision-hash']", "spec.selector", ".selector"))}
	case "ExtendedStatefulSet":
		const skipK, skipE = "k.startsWith('fissile.cloudfoundry.org/')", "e.key.startsWith('fissile.cloudfoundry.org/')"
		const podLabels = "spec.template.spec.template.metadata.labels"
		edits = []edit{bound("spec.template.spec.selector"),
			edit{podLabels, func(s *apiextensionsv1.JSONSchemaProps) error { return BoundLabels(s, podLabels) }},
			rules("spec.template",
				SubsetRule("self.spec.selector", "self.spec.template.metadata.labels", skipK,
					"spec.template.spec.selector", "spec.template.spec.template.metadata.labels", ".spec.selector"),
				MatchRule("self.spec.selector", []string{"self.spec.template.metadata.labels"}, skipE, "spec.template.spec.selector", ".spec.selector"))}
	}
	for i := range crd.Spec.Versions {
		v := &crd.Spec.Versions[i]
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			return fmt.Errorf("%s: version %s has no schema", crd.Name, v.Name)
		}
		for _, e := range edits {
			if err := Edit(v.Schema.OpenAPIV3Schema, e.path, e.fn); err != nil {
				return fmt.Errorf("%s %s: %w", crd.Name, v.Name, err)
			}
		}
	}
	return nil
}

// appendNew appends the rules that list does not hold yet.
func appendNew(list []apiextensionsv1.ValidationRule, rules ...apiextensionsv1.ValidationRule) []apiextensionsv1.ValidationRule {
	for _, r := range rules {
		found := false
		for _, have := range list {
			if have.Rule == r.Rule {
				found = true
				break
			}
		}
		if !found {
			list = append(list, r)
		}
	}
	return list
}
