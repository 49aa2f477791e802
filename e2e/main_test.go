//go:build e2e

// Package e2e holds the end-to-end tests. TestMain runs them against the local cluster (package
// localcluster), brought up once for the whole run, or against the cluster named by E2E_KUBECONFIG
// (e.g. kind), which is then neither started nor stopped. Tests named TestKwok* check the simulation
// rules of the local cluster's kwok Stages and need its kwok nodes.
//
// Environment:
//   - E2E_KUBECONFIG: run against this cluster instead of the local one.
//   - E2E_STATE_DIR: state dir of the local cluster (default <repo>/.local, shared with `make run`).
//   - E2E_KEEP_CLUSTER=1: leave a local cluster this run started running afterwards.
//   - STATEFULOPS_KUBE_BIN, STATEFULOPS_KWOK_BIN: binary dirs (see localcluster.Options).
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/statefulops/statefulops/e2e/localcluster"
)

var (
	// kubeconfig is the path of the kubeconfig the tests use.
	kubeconfig string
	// restConfig is the admin client configuration of the cluster under test.
	restConfig *rest.Config
	// client is an admin clientset of the cluster under test.
	client kubernetes.Interface
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var cluster *localcluster.Cluster
	if kubeconfig = os.Getenv("E2E_KUBECONFIG"); kubeconfig == "" {
		start := time.Now()
		upCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		var err error
		cluster, err = localcluster.Up(upCtx, localcluster.Options{StateDir: os.Getenv("E2E_STATE_DIR"), Log: os.Stderr})
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e: local cluster:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "e2e: local cluster up in %s (started=%t), kubeconfig %s\n",
			time.Since(start).Round(time.Millisecond), cluster.Started(), cluster.Kubeconfig())
		kubeconfig = cluster.Kubeconfig()
	}

	var err error
	if restConfig, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err == nil {
		client, err = kubernetes.NewForConfig(restConfig)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}

	code := m.Run()

	// Stop only what this run started: a cluster that was already running belongs to someone else
	// (e.g. `make run`).
	if cluster != nil && cluster.Started() && os.Getenv("E2E_KEEP_CLUSTER") == "" {
		start := time.Now()
		if err := cluster.Down(context.WithoutCancel(ctx)); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: local cluster down:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "e2e: local cluster down in %s\n", time.Since(start).Round(time.Millisecond))
	}
	return code
}
