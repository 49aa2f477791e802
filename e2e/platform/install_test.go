//go:build e2e

package platform

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/operators"
	"github.com/statefulops/statefulops/shared/seedexamples"
)

// Every manifest of deploy/ installs with a plain client-side `kubectl apply -f`, as users run it: its
// CRD is established, and its operator Deployment's pod is admitted under restricted Pod Security and
// becomes Ready. On the real node that pod really runs our image under its own ServiceAccount; on kwok
// nodes only the manifest's pod spec is proven.
func TestEveryManifestInstallsWithKubectlApply(t *testing.T) {
	start := time.Now()
	manifests := framework.Install(t)
	require.Len(t, manifests, 5, "one manifest per operator")
	onRealNode, err := framework.RealNodeReady(t.Context())
	require.NoError(t, err)
	for _, m := range manifests {
		name := operators.OperatorName(m)
		t.Run(name, func(t *testing.T) {
			ns, err := framework.Clientset.CoreV1().Namespaces().Get(t.Context(), name+"-system", metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, "restricted", ns.Labels["pod-security.kubernetes.io/enforce"])
			_, err = framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", name+"-system",
				"deployment/"+name+"-controller-manager", "--timeout=180s")
			require.NoError(t, err)
			// control-plane=controller-manager: singleton-operator's manifest also runs the webhook server.
			pods, err := framework.Clientset.CoreV1().Pods(name+"-system").List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name + ",control-plane=controller-manager"})
			require.NoError(t, err)
			require.NotEmpty(t, pods.Items)
			pod := pods.Items[0]
			assert.Equal(t, name+"-controller-manager", pod.Spec.ServiceAccountName)
			if onRealNode {
				assert.Equal(t, framework.RealNodeName(t), pod.Spec.NodeName, "the namespace is steered to the real node")
				t.Logf("%s: kubectl apply → pod Ready on the real node in %s", name, time.Since(start).Round(time.Millisecond))
			}
			if name == "singleton-operator" {
				// Its webhook server (2 replicas) rolls out too; on the real node that means each replica
				// got its rotated certificate and the CA is in the webhook configuration (readiness).
				_, err = framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", name+"-system",
					"deployment/singleton-operator-webhook-server", "--timeout=180s")
				require.NoError(t, err)
			}
			// Idempotent: applying again changes nothing and fails nothing.
			_, err = framework.Kubectl().Run(t.Context(), "apply", "-f", m)
			require.NoError(t, err)
		})
	}
}

// Each operator runs under the RBAC its manifest grants and wins its leader election in its own
// namespace: as a real pod on the real node, or, without one, as a local process whose client
// impersonates the manifest's ServiceAccount (the webhook server then serves TLS on loopback).
func TestOperatorsRunUnderTheirManifestsRBAC(t *testing.T) {
	framework.Install(t)
	onRealNode, err := framework.RealNodeReady(t.Context())
	require.NoError(t, err)
	binaries := operators.All()
	if onRealNode {
		binaries = nil // every binary already runs in the cluster, installed from deploy/
	}
	stateDir := filepath.Dir(framework.Kubeconfig)
	started, err := operators.Start(t.Context(), operators.Options{StateDir: stateDir, Kubeconfig: framework.Kubeconfig, Log: framework.TestLog{T: t}}, binaries)
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
			var holder string
			require.Eventually(t, func() bool {
				leases, err := framework.Clientset.CoordinationV1().Leases(namespace).List(t.Context(), metav1.ListOptions{})
				if err != nil {
					return false
				}
				for _, l := range leases.Items {
					if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
						holder = *l.Spec.HolderIdentity
						return !onRealNode || strings.HasPrefix(holder, b.Name+"-controller-manager-")
					}
				}
				return false
			}, 2*time.Minute, 200*time.Millisecond, "%s never won its leader election in %s", b.Name, namespace)
			t.Logf("%s: leader %s", b.Name, holder)
		})
	}
}

// Every example of the seed documents applies unchanged to the installed CRDs (two mechanical fixes are
// documented in package seedexamples), and the workloads among them roll out on the kwok nodes.
func TestSeedExamplesApplyOnTheCluster(t *testing.T) {
	framework.Install(t)
	dir, err := seedexamples.Dir()
	require.NoError(t, err)
	examples, err := seedexamples.Load(dir)
	require.NoError(t, err)
	require.Len(t, examples, 10)

	ns := framework.NewNamespace(t)
	for _, ex := range examples {
		t.Run(ex.Seed[:3]+"/"+ex.Kind+"/"+ex.Name, func(t *testing.T) {
			// Examples that name a namespace of their own (seed 000: production) are applied there.
			target := ns
			if ex.Namespace != "" {
				target = ex.Namespace
				_, _ = framework.Kubectl().Run(t.Context(), "create", "namespace", target)
			}
			file := filepath.Join(t.TempDir(), "example.yaml")
			require.NoError(t, os.WriteFile(file, []byte(ex.YAML), 0o644))
			_, err := framework.Kubectl().Run(t.Context(), "apply", "-n", target, "-f", file)
			require.NoError(t, err)
			switch ex.Kind {
			case "Deployment", "StatefulSet":
				_, err = framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", target,
					strings.ToLower(ex.Kind)+"/"+ex.Name, "--timeout=120s")
				require.NoError(t, err)
			}
		})
	}
	out, err := framework.Kubectl().Run(t.Context(), "get", "statefulops", "-A", "-o", "name")
	require.NoError(t, err)
	for _, kind := range []string{"statefulsingleton", "statefulcluster", "statefulsetlock", "phasedrollout", "extendedstatefulset"} {
		assert.Contains(t, out, kind, "`kubectl get statefulops` lists every kind")
	}
	t.Logf("seed examples applied: %d", len(examples))
}
