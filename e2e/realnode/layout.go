package realnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// layout names the files of one real node under <state dir>/realnode.
type layout struct {
	root string
}

func newLayout(stateDir string) layout {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		abs = filepath.Clean(stateDir)
	}
	return layout{root: dir(abs)}
}

func (l layout) path(elem ...string) string {
	return filepath.Join(append([]string{l.root}, elem...)...)
}

func (l layout) logs() string                { return l.path("logs") }
func (l layout) logFile(name string) string  { return l.path("logs", name+".log") }
func (l layout) pidFile(name string) string  { return l.path("pids", name+".pid") }
func (l layout) host(name string) string     { return l.path("host", name) }
func (l layout) containerdDir() string       { return l.path("containerd") }
func (l layout) containerdConfig() string    { return l.path("containerd", "config.toml") }
func (l layout) containerdSocket() string    { return l.path("containerd", "containerd.sock") }
func (l layout) runcRoot() string            { return l.path("runc") }
func (l layout) registryHosts() string       { return l.path("containerd", "certs.d") }
func (l layout) cniConfDir() string          { return l.path("cni", "net.d") }
func (l layout) cniIPAMDir() string          { return l.path("cni", "ipam") }
func (l layout) kubeletRoot() string         { return l.path("kubelet") }
func (l layout) podLogs() string             { return l.path("pod-logs") }
func (l layout) pki(name string) string      { return l.path("pki", name) }
func (l layout) kubeletConfig() string       { return l.path("kubelet.yaml") }
func (l layout) kubeletKubeconfig() string   { return l.path("kubelet.kubeconfig") }
func (l layout) kubeProxyConfig() string     { return l.path("kube-proxy.yaml") }
func (l layout) kubeProxyKubeconfig() string { return l.path("kube-proxy.kubeconfig") }
func (l layout) adminKubeconfig() string     { return l.path("admin.kubeconfig") }

// kept are the entries of the realnode dir that outlive Stop: the logs of the last two runs.
var kept = map[string]bool{"logs": true, "logs.previous": true}

// exists reports whether a real node has left anything but its logs in the state dir, or any of its
// processes runs.
func (l layout) exists() bool {
	entries, _ := os.ReadDir(l.root)
	for _, e := range entries {
		if !kept[e.Name()] {
			return true
		}
	}
	return len(processesUnder(l.root)) > 0
}

// reset prepares an empty realnode dir for Start (Cleanup has run): the previous run's logs move to
// logs.previous, and the directories the daemons need are created.
func (l layout) reset() error {
	if err := os.RemoveAll(l.path("logs.previous")); err != nil {
		return err
	}
	if err := os.Rename(l.logs(), l.path("logs.previous")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, d := range []string{l.logs(), l.path("pids"), l.path("host"), l.containerdDir(), l.registryHosts(), l.runcRoot(),
		l.cniConfDir(), l.cniIPAMDir(), l.kubeletRoot(), l.podLogs(), l.path("pki")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// The test app runs as a non-root user and appends its records here.
	records := l.path("records")
	if err := os.MkdirAll(records, 0o755); err != nil {
		return err
	}
	return os.Chmod(records, 0o777|os.ModeSticky)
}

// runningPID returns the PID of the daemon name from its pid file, if that process still runs and is
// still that daemon (PIDs get reused): its executable is named name. (Its command line names the
// realnode dir too, but only once exec has set it up: a process that has just started may show an
// empty one.)
func (l layout) runningPID(name string) (int, bool) {
	raw, err := os.ReadFile(l.pidFile(name))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || !alive(pid) {
		return 0, false
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return pid, err == nil && filepath.Base(strings.TrimSuffix(exe, " (deleted)")) == name
}

// teardownLog appends to logs/teardown.log, creating the logs dir if need be.
func (l layout) teardownLog() *os.File {
	_ = os.MkdirAll(l.logs(), 0o755)
	f, err := os.OpenFile(l.logFile("teardown"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		f, _ = os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	}
	fmt.Fprintf(f, "### %s teardown\n", time.Now().Format(time.RFC3339))
	return f
}
