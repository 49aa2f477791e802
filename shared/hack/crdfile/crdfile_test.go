package crdfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

const crd = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: things.example.com
spec:
  group: example.com
  names: {kind: Thing, plural: things}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, description: a thing}
`

func TestEdit(t *testing.T) {
	file := filepath.Join(t.TempDir(), "crd.yaml")
	if err := os.WriteFile(file, []byte(crd), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Edit(file, func(*apiextensionsv1.CustomResourceDefinition) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(file); string(got) != crd {
		t.Fatalf("an edit that changes nothing must leave the file as it was, got:\n%s", got)
	}
	if err := Edit(file, func(c *apiextensionsv1.CustomResourceDefinition) error {
		c.Spec.Versions[0].Schema.OpenAPIV3Schema.Description = ""
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(file)
	if !strings.HasPrefix(string(got), "---\n") || strings.Contains(string(got), "a thing") {
		t.Fatalf("a changed CRD is written back after a --- line, got:\n%s", got)
	}
	if err := Edit(file, func(*apiextensionsv1.CustomResourceDefinition) error { return errors.New("boom") }); err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("an edit's error names the file, got %v", err)
	}
}
