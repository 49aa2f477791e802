// Command kindcluster runs the e2e suites on a kind cluster instead of the local kwok cluster, on a
// machine with Docker (`make e2e-kind`):
//
//	kindcluster up   [-name statefulops-e2e] [-kubeconfig FILE]
//	kindcluster down [-name statefulops-e2e]
//
// up creates the cluster (or reuses one of that name) and writes its kubeconfig; the Makefile then runs
// the e2e tests with E2E_KUBECONFIG pointing at it, skipping the TestKwok* tests, which check the kwok
// simulation itself. down deletes the cluster.
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cmd"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "up" && os.Args[1] != "down") {
		fmt.Fprintln(os.Stderr, "usage: kindcluster up|down [-name NAME] [-kubeconfig FILE]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	name := fs.String("name", "statefulops-e2e", "name of the kind cluster")
	kubeconfig := fs.String("kubeconfig", ".local/kind-kubeconfig", "where up writes the cluster's kubeconfig")
	_ = fs.Parse(os.Args[2:])

	provider := cluster.NewProvider(cluster.ProviderWithLogger(cmd.NewLogger()))
	var err error
	if os.Args[1] == "up" {
		err = up(provider, *name, *kubeconfig)
	} else {
		err = provider.Delete(*name, "")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kindcluster:", err)
		os.Exit(1)
	}
}

func up(provider *cluster.Provider, name, kubeconfig string) error {
	existing, err := provider.List()
	if err != nil {
		return fmt.Errorf("listing kind clusters (is Docker running?): %w", err)
	}
	if !slices.Contains(existing, name) {
		if err := provider.Create(name, cluster.CreateWithWaitForReady(5*time.Minute), cluster.CreateWithDisplayUsage(false)); err != nil {
			return err
		}
	}
	return provider.ExportKubeConfig(name, kubeconfig, false)
}
