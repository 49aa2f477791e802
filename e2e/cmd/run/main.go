// Command run is `make run` and `make down`:
//
//	run up   [-state-dir DIR]
//	run down [-state-dir DIR]
//
// up starts the local cluster (package localcluster), installs every operator from deploy/ with
// kubectl, and applies the samples of each operator (<operator>/config/samples), prints what is there
// and returns, leaving everything running. When the machine can run the local cluster's real node
// (E2E_REAL_NODE=0 turns it off), the operators run there as real pods from our images and a test-app
// sample runs beside them; otherwise they run as local processes under their manifests'
// ServiceAccounts (package operators). The webhook server runs on loopback either way. up then proves
// the demo (verifyDemo): every demo custom resource Ready=True, no demo pod Pending, no operator
// container restarted, or it fails naming each that is not and why; it prints the time it took.
// down stops the processes and the cluster. Both are idempotent.
package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/statefulops/statefulops/e2e/localcluster"
	"github.com/statefulops/statefulops/e2e/operators"
	"github.com/statefulops/statefulops/e2e/realnode"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "up" && os.Args[1] != "down") {
		fmt.Fprintln(os.Stderr, "usage: run up|down [-state-dir DIR]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	stateDir := fs.String("state-dir", "", "state dir of the local cluster (default <repo>/.local)")
	_ = fs.Parse(os.Args[2:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := localcluster.RepoRoot()
	if err == nil && *stateDir == "" {
		*stateDir = filepath.Join(root, ".local")
	}
	if err == nil {
		if os.Args[1] == "up" {
			err = up(ctx, root, *stateDir)
		} else {
			err = down(ctx, *stateDir)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		os.Exit(1)
	}
}

//go:embed realnode-sample.yaml
var realNodeSample []byte

func up(ctx context.Context, root, stateDir string) error {
	start := time.Now()
	mode, err := localcluster.RealNodeFromEnv()
	if err != nil {
		return err
	}
	cluster, err := localcluster.Up(ctx, localcluster.Options{StateDir: stateDir, Log: os.Stdout, RealNode: mode})
	if err != nil {
		return err
	}
	onRealNode, whyNot := cluster.RealNode()
	k := operators.Kubectl{Bin: filepath.Join(cluster.KubeBin(), "kubectl"), Kubeconfig: cluster.Kubeconfig()}

	manifests, err := operators.Manifests(root)
	if err != nil {
		return err
	}
	var operatorNamespaces []string
	for _, m := range manifests {
		operatorNamespaces = append(operatorNamespaces, operators.OperatorName(m)+"-system")
	}
	// A rerun reinstalls over running operators: only restarts from now on count.
	restartsBefore, err := restarts(ctx, k, operatorNamespaces)
	if err != nil {
		return err
	}
	if err := installOperators(ctx, k, manifests, cluster, stateDir, onRealNode, whyNot); err != nil {
		return err
	}
	if err := applySamples(ctx, k, root, stateDir, onRealNode); err != nil {
		return err
	}

	out, err := k.Run(ctx, "get", "statefulops", "-A")
	if err != nil {
		return err
	}
	fmt.Println(out)
	var demoNamespaces []string
	if onRealNode {
		demoNamespaces = append(demoNamespaces, "statefulops-demo")
	}
	fmt.Printf("run: cluster, operators and samples up in %s; waiting for the demo to settle (at most %s)\n",
		time.Since(start).Round(time.Second), demoBudget)
	if err := verifyDemo(ctx, k, operatorNamespaces, demoNamespaces, restartsBefore); err != nil {
		return fmt.Errorf("%w\nThe cluster is left running for a look (export KUBECONFIG=%s); `make down` stops it. Total time %s",
			err, cluster.Kubeconfig(), time.Since(start).Round(time.Second))
	}
	fmt.Printf("The local cluster is up (%s).\n\n", time.Since(start).Round(time.Second))
	printHowTo(cluster.Kubeconfig(), stateDir, onRealNode)
	return nil
}

// installOperators applies every operator's manifest and runs the operators: as real pods on the real
// node, from our images, exactly as installed; without one, as local processes under their manifests'
// ServiceAccounts (the kwok nodes run no containers, so the in-cluster Deployments would only show
// pretend pods).
func installOperators(ctx context.Context, k operators.Kubectl, manifests []string, cluster *localcluster.Cluster, stateDir string, onRealNode bool, whyNot string) error {
	fmt.Printf("run: installing %d operators from deploy/\n", len(manifests))
	if err := operators.Install(ctx, k, manifests); err != nil {
		return err
	}
	local := operators.All()
	if onRealNode {
		for _, m := range manifests {
			name := operators.OperatorName(m)
			// Pods created while the cluster had no real-node steering (an e2e run with E2E_REAL_NODE=0
			// on this cluster removes it) sit on kwok nodes, where nothing runs, and an unchanged
			// manifest does not replace them: delete them, and their Deployment creates steered ones.
			if _, err := k.Run(ctx, "delete", "pods", "-n", name+"-system", "--field-selector=spec.nodeName!="+realnode.NodeName, "--wait=false"); err != nil {
				return err
			}
			if _, err := k.Run(ctx, "rollout", "status", "-n", name+"-system", "deployment/"+name+"-controller-manager", "--timeout=180s"); err != nil {
				return err
			}
		}
		local = nil // the webhook server too: deploy/singleton-operator.yaml runs it there
	} else {
		fmt.Printf("run: no real node (%s): the operators run as local processes under their manifests' ServiceAccounts\n", whyNot)
		for _, m := range manifests {
			name := operators.OperatorName(m)
			if _, err := k.Run(ctx, "scale", "deployment", "--replicas=0", "-n", name+"-system", name+"-controller-manager"); err != nil {
				return err
			}
		}
	}
	_, err := operators.Start(ctx, operators.Options{StateDir: stateDir, Kubeconfig: cluster.Kubeconfig(), Log: os.Stdout}, local)
	return err
}

// applySamples applies every operator's samples and, with a real node, the test app that runs there.
func applySamples(ctx context.Context, k operators.Kubectl, root, stateDir string, onRealNode bool) error {
	samples, err := filepath.Glob(filepath.Join(root, "*-operator", "config", "samples", "*.yaml"))
	if err != nil {
		return err
	}
	for _, s := range samples {
		if err := applySingletonsFirst(ctx, k, s, stateDir); err != nil {
			return err
		}
		if _, err := k.Run(ctx, "apply", "-f", s); err != nil {
			return err
		}
	}
	if onRealNode {
		sample := filepath.Join(stateDir, "realnode-sample.yaml")
		if err := os.WriteFile(sample, realNodeSample, 0o644); err != nil {
			return err
		}
		if _, err := k.Run(ctx, "apply", "-f", sample); err != nil {
			return err
		}
		if _, err := k.Run(ctx, "rollout", "status", "-n", "statefulops-demo", "deployment/testapp", "--timeout=120s"); err != nil {
			return err
		}
		samples = append(samples, sample)
	}
	fmt.Printf("run: applied %d samples\n\n", len(samples))
	return nil
}

// applySingletonsFirst applies the StatefulSingletons of the sample file, if it has any, and waits
// until the operator has enabled the namespace for the pod webhook: applied in the same go as their
// workload, the workload's first pod can be admitted before that, start without a hold and be adopted
// (docs/singleton.md, "Adopting a workload that already runs"). The demo's first pod is held instead.
func applySingletonsFirst(ctx context.Context, k operators.Kubectl, sample, stateDir string) error {
	raw, err := os.ReadFile(sample)
	if err != nil {
		return err
	}
	var singletons [][]byte
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("%s: %w", sample, err)
		}
		var typ metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &typ); err != nil {
			return fmt.Errorf("%s: %w", sample, err)
		}
		if typ.GroupVersionKind() == singletonv1.GroupVersion.WithKind("StatefulSingleton") {
			singletons = append(singletons, doc)
		}
	}
	if len(singletons) == 0 {
		return nil
	}
	first := filepath.Join(stateDir, "singletons-of-"+filepath.Base(sample))
	if err := os.WriteFile(first, bytes.Join(singletons, []byte("\n---\n")), 0o644); err != nil {
		return err
	}
	if _, err := k.Run(ctx, "apply", "-f", first); err != nil {
		return err
	}
	// The samples have no namespace: they go to the kubeconfig's, "default".
	label := strings.ReplaceAll(singletonv1.LabelNamespaceEnabled, ".", `\.`)
	_, err = k.Run(ctx, "wait", "namespace/default", "--timeout=60s", "--for=jsonpath={.metadata.labels."+label+"}=true")
	return err
}

// printHowTo tells the user how to reach the cluster and where each operator's logs are.
func printHowTo(kubeconfig, stateDir string, onRealNode bool) {
	fmt.Printf("  export KUBECONFIG=%s\n", kubeconfig)
	// The plugin is the next thing to try: `make build` put it beside the operators' binaries.
	if bin := os.Getenv("STATEFULOPS_BIN"); bin != "" {
		fmt.Printf("  export PATH=%s:$PATH\n  kubectl statefulops status -A    # health and workload of every object (docs/kubectl-plugin.md)\n", bin)
	} else {
		fmt.Println("  kubectl statefulops status -A    # after `make build`, with its build directory on PATH (docs/kubectl-plugin.md)")
	}
	fmt.Print("  kubectl get statefulops -A\n\n")
	fmt.Println("Operator logs:")
	for _, b := range operators.All() {
		switch {
		case onRealNode && b.ServiceAccount != "":
			fmt.Printf("  %-19s kubectl logs -n %s-system deploy/%s-controller-manager\n", b.Name, b.Name, b.Name)
		case onRealNode:
			fmt.Printf("  %-19s kubectl logs -n singleton-operator-system deploy/singleton-operator-webhook-server\n", b.Name)
		default:
			fmt.Printf("  %-19s %s\n", b.Name, operators.LogPath(stateDir, b.Name))
		}
	}
	if onRealNode {
		fmt.Println("\nOn the real node: kubectl logs -n statefulops-demo deploy/testapp")
	}
	fmt.Println("\nStop everything with: make down")
}

func down(ctx context.Context, stateDir string) error {
	if err := operators.Stop(ctx, stateDir, 15*time.Second); err != nil {
		return err
	}
	fmt.Println("run: operators stopped")
	return localcluster.DownExisting(ctx, stateDir)
}
