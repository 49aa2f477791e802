// Command local-provisioner is the local cluster's dynamic volume provisioner: it serves the default
// StorageClass (package localcluster creates it) by making each claim a directory on this host, bound
// as a `local` PersistentVolume to the node the scheduler chose for the claim's first pod, and removes
// the directory when the volume is released (reclaimPolicy Delete). kwokctl starts and stops it with
// the cluster's other components (a custom component of its binary runtime); its log is
// <cluster dir>/logs/local-provisioner.log.
//
//	local-provisioner -kubeconfig FILE -base-dir DIR [-name statefulops.dev/local-provisioner]
//
// It runs on sigs.k8s.io/sig-storage-lib-external-provisioner, which does the claim and volume
// bookkeeping (watching claims of its class, creating and binding the PV, Events on the claim,
// deleting released volumes) exactly as a production external provisioner does.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

// DefaultName is the provisioner name the local cluster's StorageClass names.
const DefaultName = "statefulops.dev/local-provisioner"

func main() {
	klog.InitFlags(nil)
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster (default: in-cluster or $KUBECONFIG)")
	baseDir := flag.String("base-dir", "", "directory under which each volume is a subdirectory (required)")
	name := flag.String("name", DefaultName, "provisioner name: the StorageClasses' provisioner field this one serves")
	flag.Parse()
	if err := run(*kubeconfig, *baseDir, *name); err != nil {
		fmt.Fprintln(os.Stderr, "local-provisioner:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, baseDir, name string) error {
	if baseDir == "" {
		return fmt.Errorf("-base-dir is required")
	}
	if err := os.MkdirAll(baseDir, 0o755); err != nil {
		return err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	klog.Background().Info("starting", "name", name, "baseDir", baseDir)
	pc := controller.NewProvisionController(ctx, client, name, &localProvisioner{client: client, baseDir: baseDir},
		// One process per cluster, started and stopped with it: nothing to elect.
		controller.LeaderElection(false),
	)
	pc.Run(ctx)
	return nil
}
