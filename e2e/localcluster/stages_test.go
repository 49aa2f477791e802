package localcluster

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestStages checks that every embedded stage file is one well-formed kwok Stage named after its file;
// the e2e tests prove what the stages do.
func TestStages(t *testing.T) {
	var names []string
	for _, doc := range strings.Split(string(Stages()), "\n---\n") {
		doc = strings.TrimPrefix(doc, "---\n")
		var stage struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				ResourceRef struct {
					Kind string `json:"kind"`
				} `json:"resourceRef"`
				Selector map[string]any `json:"selector"`
				Steps    []any          `json:"steps"`
			} `json:"spec"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &stage), doc)
		assert.Equal(t, "kwok.x-k8s.io/v1alpha1", stage.APIVersion)
		assert.Equal(t, "Stage", stage.Kind)
		assert.True(t, strings.HasPrefix(doc, "# stages/"+stage.Metadata.Name+".yaml\n"), "stage %s named after its file", stage.Metadata.Name)
		assert.NotEmpty(t, stage.Spec.Selector, stage.Metadata.Name)
		assert.NotEmpty(t, stage.Spec.Steps, stage.Metadata.Name)
		names = append(names, stage.Spec.ResourceRef.Kind+"/"+stage.Metadata.Name)
	}
	assert.ElementsMatch(t, []string{
		"Node/node-initialize", "Node/node-heartbeat",
		"Pod/pod-start", "Pod/pod-ready", "Pod/pod-complete",
	}, names)
	// No Stage removes a deleted pod: a Stage's delete step goes by name alone, so a late or repeated
	// run removes a newer pod of the same name. local-provisioner's pod reaper does it with a UID
	// precondition (package podreaper).
	assert.NotContains(t, string(Stages()), "delete: true")
}
