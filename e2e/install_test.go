//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/statefulops/statefulops/e2e/localcluster"
	"github.com/statefulops/statefulops/e2e/operators"
	"github.com/statefulops/statefulops/shared/seedexamples"
)

// installOnce installs every manifest of deploy/ once per run; the tests below build on it.
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
	return manifests, operators.Install(ctx, kubectl(), manifests)
})

// kubectl runs the kubectl the Makefile built against the cluster under test.
func kubectl() operators.Kubectl {
	return operators.Kubectl{Bin: filepath.Join(os.Getenv("STATEFULOPS_KUBE_BIN"), "kubectl"), Kubeconfig: kubeconfig}
}

func install(t *testing.T) []string {
	t.Helper()
	manifests, err := installOnce()
	require.NoError(t, err, "kubectl apply -f deploy/<operator>.yaml")
	return manifests
}

// Every manifest of deploy/ installs with a plain client-side `kubectl apply -f`, as users run it: its
// CRD is established, and its operator Deployment gets a pod admitted under restricted Pod Security.
func TestEveryManifestInstallsWithKubectlApply(t *testing.T) {
	manifests := install(t)
	require.Len(t, manifests, 5, "one manifest per operator")
	for _, m := range manifests {
		name := strings.TrimSuffix(filepath.Base(m), ".yaml")
		t.Run(name, func(t *testing.T) {
			ns, err := client.CoreV1().Namespaces().Get(t.Context(), name+"-system", metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, "restricted", ns.Labels["pod-security.kubernetes.io/enforce"])
			// Idempotent: applying again changes nothing and fails nothing.
			_, err = kubectl().Run(t.Context(), "apply", "-f", m)
			require.NoError(t, err)
			// The pod passes restricted admission and is scheduled (kwok runs no containers, so this proves
			// the manifest's pod spec, not the image).
			_, err = kubectl().Run(t.Context(), "rollout", "status", "-n", name+"-system",
				"deployment/"+name+"-controller-manager", "--timeout=90s")
			require.NoError(t, err)
		})
	}
}

// Each operator runs under the RBAC its manifest grants (its client impersonates the manifest's
// ServiceAccount): it becomes ready and wins its leader election in its own namespace. The webhook
// server serves TLS on loopback.
func TestOperatorsRunUnderTheirManifestsRBAC(t *testing.T) {
	install(t)
	stateDir := filepath.Dir(kubeconfig)
	started, err := operators.Start(t.Context(), operators.Options{StateDir: stateDir, Kubeconfig: kubeconfig, Log: testLog{t}}, operators.All())
	t.Cleanup(func() {
		assert.NoError(t, operators.Stop(context.Background(), stateDir, 15*time.Second, started...))
	})
	require.NoError(t, err)

	for _, b := range operators.All() {
		if b.ServiceAccount == "" {
			continue
		}
		namespace, _, _ := strings.Cut(b.ServiceAccount, "/")
		t.Run(b.Name, func(t *testing.T) {
			require.Eventually(t, func() bool {
				leases, err := client.CoordinationV1().Leases(namespace).List(t.Context(), metav1.ListOptions{})
				if err != nil {
					return false
				}
				for _, l := range leases.Items {
					if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
						return true
					}
				}
				return false
			}, time.Minute, 200*time.Millisecond, "%s never won its leader election in %s", b.Name, namespace)
		})
	}
}

// Every example of the seed documents applies unchanged to the installed CRDs (two mechanical fixes are
// documented in package seedexamples), and the workloads among them roll out on the kwok nodes.
func TestSeedExamplesApplyOnTheCluster(t *testing.T) {
	install(t)
	dir, err := seedexamples.Dir()
	require.NoError(t, err)
	examples, err := seedexamples.Load(dir)
	require.NoError(t, err)
	require.Len(t, examples, 10)

	ns := newNamespace(t)
	for _, ex := range examples {
		t.Run(ex.Seed[:3]+"/"+ex.Kind+"/"+ex.Name, func(t *testing.T) {
			// Examples that name a namespace of their own (seed 000: production) are applied there.
			target := ns
			if ex.Namespace != "" {
				target = ex.Namespace
				_, _ = kubectl().Run(t.Context(), "create", "namespace", target)
			}
			file := filepath.Join(t.TempDir(), "example.yaml")
			require.NoError(t, os.WriteFile(file, []byte(ex.YAML), 0o644))
			_, err := kubectl().Run(t.Context(), "apply", "-n", target, "-f", file)
			require.NoError(t, err)
			switch ex.Kind {
			case "Deployment", "StatefulSet":
				_, err = kubectl().Run(t.Context(), "rollout", "status", "-n", target,
					strings.ToLower(ex.Kind)+"/"+ex.Name, "--timeout=120s")
				require.NoError(t, err)
			}
		})
	}
	out, err := kubectl().Run(t.Context(), "get", "statefulops", "-A", "-o", "name")
	require.NoError(t, err)
	for _, kind := range []string{"statefulsingleton", "statefulcluster", "statefulsetlock", "phasedrollout", "extendedstatefulset"} {
		assert.Contains(t, out, kind, "`kubectl get statefulops` lists every kind")
	}
	t.Logf("seed examples applied: %d", len(examples))
}

// testLog sends the operators package's progress lines to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
