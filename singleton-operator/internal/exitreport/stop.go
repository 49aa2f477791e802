package exitreport

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// The stop signal holds back a stopping pod's apps while its replacement starts (spec.successorWait).
// When the pod stops, the sidecar puts the fence up, asks the operator whether to wait for the
// replacement (the stopping notice, answered once the replacement runs, none is coming, or the wait is
// up) and then writes the stop signal, the file StopSignalFile beside the start signal. A supervising
// wrapper that gets SIGTERM passes it on to its app once the stop signal is there. It passes it on at
// once when nothing will write it: no fence within fenceWait (only its container is being stopped, as
// after a failed liveness probe, not the pod), the sidecar gone (its lock, SidecarLock, is free), or
// after maxStopWait whatever happens. Holding the signal back never affects the exit report: the app
// only stops later.

// SidecarLock is the lock (in the exit directory, see HoldLock) the status-sidecar holds for its life.
const SidecarLock = singletonv1.SidecarContainerName

// fenceWait is how long after its SIGTERM a wrapper looks for the fence, maxStopWait how long it holds
// SIGTERM back at most (above the operator's longest answer: successorWait ≤ 30 s).
const (
	fenceWait   = 500 * time.Millisecond
	maxStopWait = 40 * time.Second
)

// StopSignalFile is the stop signal that belongs to the start signal signalFile (as StoppingFile).
func StopSignalFile(signalFile string) string {
	return filepath.Join(filepath.Dir(signalFile), filepath.Base(singletonv1.StopSignalFile))
}

// SignalStop writes the stop signal (the sidecar).
func SignalStop(stopFile string) error {
	return writeAtomic(filepath.Dir(stopFile), filepath.Base(stopFile), "stop\n")
}

// WaitStop returns a channel that is closed once a wrapper that got SIGTERM should pass it on (see
// above): the stop signal at stopFile is there, no fence (stoppingFile) appeared within fenceWait, the
// sidecar's lock in dir is free, or maxStopWait passed. why then says which.
func WaitStop(dir, stoppingFile, stopFile string) (done <-chan struct{}, why func() string) {
	ch := make(chan struct{})
	var (
		once   sync.Once
		reason string
	)
	end := func(r string) { once.Do(func() { reason = r; close(ch) }) } // the first reason wins
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }

	watcher, err := fsnotify.NewWatcher()
	if err == nil {
		err = watcher.Add(filepath.Dir(stopFile))
	}
	if err != nil {
		end("the signal directory cannot be watched: " + err.Error())
		return ch, func() string { return reason }
	}
	go func() {
		defer watcher.Close()
		fence := time.NewTimer(fenceWait)
		limit := time.NewTimer(maxStopWait)
		defer fence.Stop()
		defer limit.Stop()
		// Checked once the watch is in place, so a file written in between is not missed.
		if exists(stopFile) {
			end("the stop signal")
			return
		}
		for {
			select {
			case <-ch:
				return
			case ev, ok := <-watcher.Events:
				if !ok {
					end("the signal directory's watch ended")
					return
				}
				if filepath.Clean(ev.Name) == filepath.Clean(stopFile) && exists(stopFile) {
					end("the stop signal")
					return
				}
			case err := <-watcher.Errors:
				end("the signal directory's watch failed: " + err.Error())
				return
			case <-fence.C:
				if !exists(stoppingFile) {
					end("no fence: only this container is being stopped, not the pod")
					return
				}
			case <-limit.C:
				end("held for " + maxStopWait.String() + ", the longest wait")
				return
			}
		}
	}()
	go func() {
		fd, err := syscall.Open(lockPath(dir, SidecarLock), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			end("no status-sidecar lock: " + err.Error())
			return
		}
		defer syscall.Close(fd)
		if flock(fd, syscall.LOCK_SH) == nil {
			end("the status-sidecar is gone")
		}
	}()
	return ch, func() string { return reason }
}
