// Command boundselectors rewrites generated CRD files with their label selectors bounded and their
// selector rules added (package selectorschema), which controller-gen cannot generate. Meant to run in
// `make generate` right after controller-gen (and crdslim), on every CRD file; a CRD without a
// selector the package knows is left as it is.
//
// Usage: go run ./api/selectorschema/cmd/boundselectors <crd.yaml>...
package main

import (
	"fmt"
	"os"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/statefulops/statefulops/shared/api/selectorschema"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: boundselectors <crd.yaml>...")
		os.Exit(2)
	}
	for _, file := range os.Args[1:] {
		if err := rewrite(file); err != nil {
			fmt.Fprintf(os.Stderr, "boundselectors: %v\n", err)
			os.Exit(1)
		}
	}
}

func rewrite(file string) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(raw, crd); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	before, err := yaml.Marshal(crd)
	if err != nil {
		return err
	}
	if err := selectorschema.Apply(crd); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		return err
	}
	if string(out) == string(before) {
		return nil // nothing to bound: the file stays as controller-gen wrote it
	}
	return os.WriteFile(file, append([]byte("---\n"), out...), 0o644)
}
