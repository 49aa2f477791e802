package api_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// outsideReference matches what a user reading `kubectl explain` cannot follow: the numbering of the
// specification documents and documents that are not shipped with the repository.
var outsideReference = regexp.MustCompile(`(?i)\bseeds?\b|DESIGN(\.md)?\b|features\.md|real-node\.md|reliability-performance\.md|style\.md|\.\./`)

// descriptions walks a decoded CRD and returns every "description" value with its path.
func descriptions(path string, node any, out map[string]string) {
	switch v := node.(type) {
	case map[string]any:
		for k, child := range v {
			if s, ok := child.(string); ok && k == "description" {
				out[path] = s
				continue
			}
			descriptions(path+"."+k, child, out)
		}
	case []any:
		for i, child := range v {
			descriptions(fmt.Sprintf("%s[%d]", path, i), child, out)
		}
	}
}

// CRD descriptions are what `kubectl explain` shows: they must speak to users, never point at the
// numbered specification documents or at documents outside the repository.
func TestCRDDescriptionsNameNoSeedOrOutsideDocument(t *testing.T) {
	require.True(t, outsideReference.MatchString("as in seed 3"), "the matcher finds a seed reference")
	require.True(t, outsideReference.MatchString("see ../DESIGN.md"), "the matcher finds an outside document")
	require.False(t, outsideReference.MatchString("seeded from the pod template"), "no false positive on seeded")

	files, err := filepath.Glob(filepath.Join("..", "..", "*-operator", "config", "crd", "bases", "*.yaml"))
	require.NoError(t, err)
	require.Len(t, files, 5, "one CRD per operator")
	total := 0
	for _, file := range files {
		raw, err := os.ReadFile(file)
		require.NoError(t, err)
		var obj map[string]any
		require.NoError(t, yaml.Unmarshal(raw, &obj))
		found := map[string]string{}
		descriptions("", obj, found)
		require.NotEmpty(t, found, "%s has descriptions", filepath.Base(file))
		total += len(found)
		for path, text := range found {
			if m := outsideReference.FindString(text); m != "" {
				assert.Failf(t, "CRD description speaks of something users cannot see",
					"%s %s mentions %q: %s", filepath.Base(file), path, m, text)
			}
		}
	}
	t.Logf("%d descriptions checked", total)
}
