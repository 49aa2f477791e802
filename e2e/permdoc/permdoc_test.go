package permdoc

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite docs/permissions.md from deploy/*.yaml, the markers' comments and docs/permissions-reasons.yaml")

// TestPermissionsDoc fails when docs/permissions.md no longer lists exactly the rules and policies of
// deploy/*.yaml with their reasons (another branch changed a marker, a config/ role or a policy):
// `cd e2e && go test ./permdoc -update` regenerates it.
func TestPermissionsDoc(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	doc, err := Render(root)
	require.NoError(t, err)
	page := filepath.Join(root, Page)
	if *update {
		require.NoError(t, os.WriteFile(page, []byte(doc.Markdown), 0o644))
	}
	got, err := os.ReadFile(page)
	require.NoError(t, err)
	require.Equal(t, doc.Markdown, string(got), "%s is stale: run `cd e2e && go test ./permdoc -update`", Page)
}

// TestEveryPermissionHasAReason fails on a rule or policy nobody explained: a comment above its
// `+kubebuilder:rbac` marker, or an entry in docs/permissions-reasons.yaml for config/ roles.
func TestEveryPermissionHasAReason(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	doc, err := Render(root)
	require.NoError(t, err)
	require.Empty(t, doc.Missing, "rules without a reason: add a comment above the marker, or a line in %s:\n%s",
		ReasonsFile, strings.Join(doc.Missing, "\n"))
}

// TestMarkerReasons pins how a marker's reason is found: the comment above a run of markers explains
// each of them; a comment after a run explains only the markers below it.
func TestMarkerReasons(t *testing.T) {
	dir := t.TempDir()
	src := `package x

// Reads its own kind.
// +kubebuilder:rbac:groups=a.io,resources=things,verbs=get;list
// +kubebuilder:rbac:groups=a.io,resources=things/status,verbs=update
// Its CRD, to tell an uninstall.
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get

// +kubebuilder:rbac:groups="",namespace=system,resources=secrets,verbs=get
`
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "op"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "op", "x.go"), []byte(src), 0o644))
	mks, err := loadMarkers(dir, []string{"op"})
	require.NoError(t, err)
	require.Len(t, mks, 4)
	require.Equal(t, "Reads its own kind.", mks[0].reason)
	require.Equal(t, "Reads its own kind.", mks[1].reason)
	require.Equal(t, "Its CRD, to tell an uninstall.", mks[2].reason)
	require.Equal(t, "", mks[3].reason)
	require.True(t, mks[3].namespaced)
	require.Equal(t, []string{""}, mks[3].groups)
}
