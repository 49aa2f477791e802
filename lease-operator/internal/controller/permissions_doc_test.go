package controller

import (
	"path/filepath"
	"testing"

	"github.com/statefulops/statefulops/shared/testsupport"
)

// docs/lease.md's Permissions section names every rule and policy deploy/lease-operator.yaml ships.
func TestPermissionsDocCoversTheManifest(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	testsupport.DocumentsManifestPermissions(t, filepath.Join(root, "docs", "lease.md"), filepath.Join(root, "deploy", "lease-operator.yaml"))
}
