package operators

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// Kubectl runs the kubectl binary against one cluster, as a user would.
type Kubectl struct {
	// Bin is the kubectl binary.
	Bin string
	// Kubeconfig is the kubeconfig it uses.
	Kubeconfig string
}

// Run runs kubectl with args and returns its standard output; the error carries its standard error.
func (k Kubectl) Run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, k.Bin, append([]string{"--kubeconfig", k.Kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Manifests returns deploy/<operator>.yaml of every operator, in the repository at root.
func Manifests(root string) ([]string, error) {
	return filepath.Glob(filepath.Join(root, "deploy", "*.yaml"))
}

// Install applies each manifest with `kubectl apply -f`, exactly as the README tells users to, and
// waits until every CRD is established.
func Install(ctx context.Context, k Kubectl, manifests []string) error {
	for _, m := range manifests {
		if _, err := k.Run(ctx, "apply", "-f", m); err != nil {
			return err
		}
	}
	_, err := k.Run(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
	return err
}
