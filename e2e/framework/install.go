//go:build e2e

package framework

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/statefulops/statefulops/e2e/localcluster"
	"github.com/statefulops/statefulops/e2e/operators"
)

// installOnce installs every manifest of deploy/ once per run; the tests below build on it. When the
// cluster has a real node, the cluster steers the operators' namespaces onto it
// (localcluster.RealNodeNamespaces), so the operators run there as real pods from our images.
var installOnce = sync.OnceValues(func() ([]string, error) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	manifests, err := operators.Manifests(root)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return manifests, operators.Install(ctx, Kubectl(), manifests)
})

// RealNodeReady reports whether the cluster under test has a Ready real node (label statefulops.dev/node=real).
func RealNodeReady(ctx context.Context) (bool, error) {
	nodes, err := Clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: operators.RealNodeLabel})
	if err != nil {
		return false, err
	}
	for i := range nodes.Items {
		if localcluster.NodeReady(&nodes.Items[i]) {
			return true, nil
		}
	}
	return false, nil
}

// Kubectl runs the kubectl the Makefile built against the cluster under test.
func Kubectl() operators.Kubectl {
	return operators.Kubectl{Bin: filepath.Join(os.Getenv("STATEFULOPS_KUBE_BIN"), "kubectl"), Kubeconfig: Kubeconfig}
}

func Install(t *testing.T) []string {
	t.Helper()
	manifests, err := installOnce()
	require.NoError(t, err, "kubectl apply -f deploy/<operator>.yaml")
	return manifests
}

// RealNodeName returns the name of the cluster's real node.
func RealNodeName(t *testing.T) string {
	t.Helper()
	nodes, err := Clientset.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{LabelSelector: operators.RealNodeLabel})
	require.NoError(t, err)
	require.Len(t, nodes.Items, 1)
	return nodes.Items[0].Name
}

// TestLog sends the operators package's progress lines to the test log.
type TestLog struct{ T *testing.T }

func (l TestLog) Write(p []byte) (int, error) {
	l.T.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
