package realnode

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// daemons are the node's long-running processes, in order of start.
var daemons = []string{"containerd", "kubelet", "kube-proxy"}

// proc is one process as /proc shows it.
type proc struct {
	pid  int
	comm string
	argv []string
}

// mentions reports whether the process's command line names path or a file under it.
func (p proc) mentions(path string) bool {
	for _, a := range p.argv {
		if i := strings.Index(a, path); i >= 0 {
			rest := a[i+len(path):]
			if rest == "" || rest[0] == '/' || rest[0] == '"' {
				return true
			}
		}
	}
	return false
}

func (p proc) String() string {
	return fmt.Sprintf("%d %s: %s", p.pid, p.comm, strings.Join(p.argv, " "))
}

func readProc(pid int) (proc, bool) {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !alive(pid) {
		return proc{}, false
	}
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	argv := strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
	return proc{pid: pid, comm: strings.TrimSpace(string(comm)), argv: argv}, true
}

// processes returns every live process but this one.
func processes() []proc {
	entries, _ := os.ReadDir("/proc")
	var procs []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if p, ok := readProc(pid); ok {
			procs = append(procs, p)
		}
	}
	return procs
}

// processesUnder returns the live processes of the node's programs whose command line names the
// realnode dir: the daemons, the containerd shims (-address <dir>/containerd/containerd.sock), runc
// (--root <dir>/runc) and ctr. (Someone's `tail -f` of a log there is not the node's.)
func processesUnder(root string) []proc {
	var ours []proc
	for _, p := range processes() {
		if nodeProgram(p.comm) && p.mentions(root) {
			ours = append(ours, p)
		}
	}
	return ours
}

// nodeProgram reports whether comm is one of the programs of a real node.
func nodeProgram(comm string) bool {
	return nodeCommands[comm] || comm == "runc" || comm == "ctr" || strings.HasPrefix(comm, "containerd")
}

// nodeCommands are the processes of which only one may run per host.
var nodeCommands = map[string]bool{"kubelet": true, "kube-proxy": true}

// foreignNodeProcesses describes the kubelets and kube-proxies on this host that are not the real node
// of root: another real node, or a kubelet of the host's own. They share the ports, the kubepods
// cgroups and the iptables chains with this node.
func foreignNodeProcesses(root string) []string {
	var others []string
	for _, p := range processes() {
		// An empty command line is a process in the middle of exec, ours or not: not evidence.
		if nodeCommands[p.comm] && !p.mentions(root) && strings.Join(p.argv, "") != "" {
			others = append(others, p.String())
		}
	}
	return others
}

// alive reports whether pid is a running process; a zombie is dead.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may contain spaces.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] != 'Z' && stat[i+2] != 'X'
}

// hostPATH is the PATH of the daemons: they run iptables, mount, runc and the shims, some from sbin.
const hostPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// startDaemon starts one of the node's daemons in its own session, so it outlives the caller (make
// run), with its output appended to logs/<name>.log and its PID in pids/<name>.pid.
func startDaemon(l layout, name, bin string, args ...string) (int, error) {
	logFile, err := os.OpenFile(l.logFile(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "### %s %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "PATH="+hostPATH)
	cmd.Dir = l.root
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", name, err)
	}
	// Reap it when it exits while this process still runs (e.g. the test binary that started it).
	go func() { _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	if err := os.WriteFile(l.pidFile(name), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		return 0, err
	}
	return pid, nil
}

// terminate sends SIGTERM to every pid, waits up to grace for them to exit, then sends SIGKILL to the
// rest and waits again. It returns the PIDs still alive after all that.
func terminate(log io.Writer, what string, pids []int, grace time.Duration) []int {
	pids = uniqueInts(pids)
	if len(pids) == 0 {
		return nil
	}
	fmt.Fprintf(log, "stopping %s: %v\n", what, pids)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	left := waitGone(pids, grace)
	if len(left) == 0 {
		return nil
	}
	fmt.Fprintf(log, "killing %s after %s: %v\n", what, grace, left)
	for _, pid := range left {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return waitGone(left, 10*time.Second)
}

// waitGone polls until none of pids is alive or timeout passes, and returns those still alive.
func waitGone(pids []int, timeout time.Duration) []int {
	var left []int
	_ = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		left = nil
		for _, pid := range pids {
			if alive(pid) {
				left = append(left, pid)
			}
		}
		return len(left) == 0, nil
	})
	return left
}

func uniqueInts(in []int) []int {
	seen := map[int]bool{}
	var out []int
	for _, v := range in {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Ints(out)
	return out
}

// run runs a host command and returns its combined output.
func run(name string, args ...string) (string, error) {
	return runInput("", name, args...)
}

// runInput runs a host command with stdin and returns its combined output.
func runInput(stdin, name string, args ...string) (string, error) {
	path, err := lookPath(name)
	if err != nil {
		return "", err
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), "PATH="+hostPATH)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", filepath.Base(path), strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
