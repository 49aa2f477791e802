package exitreport

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stopDirs lays out a pod's signal and exit directories; sidecar: the sidecar's lock is held (by
// another open file description: flock locks conflict across those, also within one process).
func stopDirs(t *testing.T, sidecar bool) (exitDir, stoppingFile, stopFile string) {
	t.Helper()
	root := t.TempDir()
	exitDir, signalDir := filepath.Join(root, "exit"), filepath.Join(root, "signal")
	require.NoError(t, os.Mkdir(exitDir, 0o755))
	require.NoError(t, os.Mkdir(signalDir, 0o755))
	if sidecar {
		fd, err := syscall.Open(lockPath(exitDir, SidecarLock), syscall.O_CREAT|syscall.O_RDWR|syscall.O_CLOEXEC, 0o644)
		require.NoError(t, err)
		t.Cleanup(func() { syscall.Close(fd) })
		require.NoError(t, flock(fd, syscall.LOCK_EX))
	}
	signalFile := filepath.Join(signalDir, "start-signal")
	return exitDir, StoppingFile(signalFile), StopSignalFile(signalFile)
}

func waitStopped(t *testing.T, done <-chan struct{}, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-done:
		return time.Since(start)
	case <-time.After(within):
		t.Fatalf("still held after %s", within)
		return 0
	}
}

// A wrapper's SIGTERM is held back while the pod is stopping (fence up, sidecar alive) until the stop
// signal; it goes through when only the container stops (no fence), or when the sidecar is gone.
func TestWaitStop(t *testing.T) {
	t.Run("until the stop signal", func(t *testing.T) {
		dir, stopping, stop := stopDirs(t, true)
		require.NoError(t, os.WriteFile(stopping, nil, 0o644))
		done, why := WaitStop(dir, stopping, stop)
		select {
		case <-done:
			t.Fatalf("not held: %s", why())
		case <-time.After(2 * fenceWait):
		}
		require.NoError(t, SignalStop(stop))
		waitStopped(t, done, time.Second)
		assert.Equal(t, "the stop signal", why())
	})
	t.Run("the stop signal already there", func(t *testing.T) {
		dir, stopping, stop := stopDirs(t, true)
		require.NoError(t, os.WriteFile(stopping, nil, 0o644))
		require.NoError(t, SignalStop(stop))
		done, why := WaitStop(dir, stopping, stop)
		waitStopped(t, done, 100*time.Millisecond)
		assert.Equal(t, "the stop signal", why())
	})
	t.Run("no fence", func(t *testing.T) {
		dir, stopping, stop := stopDirs(t, true)
		done, why := WaitStop(dir, stopping, stop)
		took := waitStopped(t, done, 2*time.Second)
		assert.GreaterOrEqual(t, took, fenceWait-10*time.Millisecond)
		assert.Contains(t, why(), "no fence")
	})
	t.Run("no sidecar", func(t *testing.T) {
		dir, stopping, stop := stopDirs(t, false)
		require.NoError(t, os.WriteFile(stopping, nil, 0o644))
		done, why := WaitStop(dir, stopping, stop)
		waitStopped(t, done, 100*time.Millisecond)
		assert.Contains(t, why(), "no status-sidecar lock")
	})
}
