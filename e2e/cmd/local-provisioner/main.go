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
//
// With -reap-pods-on-nodes SELECTOR it also does the simulated kubelets' final delete of a deleted pod
// on the nodes the selector matches (package localcluster/podreaper): kwok's own delete step deletes by
// name and can remove a newer pod of the same name, this one deletes with a UID precondition. It lives
// here rather than in a binary of its own because this is already the process kwokctl runs beside
// the cluster for it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"

	"github.com/statefulops/statefulops/e2e/localcluster/podreaper"
)

// DefaultName is the provisioner name the local cluster's StorageClass names.
const DefaultName = "statefulops.dev/local-provisioner"

func main() {
	klog.InitFlags(nil)
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster (default: in-cluster or $KUBECONFIG)")
	baseDir := flag.String("base-dir", "", "directory under which each volume is a subdirectory (required)")
	name := flag.String("name", DefaultName, "provisioner name: the StorageClasses' provisioner field this one serves")
	reapNodes := flag.String("reap-pods-on-nodes", "", "label selector of the nodes whose deleted pods to remove (empty: none)")
	flag.Parse()
	if err := run(*kubeconfig, *baseDir, *name, *reapNodes); err != nil {
		fmt.Fprintln(os.Stderr, "local-provisioner:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, baseDir, name, reapNodes string) error {
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
	// A reaper that stops ends the process: left running, the provisioner would hide that deleted
	// pods are no longer removed.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if reapNodes != "" {
		// A client of its own, not throttled like the provisioner's (client-go's default is 5
		// requests/s): it removes every deleted pod of the cluster, hundreds at once in the benches.
		reapCfg := rest.CopyConfig(cfg)
		reapCfg.QPS, reapCfg.Burst = 500, 1000
		reapClient, err := kubernetes.NewForConfig(reapCfg)
		if err != nil {
			return err
		}
		reaper, err := podreaper.New(reapClient, reapNodes)
		if err != nil {
			return err
		}
		go func() {
			if err := reaper.Run(ctx, 4); err != nil {
				cancel(fmt.Errorf("pod reaper: %w", err))
			}
		}()
	}
	pc.Run(ctx)
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
