package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// build builds the pause program for a test.
func build(t *testing.T) string {
	t.Helper()
	binary := filepath.Join(t.TempDir(), "pause")
	cmd := exec.Command("go", "build", "-o", binary, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	return binary
}

// startPause starts pause, in a new PID namespace when newPID.
func startPause(t *testing.T, binary string, newPID bool) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(binary)
	if newPID {
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

// TestStop: SIGTERM and SIGINT end pause with exit code 0.
//
// Nothing outside shows when pause has subscribed to the signals (the Go runtime catches every signal
// from its start and dies of those no code has asked for yet), so the signal is sent after a short wait
// and, if it still came too early, once more after a longer one; a pause that does not handle it dies
// of it every time.
func TestStop(t *testing.T) {
	binary := build(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		for attempt, delay := range []time.Duration{200 * time.Millisecond, time.Second, 3 * time.Second} {
			cmd := startPause(t, binary, false)
			time.Sleep(delay)
			require.NoError(t, cmd.Process.Signal(sig))
			err := cmd.Wait()
			if status := cmd.ProcessState.Sys().(syscall.WaitStatus); status.Signaled() && attempt < 2 {
				t.Logf("%v after %v killed pause (too early?), once more", sig, delay)
				continue
			}
			assert.NoError(t, err, sig.String())
			assert.Equal(t, 0, cmd.ProcessState.ExitCode(), sig.String())
			break
		}
	}
	out, err := exec.Command(binary, "-v").Output()
	require.NoError(t, err)
	assert.Equal(t, "pause devel\n", string(out))
}

// TestReapsZombies: as PID 1 of a PID namespace, pause reaps the orphans re-parented to it, and still
// exits 0 on SIGTERM. It needs root (a new PID namespace), like the real node whose sandbox pause is:
// without root it fails, unless E2E_REAL_NODE=0 turned the real node's tests off (as the Makefile does
// on such machines); then it says so and returns.
func TestReapsZombies(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("E2E_REAL_NODE") == "0" {
			t.Log("not run: needs root to start pause as PID 1 of a new PID namespace, and E2E_REAL_NODE=0")
			return
		}
		t.Fatal("needs root to start pause as PID 1 of a new PID namespace (E2E_REAL_NODE=0 turns this off)")
	}
	nsenter, err := exec.LookPath("nsenter")
	require.NoError(t, err, "nsenter (util-linux) enters pause's PID namespace")
	cmd := startPause(t, build(t), true)
	pid := strconv.Itoa(cmd.Process.Pid)
	// A shell in pause's PID namespace starts three children and exits: they become pause's children.
	// (Output to /dev/null: the children would hold a pipe open until they exit.)
	require.NoError(t, exec.Command(nsenter, "-t", pid, "-p", "sh", "-c", "sleep 1 & sleep 1 & sleep 1 & exit 0").Run())
	children := func() (all, zombies int) {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			status, err := os.ReadFile("/proc/" + e.Name() + "/status")
			if err != nil {
				continue
			}
			s := string(status)
			if strings.Contains(s, "\nPPid:\t"+pid+"\n") {
				all++
				if strings.Contains(s, "\nState:\tZ") {
					zombies++
				}
			}
		}
		return all, zombies
	}
	all, _ := children()
	assert.Equal(t, 3, all, "the orphans are pause's children")
	assert.Eventually(t, func() bool { all, _ := children(); return all == 0 }, 10*time.Second, 50*time.Millisecond,
		"the children exited and were reaped, none is left as a zombie")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	assert.NoError(t, cmd.Wait())
}
