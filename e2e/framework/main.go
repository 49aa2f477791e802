//go:build e2e

package framework

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
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/e2e/localcluster"
	"github.com/statefulops/statefulops/e2e/realnode"
)

var (
	// Kubeconfig is the path of the kubeconfig the tests use.
	Kubeconfig string
	// RESTConfig is the admin client configuration of the cluster under test.
	RESTConfig *rest.Config
	// Clientset is an admin clientset of the cluster under test.
	Clientset kubernetes.Interface
	// RealNode is whether the cluster under test has the local cluster's real node, and why not.
	RealNode struct {
		on bool
		// off is why the real node is off; explicitlyOff is whether E2E_REAL_NODE=0 asked for that.
		off           string
		explicitlyOff bool
		// StateDir is the local cluster's state dir; kubectl the kubectl binary.
		StateDir, kubectl string
		Cluster           *localcluster.Cluster
	}
)

// Main runs one suite's tests against the local cluster (package localcluster), brought up once and
// shared by its tests, or against the cluster named by E2E_KUBECONFIG (e.g. kind), which is then
// neither started nor stopped. Tests named TestKwok* check the simulation rules of the local cluster's
// kwok Stages and need its kwok nodes; tests named TestRealNode* need the local cluster's real node
// (see NeedRealNode).
//
// When this run started the real node, Main stops it afterwards and compares the host with how it
// was before the node started (realnode.HostState): a difference fails the run and is printed.
//
// Environment:
//   - E2E_KUBECONFIG: run against this cluster instead of the local one (no real node).
//   - E2E_STATE_DIR: state dir of the local cluster (default <repo>/.local, shared with `make run`).
//   - E2E_KEEP_CLUSTER=1: leave a local cluster this run started running afterwards.
//   - E2E_SHARED_CLUSTER=1: leave a local cluster this run started running for the next suite, noted
//     in the state dir; `go run ./cmd/e2edown` stops it and checks the host after the last suite
//     (`make test-e2e` does both).
//   - E2E_REAL_NODE=0: no real node, and the real-node tests say so and pass; =1: the real node is
//     required; unset: the real node runs when the machine allows it (localcluster.RealNodeAuto) and
//     the real-node tests fail when it does not.
//   - STATEFULOPS_KUBE_BIN, STATEFULOPS_KWOK_BIN, STATEFULOPS_IMAGES: binary and image dirs (see
//     localcluster.Options).
func Main(m *testing.M) {
	os.Exit(run(m, nil))
}

// MainWith is Main with observe started once the cluster is connected, before the first test; the
// function it returns runs after the last test (a suite-wide summary, e.g. what every test admitted).
func MainWith(m *testing.M, observe func(ctx context.Context) (report func())) {
	os.Exit(run(m, observe))
}

func run(m *testing.M, observe func(ctx context.Context) (report func())) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	mode, err := localcluster.RealNodeFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	RealNode.explicitlyOff = mode == localcluster.RealNodeOff
	var cluster *localcluster.Cluster
	// shared is whether this run started the cluster and leaves it to DownShared (E2E_SHARED_CLUSTER).
	var shared bool
	if Kubeconfig = os.Getenv("E2E_KUBECONFIG"); Kubeconfig == "" {
		stateDir, unlock, err := lockRun()
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		defer unlock()
		if cluster, shared = upLocal(ctx, stateDir, mode); cluster == nil {
			return 1
		}
	} else {
		RealNode.off = "E2E_KUBECONFIG names a cluster without the local real node"
	}
	realNodeSummary := "e2e: real-node tests ON (node " + realnode.NodeName + ")"
	if !RealNode.on {
		realNodeSummary = "e2e: real-node tests OFF (" + RealNode.off + ")"
	}
	fmt.Fprintln(os.Stderr, realNodeSummary)
	if err := connect(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}

	var report func()
	if observe != nil {
		report = observe(ctx)
	}
	code := m.Run()
	if report != nil {
		report()
	}

	// Stop only what this run started: a cluster or real node that was already running belongs to
	// someone else (e.g. `make run`).
	switch {
	case shared:
		fmt.Fprintf(os.Stderr, "e2e: local cluster left running for the next suite (%s)\n", sharedEnv)
	case cluster != nil && os.Getenv("E2E_KEEP_CLUSTER") == "":
		if !tearDown(context.WithoutCancel(ctx), cluster) {
			code = 1
		}
	case cluster != nil && cluster.RealNodeStarted() != nil:
		fmt.Fprintln(os.Stderr, "e2e: real node left running (E2E_KEEP_CLUSTER): no host check")
	}
	fmt.Fprintln(os.Stderr, realNodeSummary)
	return code
}

// upLocal brings the local cluster up (or reuses the running one) and fills RealNode; under
// E2E_SHARED_CLUSTER it notes a cluster it started for DownShared (shared). It returns nil, after
// saying why, when the cluster cannot be used.
func upLocal(ctx context.Context, stateDir string, mode localcluster.RealNodeMode) (cluster *localcluster.Cluster, shared bool) {
	start := time.Now()
	upCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	cluster, err := localcluster.Up(upCtx, localcluster.Options{StateDir: stateDir, RealNode: mode, Log: os.Stderr})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: local cluster:", err)
		// Leave nothing half-started behind (processes holding ports, a real node's host changes).
		downCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if err := localcluster.DownExisting(downCtx, stateDir); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: tearing down the half-started local cluster:", err)
		}
		return nil, false
	}
	fmt.Fprintf(os.Stderr, "e2e: local cluster up in %s (started=%t), kubeconfig %s\n",
		time.Since(start).Round(time.Millisecond), cluster.Started(), cluster.Kubeconfig())
	Kubeconfig = cluster.Kubeconfig()
	RealNode.on, RealNode.off = cluster.RealNode()
	RealNode.StateDir, RealNode.kubectl = cluster.StateDir(), filepath.Join(cluster.KubeBin(), "kubectl")
	RealNode.Cluster = cluster
	// Noted before the tests run, so that a suite that dies still leaves the cluster to DownShared.
	if shared = cluster.Started() && os.Getenv(sharedEnv) != ""; shared {
		if err := leaveShared(stateDir, cluster.RealNodeStarted()); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return nil, false
		}
	}
	return cluster, shared
}

// connect builds the clients of the cluster Kubeconfig names.
func connect() error {
	var err error
	if RESTConfig, err = clientcmd.BuildConfigFromFlags("", Kubeconfig); err != nil {
		return err
	}
	// client-go's default (5 requests/s, bursts of 10) throttled the chaos drivers and checkers of
	// 8 namespaces at once; the tests' requests are few and small otherwise.
	RESTConfig.QPS, RESTConfig.Burst = 50, 100
	if Clientset, err = kubernetes.NewForConfig(RESTConfig); err != nil {
		return err
	}
	Client, err = client.NewWithWatch(RESTConfig, client.Options{Scheme: Scheme})
	return err
}

// tearDown stops what this run started of the local cluster: its real node (with the host check) and
// the cluster itself. It reports whether all went well.
func tearDown(ctx context.Context, cluster *localcluster.Cluster) bool {
	ok := true
	if node := cluster.RealNodeStarted(); node != nil {
		ok = stopRealNode(ctx, cluster.StopRealNode, node, cluster.StateDir())
	}
	if cluster.Started() {
		start := time.Now()
		if err := cluster.Down(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: local cluster down:", err)
			return false
		}
		fmt.Fprintf(os.Stderr, "e2e: local cluster down in %s\n", time.Since(start).Round(time.Millisecond))
	}
	return ok
}
