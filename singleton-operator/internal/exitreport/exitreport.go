// Package exitreport is the on-disk protocol between the wrappers of a Wrapper-mode pod's app containers
// and its status-sidecar, through which the sidecar learns that every app process has exited (for its
// exit report to the operator) without sharing the containers' process namespace.
//
// The exit directory (singletonv1.ExitDir, an emptyDir shared read-write) holds, per app container
// <name>:
//
//	<name>       the marker: "running\n" once the wrapper lets its app start, "exited <code>\n" once the
//	             app and every other process of the container are gone; written through a rename, so a
//	             reader sees one or the other, whole
//	<name>.lock  flocked (LOCK_EX) by the wrapper for its whole life: the kernel releases it when the
//	             wrapper is gone, however it died, so a reader taking LOCK_SH waits exactly that long
//
// The fence is the StoppingFile, beside the start signal in the signal directory (read-only for the app
// containers, so no app can remove it). The sidecar creates it once the pod stops, and a wrapper checks
// it before its app starts; both do so under a flock of the exit directory itself, so either the wrapper
// wrote "running" before the sidecar looked, or it sees the fence and never starts its app. After the
// fence, a marker that says "exited" stays so.
//
// Unclean death of a wrapper (SIGKILL, OOM) leaves "running" with the lock free: the sidecar cannot tell
// whether processes of that container survive it, so it reports nothing (the operator then waits for
// the kubelet as without a report).
package exitreport

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// EnvDir overrides the exit directory (tests run the wrapper and the sidecar outside a pod).
const EnvDir = "STATEFULSINGLETON_EXIT_DIR"

// Dir is the exit directory: $STATEFULSINGLETON_EXIT_DIR, or singletonv1.ExitDir.
func Dir() string {
	if d := os.Getenv(EnvDir); d != "" {
		return d
	}
	return singletonv1.ExitDir
}

// StoppingFile is the fence that belongs to the start signal signalFile: the file of StoppingFile's name
// in the signal file's directory (so a test that moves the signal file moves the fence with it).
func StoppingFile(signalFile string) string {
	return filepath.Join(filepath.Dir(signalFile), filepath.Base(singletonv1.StoppingFile))
}

// HoldLock takes the lock of container name and keeps it until the process exits: the descriptor is
// deliberately never closed (and is close-on-exec, so no child keeps it after the process is gone). It
// waits while another process holds it.
func HoldLock(dir, name string) error {
	fd, err := syscall.Open(lockPath(dir, name), syscall.O_CREAT|syscall.O_RDWR|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return &fs.PathError{Op: "open", Path: lockPath(dir, name), Err: err}
	}
	if err := flock(fd, syscall.LOCK_EX); err != nil {
		syscall.Close(fd)
		return fmt.Errorf("locking %s: %w", lockPath(dir, name), err)
	}
	return nil
}

// MarkRunning is the wrapper's fence check: under the directory lock it returns stopping=true if the
// fence is up (the app must not start; the marker is left as it is), or writes "running".
func MarkRunning(dir, name, stoppingFile string) (stopping bool, err error) {
	err = underDirLock(dir, func() error {
		switch _, err := os.Stat(stoppingFile); {
		case err == nil:
			stopping = true
			return nil
		case !errors.Is(err, fs.ErrNotExist):
			return err // cannot tell: the caller must not start the app
		}
		return writeAtomic(dir, name, "running\n")
	})
	return stopping, err
}

// MarkExited records the app's exit code; the wrapper calls it once no process of its container is left.
func MarkExited(dir, name string, code int) error {
	return writeAtomic(dir, name, fmt.Sprintf("exited %d\n", code))
}

// Fence puts the fence up (the sidecar, once the pod stops): from its return on, no wrapper starts its
// app, and a wrapper that did wrote "running" before.
func Fence(dir, stoppingFile string) error {
	return underDirLock(dir, func() error {
		return writeAtomic(filepath.Dir(stoppingFile), filepath.Base(stoppingFile), "stopping\n")
	})
}

// Marker is what a container's marker says.
type Marker struct {
	// Exited: the app and every process of its container are gone; Code is the app's exit code.
	// Otherwise the wrapper let the app start ("running").
	Exited bool
	Code   int
}

// WaitExited returns the marker of container name once it says "exited", waiting while the container's
// wrapper lives. It returns an error when that exit cannot be vouched for: no marker or no lock file (no
// wrapper of this protocol ran there), or a wrapper gone without recording the exit.
func WaitExited(dir, name string) (Marker, error) {
	fd, err := syscall.Open(lockPath(dir, name), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return Marker{}, &fs.PathError{Op: "open", Path: lockPath(dir, name), Err: err}
	}
	defer syscall.Close(fd)
	m, err := readMarker(dir, name)
	if err != nil || m.Exited {
		return m, err
	}
	// "running": its wrapper took the lock before writing it, so the lock is free once that wrapper is gone.
	if err := flock(fd, syscall.LOCK_SH); err != nil {
		return m, fmt.Errorf("waiting for the lock of %s: %w", name, err)
	}
	if m, err = readMarker(dir, name); err == nil && !m.Exited {
		err = fmt.Errorf("the wrapper of %s is gone without recording its app's exit (killed?)", name)
	}
	return m, err
}

// readMarker reads the marker of container name. A missing or malformed marker is an error.
func readMarker(dir, name string) (Marker, error) {
	raw, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return Marker{}, err
	}
	return parseMarker(string(raw))
}

// parseMarker parses a marker's content: exactly "running\n" or "exited <code>\n".
func parseMarker(s string) (Marker, error) {
	if s == "running\n" {
		return Marker{}, nil
	}
	if rest, ok := strings.CutPrefix(s, "exited "); ok {
		if code, err := strconv.Atoi(strings.TrimSuffix(rest, "\n")); err == nil && strings.HasSuffix(rest, "\n") {
			return Marker{Exited: true, Code: code}, nil
		}
	}
	return Marker{}, fmt.Errorf("malformed marker %q", s)
}

func lockPath(dir, name string) string { return filepath.Join(dir, name+".lock") }

// underDirLock runs f holding the fence lock: an exclusive flock of the exit directory itself.
func underDirLock(dir string, f func() error) error {
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer syscall.Close(fd) // releases the lock
	if err := flock(fd, syscall.LOCK_EX); err != nil {
		return fmt.Errorf("locking %s: %w", dir, err)
	}
	return f()
}

// flock waits for the lock, resuming after a signal interrupts it (the Go runtime's own signals do).
func flock(fd, how int) error {
	for {
		if err := syscall.Flock(fd, how); !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// writeAtomic writes dir/name through a temporary file and a rename, so a reader sees the old content or
// the new one, whole; mode 0644, so containers running as other users can read it.
func writeAtomic(dir, name, content string) error {
	tmp, err := os.CreateTemp(dir, "."+name+"-*")
	if err != nil {
		return err
	}
	err = tmp.Chmod(0o644)
	if err == nil {
		_, err = tmp.WriteString(content)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
