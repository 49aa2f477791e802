package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

const crdYAML = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: things.example.com
spec:
  group: example.com
  names: {kind: Thing, listKind: ThingList, plural: things, singular: thing}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        description: root doc
        properties:
          spec:
            type: object
            description: spec doc
            properties:
              own:
                type: string
                description: our own field
              template:
                type: object
                description: the template field keeps its doc
                properties:
                  containers:
                    type: array
                    description: nested doc goes
                    items:
                      type: object
                      description: item doc goes
                      properties:
                        name: {type: string, description: deep doc goes}
`

func TestSlimDropsOnlyTheNestedDescriptions(t *testing.T) {
	file := filepath.Join(t.TempDir(), "crd.yaml")
	require.NoError(t, os.WriteFile(file, []byte(crdYAML), 0o644))
	require.NoError(t, slim(file, []string{"spec.template"}))

	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	crd := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, yaml.Unmarshal(raw, crd))
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	spec := root.Properties["spec"]
	template := spec.Properties["template"]
	containers := template.Properties["containers"]

	assert.Equal(t, "root doc", root.Description)
	assert.Equal(t, "our own field", spec.Properties["own"].Description)
	assert.Equal(t, "the template field keeps its doc", template.Description)
	assert.Empty(t, containers.Description)
	assert.Empty(t, containers.Items.Schema.Description)
	assert.Empty(t, containers.Items.Schema.Properties["name"].Description)
	assert.Equal(t, "string", containers.Items.Schema.Properties["name"].Type, "only descriptions change")
}

func TestSlimRefusesAPathThatDoesNotExist(t *testing.T) {
	file := filepath.Join(t.TempDir(), "crd.yaml")
	require.NoError(t, os.WriteFile(file, []byte(crdYAML), 0o644))
	assert.ErrorContains(t, slim(file, []string{"spec.nope"}), `no field "nope"`)
}
