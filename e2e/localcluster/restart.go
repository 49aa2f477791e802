package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// RestartAPIServer is a fault for the chaos campaigns: it SIGKILLs kube-apiserver and starts it again
// with the same command line, working directory and environment (kwokctl's binary runtime started it
// as a plain process, so that is all a restart is), then waits until the whole cluster is healthy.
//
// An API server that is away longer than a component's leader-election renew deadline makes that
// component exit (kube-controller-manager, kube-scheduler and kwok-controller do, by design), so every
// component's command line is taken before the kill and a component that died meanwhile is started
// again the same way: afterwards the cluster is as Up left it. It returns how long the API server was
// unavailable (kill → /readyz answers 200).
func (c *Cluster) RestartAPIServer(ctx context.Context) (time.Duration, error) {
	k := newKwokctl(c.opts)
	procs := map[string]componentProcess{}
	for _, name := range components {
		p, err := readComponent(k.clusterDir(), name)
		if err != nil {
			return 0, err
		}
		procs[name] = p
	}
	api := procs["kube-apiserver"]
	if err := syscall.Kill(api.pid, syscall.SIGKILL); err != nil {
		return 0, fmt.Errorf("kill kube-apiserver (pid %d): %w", api.pid, err)
	}
	killed := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return !alive(api.pid), nil
	}); err != nil {
		return 0, fmt.Errorf("kube-apiserver (pid %d) survived SIGKILL: %w", api.pid, err)
	}
	if err := api.start(k.clusterDir()); err != nil {
		return 0, err
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		// A killed multi-threaded process shows as a zombie while its other threads still exit and
		// hold its listening socket, so the new one can fail to bind: start it again until it serves.
		if !alive(api.pid) {
			c.logf("kube-apiserver (pid %d) exited after its restart (log %s); starting it again", api.pid, api.log(k.clusterDir()))
			return false, api.start(k.clusterDir())
		}
		return apiServerReady(ctx, c.config) == nil, nil
	}); err != nil {
		return 0, fmt.Errorf("kube-apiserver not ready after its restart (log %s): %w", api.log(k.clusterDir()), err)
	}
	down := time.Since(killed)
	// The other components may exit a little later (when their leader election's renew deadline,
	// 10 s by default, passes without a renewal), so watch them that long before calling the cluster
	// healthy.
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, name := range components {
			p := procs[name]
			if name == "kube-apiserver" || alive(p.pid) {
				continue
			}
			c.logf("%s (pid %d) exited while kube-apiserver restarted; starting it again", name, p.pid)
			if err := p.start(k.clusterDir()); err != nil {
				return false, err
			}
			procs[name] = p
		}
		return time.Since(killed) > 12*time.Second && k.healthy(ctx), nil
	})
	if err != nil {
		return down, fmt.Errorf("cluster not healthy after the kube-apiserver restart: %w", err)
	}
	return down, errors.Join(c.ensureNodes(ctx), c.waitReady(ctx))
}

// componentProcess is how kwokctl started one component: enough to start it again identically.
type componentProcess struct {
	name string
	pid  int
	argv []string
	env  []string
	dir  string
}

// readComponent reads a running component's command line, environment and working directory from /proc.
func readComponent(clusterDir, name string) (componentProcess, error) {
	p := componentProcess{name: name}
	raw, err := os.ReadFile(filepath.Join(clusterDir, "pids", name+".pid"))
	if err != nil {
		return p, err
	}
	if p.pid, err = strconv.Atoi(strings.TrimSpace(string(raw))); err != nil {
		return p, fmt.Errorf("pid file of %s: %w", name, err)
	}
	proc := fmt.Sprintf("/proc/%d", p.pid)
	cmdline, err := os.ReadFile(proc + "/cmdline")
	if err != nil {
		return p, fmt.Errorf("%s (pid %d) is not running: %w", name, p.pid, err)
	}
	environ, err := os.ReadFile(proc + "/environ")
	if err != nil {
		return p, err
	}
	if p.dir, err = os.Readlink(proc + "/cwd"); err != nil {
		return p, err
	}
	p.argv = splitNul(cmdline)
	p.env = splitNul(environ)
	if len(p.argv) == 0 {
		return p, fmt.Errorf("%s (pid %d) has an empty command line", name, p.pid)
	}
	return p, nil
}

func splitNul(b []byte) []string {
	var out []string
	for _, f := range bytes.Split(bytes.TrimSuffix(b, []byte{0}), []byte{0}) {
		out = append(out, string(f))
	}
	return out
}

func (p componentProcess) log(clusterDir string) string {
	return filepath.Join(clusterDir, "logs", p.name+".log")
}

// start starts the component again, detached like kwokctl starts it (own session, output appended to
// its log), and records the new PID in kwokctl's pid file so that Down and healthy find it.
func (p *componentProcess) start(clusterDir string) error {
	logFile, err := os.OpenFile(p.log(clusterDir), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "### %s restarted by localcluster (chaos fault)\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env, cmd.Dir = p.env, p.dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.pid = cmd.Process.Pid
	if err := os.WriteFile(filepath.Join(clusterDir, "pids", p.name+".pid"), []byte(strconv.Itoa(p.pid)), 0o644); err != nil {
		_ = cmd.Process.Kill()
		return err
	}
	// Reap it when it exits (the next restart kills it), so that no zombie is left per restart in
	// the test process; it still outlives the test process (Setsid), as kwokctl's own do.
	go func() { _ = cmd.Wait() }()
	return nil
}
