//go:build e2e

package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Plugin runs `kubectl statefulops ARGS...` as a user does: kubectl finds the plugin binary
// kubectl-statefulops (built by `make build` into $STATEFULOPS_BIN) on the PATH. The cluster under
// test is passed with --kubeconfig. stdout is piped, so the plugin prints its plain format. It
// returns stdout; on a non-zero exit the error carries stderr.
func Plugin(ctx context.Context, args ...string) (string, error) {
	return PluginWithInput(ctx, "", args...)
}

// PluginWithInput is Plugin with stdin (for commands that ask for a confirmation).
func PluginWithInput(ctx context.Context, stdin string, args ...string) (string, error) {
	bin := os.Getenv("STATEFULOPS_BIN")
	if _, err := os.Stat(filepath.Join(bin, "kubectl-statefulops")); err != nil {
		return "", fmt.Errorf("the plugin is not built (run make build): %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	kubectl := Kubectl()
	cmd := exec.CommandContext(ctx, kubectl.Bin, append([]string{"statefulops", "--kubeconfig", kubectl.Kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "NO_COLOR=1")
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl statefulops %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
