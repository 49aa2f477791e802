//go:build integration || bench

package manager

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The leadership-handover tests run each replica of a binary built on this bootstrap as a process of its
// own (this test binary, re-executed into TestHandoverReplicaProcess), so that a replica can be stopped
// as the kubelet stops a pod (SIGTERM) or as a node loss stops it (SIGKILL: no release, no goodbye).
// A replica prints one line per event to stdout, which the test timestamps on receipt:
//
//	standby       its manager runs (caches started), waiting for leadership or leading
//	reconciled X  its controller reconciled ConfigMap X, which only the leader does

const (
	replicaKubeconfigEnv = "HANDOVER_REPLICA_KUBECONFIG"
	replicaArgsEnv       = "HANDOVER_REPLICA_ARGS"
	replicaIDEnv         = "HANDOVER_REPLICA_LEADER_ELECTION_ID"
)

// TestHandoverReplicaProcess is not a test: it is the replica process of the handover tests, run only
// with replicaKubeconfigEnv set. Its one controller reconciles the ConfigMaps of namespace default (a new
// leader reconciles the namespace's kube-root-ca.crt as soon as its controller starts).
func TestHandoverReplicaProcess(t *testing.T) {
	kubeconfig := os.Getenv(replicaKubeconfigEnv)
	if kubeconfig == "" {
		t.Skip("the replica process of the handover tests, started by them")
	}
	cmd := NewRootCommand(Options{
		Name:             "handover-replica",
		LeaderElectionID: os.Getenv(replicaIDEnv),
		Cache:            func(o *cache.Options) { o.DefaultNamespaces = map[string]cache.Config{"default": {}} },
		Setup: func(_ context.Context, mgr ctrl.Manager) error {
			if err := mgr.Add(standbyAnnouncer{}); err != nil {
				return err
			}
			return ctrl.NewControllerManagedBy(mgr).For(&corev1.ConfigMap{}).
				Complete(reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
					fmt.Printf("reconciled %s\n", req.Name)
					return reconcile.Result{}, nil
				}))
		},
	})
	cmd.SetArgs(append([]string{
		"--kubeconfig", kubeconfig, "--leader-election-namespace", "default",
		"--health-probe-bind-address=0", "--metrics-bind-address=0",
	}, strings.Fields(os.Getenv(replicaArgsEnv))...))
	if err := cmd.ExecuteContext(ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// standbyAnnouncer prints "standby" once the manager runs: it does not need leadership, so every
// replica starts it.
type standbyAnnouncer struct{}

func (standbyAnnouncer) Start(ctx context.Context) error {
	fmt.Println("standby")
	<-ctx.Done()
	return nil
}

func (standbyAnnouncer) NeedLeaderElection() bool { return false }

// startHandoverEnv starts an API server with one ConfigMap in namespace default for the replicas'
// controller (envtest runs no kube-controller-manager, so there is no kube-root-ca.crt), and returns
// a client of it and its kubeconfig.
func startHandoverEnv(t *testing.T) (kubernetes.Interface, string) {
	t.Helper()
	cfg, kubeconfig := startEnvtest(t)
	clientset, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	_, err = clientset.CoreV1().ConfigMaps("default").Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "reconcile-me"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return clientset, kubeconfig
}

// line is one line a replica printed and when the test read it.
type line struct {
	text string
	at   time.Time
}

// replica is one running replica process.
type replica struct {
	cmd    *exec.Cmd
	lines  chan line
	exited chan error
}

// timingArgs are the flags of t.
func timingArgs(t LeaderElectionTimings) string {
	return fmt.Sprintf("--leader-elect-lease-duration=%s --leader-elect-renew-deadline=%s --leader-elect-retry-period=%s",
		t.LeaseDuration, t.RenewDeadline, t.RetryPeriod)
}

// startReplica starts a replica electing its leader under id with the given timings; the test kills it
// at the end if it still runs.
func startReplica(t *testing.T, kubeconfig, id string, timings LeaderElectionTimings) *replica {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	logFile, err := os.CreateTemp(t.TempDir(), "replica-*.log")
	require.NoError(t, err)
	cmd := exec.Command(self, "-test.run=^TestHandoverReplicaProcess$")
	cmd.Env = append(os.Environ(), replicaKubeconfigEnv+"="+kubeconfig, replicaIDEnv+"="+id, replicaArgsEnv+"="+timingArgs(timings))
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	r := &replica{cmd: cmd, lines: make(chan line, 1000), exited: make(chan error, 1)}
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			r.lines <- line{text: scanner.Text(), at: time.Now()}
		}
		r.exited <- cmd.Wait()
		close(r.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		for range r.lines { // drain until the replica is gone and its reader done
		}
		if t.Failed() {
			if log, err := os.ReadFile(logFile.Name()); err == nil {
				t.Logf("replica %d log (%s):\n%s", cmd.Process.Pid, filepath.Base(logFile.Name()), tail(string(log), 4000))
			}
		}
	})
	return r
}

// waitFor returns when the replica printed a line starting with prefix; it fails the test after timeout
// or when the replica exits first.
func (r *replica) waitFor(t *testing.T, prefix string, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-r.lines:
			if !ok {
				t.Fatalf("replica %d exited before printing %q", r.cmd.Process.Pid, prefix)
			}
			if strings.HasPrefix(l.text, prefix) {
				return l.at
			}
		case <-deadline:
			t.Fatalf("replica %d did not print %q within %s", r.cmd.Process.Pid, prefix, timeout)
		}
	}
}

// stop sends sig to the replica and returns when it was sent.
func (r *replica) stop(t *testing.T, sig syscall.Signal) time.Time {
	t.Helper()
	at := time.Now()
	require.NoError(t, r.cmd.Process.Signal(sig))
	return at
}

// waitExit returns the replica's exit error once it exited.
func (r *replica) waitExit(t *testing.T, timeout time.Duration) error {
	t.Helper()
	for {
		select {
		case _, ok := <-r.lines:
			if !ok {
				return <-r.exited
			}
		case <-time.After(timeout):
			t.Fatalf("replica %d did not exit within %s", r.cmd.Process.Pid, timeout)
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
