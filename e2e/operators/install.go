package operators

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
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

// RealNodeLabel is the label (and NoSchedule taint) of the local cluster's real node: only pods that
// select and tolerate it run there.
const RealNodeLabel = "statefulops.dev/node=real"

// Install applies each manifest with `kubectl apply -f`, exactly as the README tells users to, and
// waits until every CRD is established. On the local cluster with its real node, the cluster itself
// puts the operators' pods there (localcluster.RealNodeNamespaces): the manifests go in unchanged.
func Install(ctx context.Context, k Kubectl, manifests []string) error {
	for _, m := range manifests {
		if _, err := k.Run(ctx, "apply", "-f", m); err != nil {
			return err
		}
	}
	return WaitCRDsEstablished(ctx, k, time.Minute)
}

// WaitCRDsEstablished waits until the named CRDs (every CRD when none is named) are established. Right
// after an apply, `kubectl wait` can read a CRD whose status the API server has not written yet and
// fail at once on the missing conditions ("accessor error"), so that failure is retried until the
// timeout. Name the CRDs when others may be deleted meanwhile: waiting for all would race them.
func WaitCRDsEstablished(ctx context.Context, k Kubectl, timeout time.Duration, crds ...string) error {
	deadline := time.Now().Add(timeout)
	target := []string{"crd", "--all"}
	if len(crds) > 0 {
		target = nil
		for _, c := range crds {
			target = append(target, "crd/"+c)
		}
	}
	for {
		out, err := k.Run(ctx, append([]string{"wait", "--for=condition=Established", "--timeout=" + timeout.String()}, target...)...)
		if err == nil || !strings.Contains(out+err.Error(), "accessor error") || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// OperatorName returns the operator a manifest installs: deploy/<operator>.yaml.
func OperatorName(manifest string) string {
	return strings.TrimSuffix(filepath.Base(manifest), filepath.Ext(manifest))
}
