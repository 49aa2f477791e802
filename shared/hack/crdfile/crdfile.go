// Package crdfile rewrites a generated CRD file in place. The tools `make generate` runs after
// controller-gen (crdslim, boundselectors) each change the CRD a little; reading, writing and the file's
// form are done here once.
package crdfile

import (
	"bytes"
	"fmt"
	"os"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// Edit reads the CRD in file, lets edit change it, and writes it back (as controller-gen does, after a
// "---" line) only when edit changed something, so a file the tool has nothing to do with keeps
// controller-gen's form.
func Edit(file string, edit func(*apiextensionsv1.CustomResourceDefinition) error) error {
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
	if err := edit(crd); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		return err
	}
	if bytes.Equal(out, before) {
		return nil
	}
	return os.WriteFile(file, append([]byte("---\n"), out...), 0o644)
}
