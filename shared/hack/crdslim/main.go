// Command crdslim keeps generated CRDs small enough for a client-side `kubectl apply`, whose
// last-applied-configuration annotation must stay under 256 KiB. It drops the descriptions below the
// given fields, which embed whole Kubernetes types (a pod template, claim templates): their
// documentation is Kubernetes' own and `kubectl explain pod.spec` shows it. The fields' own
// descriptions, and everything of our own API, keep their documentation. `make generate` runs it right
// after controller-gen, so the result stays generated.
//
// Usage: crdslim -field spec.template -field spec.volumeClaimTemplates <crd.yaml>
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/statefulops/statefulops/shared/hack/crdfile"
)

// fieldList collects repeated -field flags.
type fieldList []string

func (f *fieldList) String() string     { return strings.Join(*f, ",") }
func (f *fieldList) Set(v string) error { *f = append(*f, v); return nil }

func main() {
	var fields fieldList
	flag.Var(&fields, "field", "dotted path of a field whose nested descriptions are dropped (repeatable)")
	flag.Parse()
	if flag.NArg() != 1 || len(fields) == 0 {
		fmt.Fprintln(os.Stderr, "usage: crdslim -field <path> [-field <path>...] <crd.yaml>")
		os.Exit(2)
	}
	if err := slim(flag.Arg(0), fields); err != nil {
		fmt.Fprintf(os.Stderr, "crdslim: %v\n", err)
		os.Exit(1)
	}
}

// slim rewrites the CRD file with the nested descriptions of every field dropped.
func slim(file string, fields []string) error {
	return crdfile.Edit(file, func(crd *apiextensionsv1.CustomResourceDefinition) error {
		for i := range crd.Spec.Versions {
			v := &crd.Spec.Versions[i]
			if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				return fmt.Errorf("version %s has no schema", v.Name)
			}
			for _, field := range fields {
				node, err := lookup(v.Schema.OpenAPIV3Schema, field)
				if err != nil {
					return fmt.Errorf("version %s: %w", v.Name, err)
				}
				dropNestedDescriptions(node)
			}
		}
		return nil
	})
}

// lookup walks a dotted path through object properties (and array items) of schema. Properties are held
// by value, so it returns a copy; that is enough because dropNestedDescriptions changes only what the copy
// shares with the original (property maps, item and additional-property pointers, slices).
func lookup(schema *apiextensionsv1.JSONSchemaProps, path string) (*apiextensionsv1.JSONSchemaProps, error) {
	node := schema
	for _, name := range strings.Split(path, ".") {
		if node.Items != nil && node.Items.Schema != nil {
			node = node.Items.Schema
		}
		child, ok := node.Properties[name]
		if !ok {
			return nil, fmt.Errorf("no field %q on the way to %s", name, path)
		}
		node = &child
	}
	return node, nil
}

// dropNestedDescriptions clears the description of every schema below node, keeping node's own.
func dropNestedDescriptions(node *apiextensionsv1.JSONSchemaProps) {
	for name, child := range node.Properties {
		child.Description = ""
		dropNestedDescriptions(&child)
		node.Properties[name] = child
	}
	if node.Items != nil {
		if node.Items.Schema != nil {
			node.Items.Schema.Description = ""
			dropNestedDescriptions(node.Items.Schema)
		}
		for i := range node.Items.JSONSchemas {
			node.Items.JSONSchemas[i].Description = ""
			dropNestedDescriptions(&node.Items.JSONSchemas[i])
		}
	}
	if node.AdditionalProperties != nil && node.AdditionalProperties.Schema != nil {
		node.AdditionalProperties.Schema.Description = ""
		dropNestedDescriptions(node.AdditionalProperties.Schema)
	}
	for _, list := range [][]apiextensionsv1.JSONSchemaProps{node.AllOf, node.AnyOf, node.OneOf} {
		for i := range list {
			list[i].Description = ""
			dropNestedDescriptions(&list[i])
		}
	}
}
