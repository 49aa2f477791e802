package controller

import (
	"path/filepath"
	"testing"

	"github.com/statefulops/statefulops/shared/testsupport"
)

// docs/singleton.md's Permissions section names every rule and policy deploy/singleton-operator.yaml ships.
func TestPermissionsDocCoversTheManifest(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	testsupport.DocumentsManifestPermissions(t, filepath.Join(root, "docs", "singleton.md"), filepath.Join(root, "deploy", "singleton-operator.yaml"))
}
