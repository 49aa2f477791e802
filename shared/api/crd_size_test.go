package api_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// A client-side `kubectl apply -f deploy/<operator>.yaml` stores each object as JSON in the
// last-applied-configuration annotation, and annotations may hold 256 KiB in all. Every CRD must fit,
// with room for the other annotations.
func TestEveryCRDFitsAClientSideApply(t *testing.T) {
	const limit = 256*1024 - 4*1024
	files, err := filepath.Glob(filepath.Join("..", "..", "*-operator", "config", "crd", "bases", "*.yaml"))
	require.NoError(t, err)
	require.Len(t, files, 5, "one CRD per operator")
	for _, file := range files {
		raw, err := os.ReadFile(file)
		require.NoError(t, err)
		var obj map[string]any
		require.NoError(t, yaml.Unmarshal(raw, &obj))
		compact, err := json.Marshal(obj)
		require.NoError(t, err)
		assert.Less(t, len(compact), limit, "%s is %d bytes as JSON", filepath.Base(file), len(compact))
		t.Logf("%s: %d bytes as JSON", filepath.Base(file), len(compact))
	}
}
