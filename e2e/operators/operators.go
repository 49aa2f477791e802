// Package operators runs the statefulops binaries as local processes beside the local cluster, the way
// `make run` and the e2e tests use them: each operator under the RBAC of its own manifest in deploy/
// (its client impersonates the ServiceAccount the manifest creates), the webhook server on loopback
// with TLS. Processes outlive the caller; their PIDs and logs live in the state dir, so Stop (and
// `make down`) can end them later from another process.
package operators

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
)

// Binary is one statefulops binary and how it runs locally.
type Binary struct {
	// Name is the binary's name, which is also its module's directory.
	Name string
	// ServiceAccount is the namespace/name whose RBAC the process runs under; empty runs it with the
	// cluster's admin credentials (only for a binary that no manifest installs yet).
	ServiceAccount string
	// ProbePort and MetricsPort are the loopback ports of /healthz+/readyz and of /metrics.
	ProbePort, MetricsPort int
	// WebhookPort is the loopback port of the webhook server, for binaries that serve admission webhooks.
	WebhookPort int
	// PprofPort, when set, is the loopback port of Go's profiling endpoints (--pprof-bind-address).
	PprofPort int
}

// All returns every binary of statefulops as `make run` starts it. STATEFULOPS_PORT_OFFSET (an
// integer) shifts every loopback port, so that two test runs on one machine do not collide.
func All() []Binary {
	offset, _ := strconv.Atoi(os.Getenv("STATEFULOPS_PORT_OFFSET"))
	operator := func(name string, i int) Binary {
		// The namespace and ServiceAccount names follow deploy/<name>.yaml (kustomize namePrefix <name>-).
		return Binary{Name: name, ServiceAccount: name + "-system/" + name + "-controller-manager",
			ProbePort: offset + 18081 + 10*i, MetricsPort: offset + 18443 + 10*i}
	}
	return []Binary{
		operator("singleton-operator", 0),
		operator("cluster-operator", 1),
		operator("lease-operator", 2),
		operator("rollout-operator", 3),
		operator("extended-operator", 4),
		{Name: "webhook-server", ProbePort: offset + 18131, MetricsPort: offset + 18493, WebhookPort: offset + 19443},
	}
}

// metricsServices are the metrics Services (namespace, name) of the binaries started without a
// ServiceAccount, so without a namespace of their own: their secure metrics endpoint authorizes a scrape
// on services/metrics of this Service, the one the manifest that installs them ships.
var metricsServices = map[string][2]string{
	"webhook-server": {"singleton-operator-system", "singleton-operator-webhook-server-metrics-service"},
}

// Options say where the binaries are and which cluster they talk to.
type Options struct {
	// BinDir holds the built binaries. Default: $STATEFULOPS_BIN.
	BinDir string
	// StateDir holds PID files, logs, kubeconfigs and certificates (under operators/).
	StateDir string
	// Kubeconfig is the cluster's admin kubeconfig.
	Kubeconfig string
	// Log receives one line per step. Default: discarded.
	Log io.Writer
}

// Dir returns the directory under stateDir where the processes' files live.
func Dir(stateDir string) string { return filepath.Join(stateDir, "operators") }

// LogPath returns the log file of a binary started from stateDir.
func LogPath(stateDir, name string) string { return filepath.Join(Dir(stateDir), name+".log") }

func pidPath(stateDir, name string) string { return filepath.Join(Dir(stateDir), name+".pid") }

// Start starts every binary that is not already running from this state dir and returns once each
// one answers /readyz. A binary that exits or stays unready fails the call, naming its log. It returns
// the names of the binaries it started (not those it found running), so a caller can stop only those.
func Start(ctx context.Context, opts Options, binaries []Binary) ([]string, error) {
	if opts.BinDir == "" {
		opts.BinDir = os.Getenv("STATEFULOPS_BIN")
	}
	if opts.BinDir == "" {
		return nil, errors.New("no binary directory: set STATEFULOPS_BIN (the Makefile sets it) or Options.BinDir")
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if err := os.MkdirAll(Dir(opts.StateDir), 0o755); err != nil {
		return nil, err
	}
	var started []string
	pids := make(map[string]int, len(binaries))
	for _, b := range binaries {
		if pid, ok := running(opts.StateDir, b.Name); ok {
			fmt.Fprintf(opts.Log, "%s is already running (pid %d)\n", b.Name, pid)
			pids[b.Name] = pid
			continue
		}
		pid, err := start(opts, b)
		if err != nil {
			return started, fmt.Errorf("starting %s: %w", b.Name, err)
		}
		pids[b.Name] = pid
		started = append(started, b.Name)
	}
	for _, b := range binaries {
		if err := waitReady(ctx, opts.StateDir, b, pids[b.Name]); err != nil {
			return started, err
		}
		fmt.Fprintf(opts.Log, "%s is ready (log: %s)\n", b.Name, LogPath(opts.StateDir, b.Name))
	}
	return started, nil
}

// start launches one binary in its own process group, detached from the caller, and returns its PID.
func start(opts Options, b Binary) (int, error) {
	kubeconfig := opts.Kubeconfig
	args := []string{
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", b.ProbePort),
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", b.MetricsPort),
		"--zap-log-level=info",
	}
	if b.PprofPort != 0 {
		args = append(args, fmt.Sprintf("--pprof-bind-address=127.0.0.1:%d", b.PprofPort))
	}
	if b.ServiceAccount != "" {
		namespace, _, _ := strings.Cut(b.ServiceAccount, "/")
		var err error
		if kubeconfig, err = impersonatingKubeconfig(opts, b); err != nil {
			return 0, err
		}
		args = append(args, "--leader-elect=true", "--leader-election-namespace="+namespace)
	} else {
		// No manifest grants this binary a namespace of its own yet, and it runs no controller that
		// needs an election: every replica of a webhook server serves.
		args = append(args, "--leader-elect=false")
		if svc, ok := metricsServices[b.Name]; ok {
			args = append(args, "--metrics-service-namespace="+svc[0], "--metrics-service-name="+svc[1])
		}
	}
	if b.WebhookPort != 0 {
		certDir, err := ensureWebhookCerts(opts.StateDir, b.Name)
		if err != nil {
			return 0, err
		}
		args = append(args, "--webhook-host=127.0.0.1", fmt.Sprintf("--webhook-port=%d", b.WebhookPort), "--webhook-cert-path="+certDir)
	}
	args = append(args, "--kubeconfig="+kubeconfig)

	logFile, err := os.OpenFile(LogPath(opts.StateDir, b.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(opts.BinDir, b.Name), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a Ctrl-C of `make run` must not stop it
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	if err := os.WriteFile(pidPath(opts.StateDir, b.Name), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		_ = cmd.Process.Kill()
		return 0, err
	}
	fmt.Fprintf(opts.Log, "started %s (pid %d) as %s\n", b.Name, cmd.Process.Pid, identity(b))
	pid := cmd.Process.Pid
	return pid, cmd.Process.Release()
}

func identity(b Binary) string {
	if b.ServiceAccount == "" {
		return "the cluster admin"
	}
	return "ServiceAccount " + b.ServiceAccount
}

// impersonatingKubeconfig writes a copy of the admin kubeconfig whose user impersonates the binary's
// ServiceAccount, so the process gets exactly the RBAC its manifest grants.
func impersonatingKubeconfig(opts Options, b Binary) (string, error) {
	cfg, err := clientcmd.LoadFromFile(opts.Kubeconfig)
	if err != nil {
		return "", fmt.Errorf("reading the admin kubeconfig: %w", err)
	}
	namespace, name, _ := strings.Cut(b.ServiceAccount, "/")
	for _, auth := range cfg.AuthInfos {
		auth.Impersonate = "system:serviceaccount:" + namespace + ":" + name
		auth.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
	}
	path := filepath.Join(Dir(opts.StateDir), b.Name+".kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

// waitReady polls the binary's /readyz until it answers 200, failing early when the process pid
// exited. It watches the PID it was given, not the PID file: a file re-read can race with a Stop of
// another caller, and a process it no longer names would run on orphaned.
func waitReady(ctx context.Context, stateDir string, b Binary, pid int) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", b.ProbePort)
	client := &http.Client{Timeout: time.Second}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if !alive(pid) {
			return false, fmt.Errorf("%s (pid %d) exited", b.Name, pid)
		}
		resp, err := client.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s did not become ready: %w (log: %s)", b.Name, err, LogPath(stateDir, b.Name))
	}
	return nil
}

// running reports the PID of a binary started from stateDir, if that process is still alive and is
// still that binary (a PID file can outlive its process, and PIDs are reused).
func running(stateDir, name string) (int, bool) {
	raw, err := os.ReadFile(pidPath(stateDir, name))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return 0, false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return 0, false
	}
	argv0, _, _ := strings.Cut(string(cmdline), "\x00")
	if filepath.Base(argv0) != name {
		return 0, false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err == nil && isZombie(string(stat)) {
		return 0, false
	}
	return pid, true
}

// alive reports whether process pid exists and has not exited (a zombie has).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !isZombie(string(stat))
}

// isZombie reads the state field of /proc/<pid>/stat (after the parenthesised command name).
func isZombie(stat string) bool {
	i := strings.LastIndexByte(stat, ')')
	return i >= 0 && len(stat) > i+2 && stat[i+2] == 'Z'
}

// Stop ends the named binaries started from stateDir (every binary when names is empty): SIGTERM
// first, SIGKILL after the grace period, and removes the PID files. Binaries not running are skipped.
func Stop(ctx context.Context, stateDir string, grace time.Duration, names ...string) error {
	if len(names) == 0 {
		for _, b := range All() {
			names = append(names, b.Name)
		}
	}
	var errs []error
	for _, name := range names {
		if pid, ok := running(stateDir, name); ok {
			if err := terminate(ctx, pid, grace); err != nil {
				errs = append(errs, fmt.Errorf("stopping %s: %w", name, err))
				continue
			}
		}
		if err := os.Remove(pidPath(stateDir, name)); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// terminate sends SIGTERM and waits for the process to go, then SIGKILLs it.
func terminate(ctx context.Context, pid int, grace time.Duration) error {
	_ = syscall.Kill(pid, syscall.SIGTERM)
	gone := func(context.Context) (bool, error) {
		return syscall.Kill(pid, 0) != nil || zombie(pid), nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, grace, true, gone); err == nil {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, gone)
}

func zombie(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && isZombie(string(stat))
}
