// Package framework is what every e2e suite (e2e/singleton, e2e/cluster, e2e/lease, e2e/rollout,
// e2e/extended, e2e/platform) shares: the cluster under test and its clients (Main), the helpers of
// pods, workloads and local operator processes, the chaos campaigns and the bench records.
//
// The suites are separate test binaries. Each one's TestMain calls Main, which brings the local
// cluster up or reuses the running one, and holds the state dir's run lock (<state dir>/e2e-run.lock)
// until it ends, so that the suites of one `go test ./...` take turns on the cluster rather than
// sharing it (or starting it twice) at the same time. With E2E_SHARED_CLUSTER=1 (`make test-e2e`)
// the first suite's cluster stays up for the next ones and DownShared (command e2e/cmd/e2edown)
// stops it and checks the host once at the end; without it a suite stops what it started, as one
// suite run alone should.
//
// This file has no build tag: e2e/cmd/e2edown builds it without the e2e tag.
package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/statefulops/statefulops/e2e/localcluster"
	"github.com/statefulops/statefulops/e2e/realnode"
)

// sharedEnv asks the suites to leave a local cluster they start running for the next suite.
const sharedEnv = "E2E_SHARED_CLUSTER"

// sharedNote is what a suite that started the local cluster under E2E_SHARED_CLUSTER leaves in the
// state dir (sharedNoteFile) for DownShared: that the cluster is the e2e run's to stop, and the host as
// it was before its real node started.
type sharedNote struct {
	// RealNode is the real node the suite started, nil when it started none.
	RealNode *realnode.Node `json:"realNode,omitempty"`
}

const sharedNoteFile = "e2e-shared.json"

// StateDir returns the local cluster's state dir: $E2E_STATE_DIR, else localcluster's default
// (<repo>/.local).
func StateDir() (string, error) {
	dir := os.Getenv("E2E_STATE_DIR")
	if dir == "" {
		root, err := localcluster.RepoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, ".local")
	}
	return filepath.Abs(dir)
}

// lockRun takes the run lock of the local cluster's state dir (StateDir), waiting while another
// suite holds it. The lock goes with the process: a killed suite does not leave it held.
func lockRun() (stateDir string, unlock func(), err error) {
	if stateDir, err = StateDir(); err != nil {
		return "", nil, err
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return "", nil, err
	}
	f, err := os.OpenFile(filepath.Join(stateDir, "e2e-run.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); errors.Is(err, syscall.EWOULDBLOCK) {
		fmt.Fprintf(os.Stderr, "e2e: waiting for the e2e suite running on %s\n", stateDir)
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
	}
	if err != nil {
		f.Close()
		return "", nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return stateDir, func() { f.Close() }, nil
}

// leaveShared records that this run started the cluster (and maybe its real node), which it leaves
// running for the next suite and DownShared.
func leaveShared(stateDir string, node *realnode.Node) error {
	raw, err := json.Marshal(sharedNote{RealNode: node})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(stateDir, sharedNoteFile), raw, 0o644)
}

// DownShared ends a run of suites under E2E_SHARED_CLUSTER: when one of them started the local
// cluster it stops its real node, compares the host with how it was before (hostAsItWas) and deletes
// the cluster, as a single suite does when it ends. A cluster no suite started (e.g. `make run`'s) is
// left alone. It returns the process exit code.
func DownShared(ctx context.Context) int {
	stateDir, unlock, err := lockRun()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer unlock()
	notePath := filepath.Join(stateDir, sharedNoteFile)
	raw, err := os.ReadFile(notePath)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(os.Stderr, "e2e: no local cluster started by the suites in %s: nothing to stop\n", stateDir)
		return 0
	}
	var note sharedNote
	if err == nil {
		err = json.Unmarshal(raw, &note)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	code := 0
	if node := note.RealNode; node != nil {
		stop := func(ctx context.Context) error { return realnode.Stop(ctx, stateDir) }
		if !stopRealNode(ctx, stop, node, stateDir) {
			code = 1
		}
	}
	start := time.Now()
	if err := localcluster.DownExisting(ctx, stateDir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: local cluster down:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: local cluster down in %s\n", time.Since(start).Round(time.Millisecond))
	if err := os.Remove(notePath); err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	return code
}

// stopRealNode stops the real node a run started (with stop) and compares the host with how it was
// before the node started. It reports whether both went well.
func stopRealNode(ctx context.Context, stop func(context.Context) error, node *realnode.Node, stateDir string) bool {
	ok := true
	start := time.Now()
	if err := stop(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: real node down:", err)
		ok = false
	}
	fmt.Fprintf(os.Stderr, "e2e: real node down in %s (setup was %s)\n", time.Since(start).Round(time.Millisecond), node.Setup.Round(time.Millisecond))
	return hostAsItWas(node.HostBefore, stateDir) && ok
}

// hostAsItWas compares the host with how it was before the real node started, and prints the result.
func hostAsItWas(before realnode.HostSnapshot, stateDir string) bool {
	after := realnode.HostState()
	diff := before.Diff(after)
	if len(diff) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: FAIL: the real node's teardown left the host changed (logs in %s):\n", realnode.LogDir(stateDir))
		for _, line := range diff {
			fmt.Fprintln(os.Stderr, "e2e:   "+line)
		}
		return false
	}
	fmt.Fprintf(os.Stderr, "e2e: host as it was after the real node's teardown (now %d real-node processes, %d real-node mounts, %d kubepods cgroups, %d iptables lines, %d nft tables; %d links, %d routes, %d sysctls, %d host paths as before)\n",
		len(after.Processes), len(after.Mounts), len(after.Cgroups), len(after.Iptables), len(after.NftTables), len(after.Links), len(after.Routes), len(after.Sysctls), len(after.Paths))
	return true
}
