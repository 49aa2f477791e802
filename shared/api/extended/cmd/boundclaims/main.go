// Command boundclaims bounds the volumeClaimTemplates of the generated ExtendedStatefulSet CRD, which
// embeds apps/v1's StatefulSetSpec and so gets no bounds from controller-gen. The transition rule that
// refuses a smaller storage request (StatefulSetTemplate in shared/api/extended/v1alpha1) compares every
// template with every old one, by name, parsing both quantities: over an unbounded list of unbounded
// strings the API server estimates its cost beyond any budget and refuses the CRD. The bounds are
// ones a StatefulSet could not exceed anyway: a template's name is a pod volume name (a DNS label, at
// most 63 characters), and a quantity is short; a StatefulSet with more than MaxClaimTemplates claim
// templates is refused at apply. Meant to run in `make generate` after controller-gen, crdslim and
// boundselectors.
//
// Usage: go run ./api/extended/cmd/boundclaims <extendedstatefulsets crd.yaml>
package main

import (
	"fmt"
	"os"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/statefulops/statefulops/shared/hack/crdfile"
)

const (
	// MaxClaimTemplates bounds spec.template.spec.volumeClaimTemplates.
	MaxClaimTemplates = 16
	// maxName is a DNS label's length: the template's name is the pods' volume name.
	maxName = 63
	// maxQuantity bounds a quantity written as a string ("1Gi", "1073741824", "1.5e9").
	maxQuantity = 64
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: boundclaims <crd.yaml>")
		os.Exit(2)
	}
	if err := crdfile.Edit(os.Args[1], bound); err != nil {
		fmt.Fprintf(os.Stderr, "boundclaims: %v\n", err)
		os.Exit(1)
	}
}

// bound sets the bounds in every version of the CRD.
func bound(crd *apiextensionsv1.CustomResourceDefinition) error {
	for i := range crd.Spec.Versions {
		v := &crd.Spec.Versions[i]
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			return fmt.Errorf("version %s has no schema", v.Name)
		}
		err := edit(v.Schema.OpenAPIV3Schema, "spec.template.spec.volumeClaimTemplates", boundTemplates)
		if err != nil {
			return fmt.Errorf("version %s: %w", v.Name, err)
		}
	}
	return nil
}

// boundTemplates bounds the list, its items' names and their resource quantities.
func boundTemplates(list *apiextensionsv1.JSONSchemaProps) error {
	if list.Items == nil || list.Items.Schema == nil {
		return fmt.Errorf("volumeClaimTemplates has no item schema")
	}
	list.MaxItems = ptr(int64(MaxClaimTemplates))
	item := list.Items.Schema
	if err := edit(item, "metadata.name", func(name *apiextensionsv1.JSONSchemaProps) error {
		name.MaxLength = ptr(int64(maxName))
		return nil
	}); err != nil {
		return fmt.Errorf("volumeClaimTemplates[]: %w", err)
	}
	for _, m := range []string{"limits", "requests"} {
		if err := edit(item, "spec.resources."+m, func(res *apiextensionsv1.JSONSchemaProps) error {
			if res.AdditionalProperties == nil || res.AdditionalProperties.Schema == nil {
				return fmt.Errorf("spec.resources.%s is not a map", m)
			}
			res.AdditionalProperties.Schema.MaxLength = ptr(int64(maxQuantity))
			return nil
		}); err != nil {
			return fmt.Errorf("volumeClaimTemplates[]: %w", err)
		}
	}
	return nil
}

// edit follows the dotted path of object properties from schema and applies change to the schema at
// its end.
func edit(schema *apiextensionsv1.JSONSchemaProps, path string, change func(*apiextensionsv1.JSONSchemaProps) error) error {
	return editAt(schema, strings.Split(path, "."), path, change)
}

// editAt is edit of the remaining names. Properties are held by value: each step changes a copy and
// writes it back.
func editAt(schema *apiextensionsv1.JSONSchemaProps, names []string, path string, change func(*apiextensionsv1.JSONSchemaProps) error) error {
	if len(names) == 0 {
		return change(schema)
	}
	child, ok := schema.Properties[names[0]]
	if !ok {
		return fmt.Errorf("no field %s (%q is missing)", path, names[0])
	}
	if err := editAt(&child, names[1:], path, change); err != nil {
		return err
	}
	schema.Properties[names[0]] = child
	return nil
}

func ptr[T any](v T) *T { return &v }
