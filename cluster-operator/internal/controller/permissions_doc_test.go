package controller

import (
	"path/filepath"
	"testing"

	"github.com/statefulops/statefulops/shared/testsupport"
)

// docs/cluster.md's Permissions section names every rule and policy deploy/cluster-operator.yaml ships.
func TestPermissionsDocCoversTheManifest(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	testsupport.DocumentsManifestPermissions(t, filepath.Join(root, "docs", "cluster.md"), filepath.Join(root, "deploy", "cluster-operator.yaml"))
}
