// Package replicatest runs replicas of a binary built on the manager bootstrap as processes of their
// own against one API server, so that a test can stop a replica as the kubelet stops a pod (SIGTERM)
// or as a node loss stops it (SIGKILL: no release, no goodbye), and see which replica leads.
//
// A replica is the test binary itself, re-executed into its test TestHandoverReplicaProcess, which a
// package using Start must define as
//
//	func TestHandoverReplicaProcess(t *testing.T) { replicatest.ReplicaProcess(t) }
//
// It runs manager.NewRootCommand with the given leader-election timings (their flags) and one
// controller that reconciles the ConfigMaps of namespace default. It prints one line per event to its
// stdout, which Start timestamps on receipt:
//
//	standby       its manager runs (caches started), waiting for leadership or leading
//	reconciled X  its controller reconciled ConfigMap X, which only the leader does
//
// Used by shared/manager's envtests (the behaviour) and e2e/handover's benchmark (the figures).
package replicatest

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
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/statefulops/statefulops/shared/manager"
)

const (
	kubeconfigEnv = "HANDOVER_REPLICA_KUBECONFIG"
	argsEnv       = "HANDOVER_REPLICA_ARGS"
	idEnv         = "HANDOVER_REPLICA_LEADER_ELECTION_ID"
)

// ReplicaProcess is the body of the replica process; outside one (without its environment) it skips t.
func ReplicaProcess(t *testing.T) {
	kubeconfig := os.Getenv(kubeconfigEnv)
	if kubeconfig == "" {
		t.Skip("the replica process of the handover tests, started by replicatest.Start")
	}
	cmd := manager.NewRootCommand(manager.Options{
		Name:             "handover-replica",
		LeaderElectionID: os.Getenv(idEnv),
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
	}, strings.Fields(os.Getenv(argsEnv))...))
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

// StartEnv starts an API server (envtest) with one ConfigMap in namespace default for the replicas'
// controller (envtest runs no kube-controller-manager, so there is no kube-root-ca.crt), and returns an
// admin client of it and a kubeconfig file for the replicas.
func StartEnv(t *testing.T) (kubernetes.Interface, string) {
	t.Helper()
	env := &envtest.Environment{}
	cfg, err := env.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	user, err := env.AddUser(envtest.User{Name: "replica", Groups: []string{"system:masters"}}, nil)
	require.NoError(t, err)
	kubeconfig, err := user.KubeConfig()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, kubeconfig, 0o600))
	clientset, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	_, err = clientset.CoreV1().ConfigMaps("default").Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "reconcile-me"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return clientset, path
}

// line is one line a replica printed and when the test read it.
type line struct {
	text string
	at   time.Time
}

// Replica is one running replica process.
type Replica struct {
	cmd    *exec.Cmd
	lines  chan line
	exited chan error
}

// Start starts a replica electing its leader under the Lease id (namespace default) with the given
// timings; the test kills it at the end if it still runs, and logs its log if the test failed.
func Start(t *testing.T, kubeconfig, id string, timings manager.LeaderElectionTimings) *Replica {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	logFile, err := os.CreateTemp(t.TempDir(), "replica-*.log")
	require.NoError(t, err)
	cmd := exec.Command(self, "-test.run=^TestHandoverReplicaProcess$")
	args := fmt.Sprintf("--leader-elect-lease-duration=%s --leader-elect-renew-deadline=%s --leader-elect-retry-period=%s",
		timings.LeaseDuration, timings.RenewDeadline, timings.RetryPeriod)
	cmd.Env = append(os.Environ(), kubeconfigEnv+"="+kubeconfig, idEnv+"="+id, argsEnv+"="+args)
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	r := &Replica{cmd: cmd, lines: make(chan line, 1000), exited: make(chan error, 1)}
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
				t.Logf("replica %d log:\n%s", cmd.Process.Pid, tail(string(log), 4000))
			}
		}
	})
	return r
}

// WaitFor returns when the replica printed a line starting with prefix; it fails the test after
// timeout or when the replica exits first.
func (r *Replica) WaitFor(t *testing.T, prefix string, timeout time.Duration) time.Time {
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

// Printed reports whether the replica printed a line starting with prefix since the last WaitFor or
// Printed, without waiting.
func (r *Replica) Printed(prefix string) bool {
	for {
		select {
		case l, ok := <-r.lines:
			if !ok {
				return false
			}
			if strings.HasPrefix(l.text, prefix) {
				return true
			}
		default:
			return false
		}
	}
}

// Stop sends sig to the replica and returns when it was sent.
func (r *Replica) Stop(t *testing.T, sig syscall.Signal) time.Time {
	t.Helper()
	at := time.Now()
	require.NoError(t, r.cmd.Process.Signal(sig))
	return at
}

// WaitExit returns the replica's exit error once it exited (its few unread lines stay buffered).
func (r *Replica) WaitExit(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-r.exited:
		return err
	case <-time.After(timeout):
		t.Fatalf("replica %d did not exit within %s", r.cmd.Process.Pid, timeout)
		return nil
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
