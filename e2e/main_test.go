//go:build e2e

// Package e2e holds the end-to-end tests. TestMain runs them against the local cluster (package
// localcluster), brought up once for the whole run, or against the cluster named by E2E_KUBECONFIG
// (e.g. kind), which is then neither started nor stopped. Tests named TestKwok* check the simulation
// rules of the local cluster's kwok Stages and need its kwok nodes; tests named TestRealNode* need the
// local cluster's real node (see needRealNode).
//
// When this run started the real node, TestMain stops it afterwards and compares the host with how it
// was before the node started (realnode.HostState): a difference fails the run and is printed.
//
// Environment:
//   - E2E_KUBECONFIG: run against this cluster instead of the local one (no real node).
//   - E2E_STATE_DIR: state dir of the local cluster (default <repo>/.local, shared with `make run`).
//   - E2E_KEEP_CLUSTER=1: leave a local cluster this run started running afterwards.
//   - E2E_REAL_NODE=0: no real node, and the real-node tests say so and pass; =1: the real node is
//     required; unset: the real node runs when the machine allows it (localcluster.RealNodeAuto) and
//     the real-node tests fail when it does not.
//   - STATEFULOPS_KUBE_BIN, STATEFULOPS_KWOK_BIN, STATEFULOPS_IMAGES: binary and image dirs (see
//     localcluster.Options).
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/statefulops/statefulops/e2e/localcluster"
	"github.com/statefulops/statefulops/e2e/realnode"
)

var (
	// kubeconfig is the path of the kubeconfig the tests use.
	kubeconfig string
	// restConfig is the admin client configuration of the cluster under test.
	restConfig *rest.Config
	// client is an admin clientset of the cluster under test.
	client kubernetes.Interface
	// realNode is whether the cluster under test has the local cluster's real node, and why not.
	realNode struct {
		on bool
		// off is why the real node is off; explicitlyOff is whether E2E_REAL_NODE=0 asked for that.
		off           string
		explicitlyOff bool
		// stateDir is the local cluster's state dir; kubectl the kubectl binary.
		stateDir, kubectl string
		cluster           *localcluster.Cluster
	}
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	mode, err := localcluster.RealNodeFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	realNode.explicitlyOff = mode == localcluster.RealNodeOff
	var cluster *localcluster.Cluster
	if kubeconfig = os.Getenv("E2E_KUBECONFIG"); kubeconfig == "" {
		start := time.Now()
		upCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		cluster, err = localcluster.Up(upCtx, localcluster.Options{StateDir: os.Getenv("E2E_STATE_DIR"), RealNode: mode, Log: os.Stderr})
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e: local cluster:", err)
			// Leave nothing half-started behind (processes holding ports, a real node's host changes).
			downCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			defer cancel()
			if err := localcluster.DownExisting(downCtx, os.Getenv("E2E_STATE_DIR")); err != nil {
				fmt.Fprintln(os.Stderr, "e2e: tearing down the half-started local cluster:", err)
			}
			return 1
		}
		fmt.Fprintf(os.Stderr, "e2e: local cluster up in %s (started=%t), kubeconfig %s\n",
			time.Since(start).Round(time.Millisecond), cluster.Started(), cluster.Kubeconfig())
		kubeconfig = cluster.Kubeconfig()
		realNode.on, realNode.off = cluster.RealNode()
		realNode.stateDir, realNode.kubectl = cluster.StateDir(), filepath.Join(cluster.KubeBin(), "kubectl")
		realNode.cluster = cluster
	} else {
		realNode.off = "E2E_KUBECONFIG names a cluster without the local real node"
	}
	realNodeSummary := "e2e: real-node tests ON (node " + realnode.NodeName + ")"
	if !realNode.on {
		realNodeSummary = "e2e: real-node tests OFF (" + realNode.off + ")"
	}
	fmt.Fprintln(os.Stderr, realNodeSummary)

	if restConfig, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err == nil {
		// client-go's default (5 requests/s, bursts of 10) throttled the chaos drivers and checkers of
		// 8 namespaces at once; the tests' requests are few and small otherwise.
		restConfig.QPS, restConfig.Burst = 50, 100
		client, err = kubernetes.NewForConfig(restConfig)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}

	code := m.Run()

	// Stop only what this run started: a cluster or real node that was already running belongs to
	// someone else (e.g. `make run`).
	if cluster != nil && os.Getenv("E2E_KEEP_CLUSTER") == "" {
		if node := cluster.RealNodeStarted(); node != nil {
			start := time.Now()
			if err := cluster.StopRealNode(context.WithoutCancel(ctx)); err != nil {
				fmt.Fprintln(os.Stderr, "e2e: real node down:", err)
				code = 1
			}
			fmt.Fprintf(os.Stderr, "e2e: real node down in %s (setup was %s)\n", time.Since(start).Round(time.Millisecond), node.Setup.Round(time.Millisecond))
			if !hostAsItWas(node.HostBefore) {
				code = 1
			}
		}
		if cluster.Started() {
			start := time.Now()
			if err := cluster.Down(context.WithoutCancel(ctx)); err != nil {
				fmt.Fprintln(os.Stderr, "e2e: local cluster down:", err)
				return 1
			}
			fmt.Fprintf(os.Stderr, "e2e: local cluster down in %s\n", time.Since(start).Round(time.Millisecond))
		}
	} else if cluster != nil && cluster.RealNodeStarted() != nil {
		fmt.Fprintln(os.Stderr, "e2e: real node left running (E2E_KEEP_CLUSTER): no host check")
	}
	fmt.Fprintln(os.Stderr, realNodeSummary)
	return code
}

// hostAsItWas compares the host with how it was before the real node started, and prints the result.
func hostAsItWas(before realnode.HostSnapshot) bool {
	after := realnode.HostState()
	diff := before.Diff(after)
	if len(diff) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: FAIL: the real node's teardown left the host changed (logs in %s):\n", realnode.LogDir(realNode.stateDir))
		for _, line := range diff {
			fmt.Fprintln(os.Stderr, "e2e:   "+line)
		}
		return false
	}
	fmt.Fprintf(os.Stderr, "e2e: host as it was after the real node's teardown (now %d real-node processes, %d real-node mounts, %d kubepods cgroups, %d iptables lines, %d nft tables; %d links, %d routes, %d sysctls, %d host paths as before)\n",
		len(after.Processes), len(after.Mounts), len(after.Cgroups), len(after.Iptables), len(after.NftTables), len(after.Links), len(after.Routes), len(after.Sysctls), len(after.Paths))
	return true
}
