// Package wrapper is the entrypoint of every app container of a StatefulSingleton pod in Wrapper hold
// mode. It blocks until the pod's status-sidecar writes the start signal (/var/run/signal/start-signal),
// then runs the container's original command in one of two ways:
//
//   - supervise: when the wrapper is the container's PID 1 and the pod has the exit volume (its
//     container named in STATEFULSINGLETON_CONTAINER, singletonv1.ExitDir present), it starts the app as
//     its child, forwards it every signal it receives and reaps every process of the container as an
//     init does. Once the app has exited it kills what is left of the container, and only when no
//     other process is left records "exited <code>" for the sidecar (package internal/exitreport), then
//     exits with the app's code (128+signal when a signal killed it). That record is what lets the
//     sidecar report the exit to the operator, which then releases the next pod without waiting for
//     the kubelet to confirm the stop. A pod that stops before the app started is fenced: the wrapper
//     then exits 143 without starting it.
//   - exec: otherwise (a pod sharing its process namespace or the host's, where the wrapper is not
//     PID 1 and could neither reap nor kill the rest of its container; or a pod admitted without the
//     exit volume) it replaces itself with the app (execve), as before the exit report existed: the
//     app is the container's main process and its exit code is the container's, and the sidecar
//     reports nothing (the operator waits for the kubelet).
//
// The original argv comes from ORIGINAL_ENTRYPOINT, a JSON array of strings written by the admission
// webhook. The webhook doubles every $ so the kubelet passes the JSON verbatim; the wrapper then
// expands $(VAR) references with the kubelet's rules, so the app gets the argv it would have got
// unwrapped — spaces, quotes and commas included — and no shell is needed in the image.
//
// Fail closed: without the signal file the app never starts. A missing or malformed ORIGINAL_ENTRYPOINT
// or signal directory, or an exit directory the wrapper cannot write, is an error (exit 126); SIGTERM or
// SIGINT before the grant exits with 143 or 130.
//
// The code is shared by two binaries: cmd/singleton-wrapper, and cmd/status-sidecar, which copies itself
// into the pod (its postStart hook, `status-sidecar install-wrapper <path>`) and runs as the wrapper when
// started under the name singleton-wrapper — so the pod needs no init container.
package wrapper

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/fsnotify/fsnotify"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/shared/podmutation"
	"github.com/statefulops/statefulops/singleton-operator/internal/exitreport"
)

// envSignalFile overrides the start-signal path (tests run the wrapper outside a pod).
const envSignalFile = "STATEFULSINGLETON_SIGNAL_FILE"

// Main runs the wrapper: it never returns. With the arguments "install <path>" it copies its own binary
// to <path> instead.
func Main() {
	if len(os.Args) == 3 && os.Args[1] == "install" {
		if err := Install(os.Args[2]); err != nil {
			fail("installing the wrapper: %v", err)
		}
		os.Exit(0)
	}
	if len(os.Args) != 1 {
		fail("usage: singleton-wrapper (the argv comes from %s) | singleton-wrapper install <path>", singletonv1.EnvOriginalEntrypoint)
	}
	argv, err := podmutation.OriginalArgv(os.Getenv(singletonv1.EnvOriginalEntrypoint))
	if err != nil {
		fail("%v", err)
	}
	lookup := appLookup(os.LookupEnv)
	for i := range argv {
		argv[i] = Expand(argv[i], lookup)
	}
	// The app would not have had this variable unwrapped (the webhook put it there for us).
	_ = os.Unsetenv(singletonv1.EnvOriginalEntrypoint)
	path, err := lookPath(argv[0])
	if err != nil {
		fail("%v", err)
	}
	signalFile := singletonv1.StartSignalFile
	if f := os.Getenv(envSignalFile); f != "" {
		signalFile = f
	}
	// The mode depends on the container alone, so it is known before the wait; the signals the app is
	// to get are caught from then on, so none arriving between the grant and the app's start is lost.
	exitDir, name, supervised := supervision()
	sigs := make(chan os.Signal, 16)
	if supervised {
		signal.Notify(sigs, forwarded...)
	} else {
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	}
	fmt.Fprintf(os.Stderr, "StatefulSingleton: waiting for the start grant (%s) before running %q\n", signalFile, argv)
	if err := waitForFile(signalFile, sigs); err != nil {
		fail("waiting for the start signal: %v", err)
	}
	if supervised {
		os.Exit(supervise(path, argv, exitDir, name, signalFile, sigs))
	}
	// A signal from now on ends the wrapper as it would the app (it has no handler to queue it for).
	signal.Stop(sigs)
	// exec: the app replaces the wrapper as the container's process.
	err = syscall.Exec(path, argv, os.Environ())
	fail("executing %s: %v", path, err)
}

// supervision returns the exit directory and the container's name when the wrapper is to supervise its
// app. Only as the container's PID 1 can it reap, and kill, every process of the container (package
// doc); elsewhere, or in a pod admitted without the exit volume, it execs as before.
func supervision() (dir, name string, ok bool) {
	name, dir = os.Getenv(singletonv1.EnvContainerName), exitreport.Dir()
	if name == "" {
		return "", "", false
	}
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		fmt.Fprintf(os.Stderr, "StatefulSingleton: no exit directory %s: the app's exit will not be reported\n", dir)
		return "", "", false
	}
	if pid := os.Getpid(); pid != 1 {
		fmt.Fprintf(os.Stderr, "StatefulSingleton: the wrapper is not the container's PID 1 (%d: a shared process namespace): the app's exit will not be reported\n", pid)
		return "", "", false
	}
	return dir, name, true
}

// appLookup is the environment the app's argv is expanded with: the container's, without the
// wrapper's own ORIGINAL_ENTRYPOINT, so "$(ORIGINAL_ENTRYPOINT)" in the app's argv stays literal as it
// would unwrapped.
func appLookup(lookup func(string) (string, bool)) func(string) (string, bool) {
	return func(k string) (string, bool) {
		if k == singletonv1.EnvOriginalEntrypoint {
			return "", false
		}
		return lookup(k)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "StatefulSingleton wrapper: "+format+"\n", args...)
	os.Exit(126)
}

// lookPath resolves argv[0] like the container runtime does: as given when it contains a slash,
// otherwise through the container's PATH.
func lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	return exec.LookPath(name)
}

// waitForFile returns once path exists. It watches the directory with inotify (no polling), so it
// returns as soon as the file is created or renamed into place. SIGTERM and SIGINT received on sigs end
// the process; other signals are dropped (they were meant for an app that does not run yet).
func waitForFile(path string, sigs <-chan os.Signal) error {
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer watcher.Close()
	if err := watcher.Add(filepath.Dir(path)); err != nil {
		return err
	}
	// Checked after the watch is in place, so a file created in between is not missed.
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	for {
		select {
		case ev, ok := <-watcher.Events:
			if !ok {
				return errors.New("the watch ended")
			}
			if filepath.Clean(ev.Name) != filepath.Clean(path) {
				continue
			}
			if _, err := os.Stat(path); err == nil {
				return nil
			}
		case err := <-watcher.Errors:
			return err
		case s := <-sigs:
			if s == syscall.SIGTERM || s == syscall.SIGINT {
				fmt.Fprintf(os.Stderr, "StatefulSingleton: %v before the start grant; the app never started\n", s)
				os.Exit(128 + int(s.(syscall.Signal)))
			}
		}
	}
}

// Expand replaces $(NAME) by the value of NAME when it is defined and turns $$ into $, leaving anything
// else as it is — the kubelet's rules for command and args.
func Expand(s string, lookup func(string) (string, bool)) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				// An unclosed reference is kept and the scan goes on after the "(" (the kubelet's rule:
				// a later "$$" is still unescaped).
				b.WriteString("$(")
				i++
				continue
			}
			ref := s[i : i+3+end]
			if v, ok := lookup(s[i+2 : i+2+end]); ok && end > 0 {
				b.WriteString(v)
			} else {
				b.WriteString(ref)
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// Install copies the running binary to dst (via a temporary file and a rename, so a concurrent reader
// never sees half a binary, and a wrapper already running from dst keeps its inode) with mode 0755.
func Install(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".singleton-wrapper-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
