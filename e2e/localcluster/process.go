package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// components are the processes kwokctl's binary runtime starts, each with a pid file
// <cluster dir>/pids/<name>.pid.
var components = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller", provisionerComponent, clusterDNSComponent}

// clusterPIDs reads the pid files kwokctl wrote for the cluster.
func clusterPIDs(clusterDir string) ([]int, error) {
	files, err := filepath.Glob(filepath.Join(clusterDir, "pids", "*.pid"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// alive reports whether pid is a running process. A zombie is dead: it only waits to be reaped by
// its parent, which for kwokctl's detached processes is init.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may contain spaces.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] != 'Z' && stat[i+2] != 'X'
}

// processesStartedFrom returns the PIDs of live processes whose executable path (argv[0]) lies under
// dir: kwokctl starts every component from a link in <cluster dir>/bin/, except local-provisioner and
// clusterdns, which run from the build directories and are recognised by an argument under dir.
func processesStartedFrom(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		argv0, _, _ := bytes.Cut(cmdline, []byte{0})
		if err != nil || !(bytes.HasPrefix(argv0, []byte(dir+"/")) || isOwnComponentOf(cmdline, dir)) {
			continue
		}
		if alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killProcessesStartedFrom kills, by PID, every live process started from a binary under dir and waits
// until they are gone: for the cluster dir these are exactly the cluster's components.
func killProcessesStartedFrom(ctx context.Context, dir string) error {
	for _, pid := range processesStartedFrom(dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	var left []int
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		left = processesStartedFrom(dir)
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("processes of the cluster in %s still running: %v: %w", dir, left, err)
	}
	return nil
}

// lockStateDir serialises Up and Down on one state dir (e.g. `make run` and `make test` at once).
func lockStateDir(ctx context.Context, stateDir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(stateDir, "localcluster.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Minute, true, func(context.Context) (bool, error) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil
}

// isOwnComponentOf reports whether a command line (NUL-separated) is local-provisioner's or
// clusterdns's with an argument naming a file under dir (its kubeconfig in the cluster dir).
func isOwnComponentOf(cmdline []byte, dir string) bool {
	args := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
	if len(args) == 0 || (filepath.Base(string(args[0])) != provisionerComponent && filepath.Base(string(args[0])) != clusterDNSComponent) {
		return false
	}
	for _, arg := range args[1:] {
		_, value, _ := bytes.Cut(arg, []byte("="))
		if bytes.HasPrefix(value, []byte(dir+"/")) {
			return true
		}
	}
	return false
}
