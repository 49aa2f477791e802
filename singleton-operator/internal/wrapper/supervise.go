package wrapper

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/statefulops/statefulops/singleton-operator/internal/exitreport"
)

// forwarded are the signals the supervising wrapper passes on to its app: every catchable one that asks
// a process to do something. Not SIGCHLD (about the wrapper's own children), SIGPIPE (its own writes),
// nor SIGURG (the Go runtime's preemption).
var forwarded = []os.Signal{
	syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
	syscall.SIGWINCH, syscall.SIGCONT, syscall.SIGALRM, syscall.SIGPWR, syscall.SIGTSTP,
}

// supervise runs the app as the wrapper's child, as the container's PID 1, and returns the container's
// exit code: the app's, or 143 when the pod stopped before the app could start. Signals received on sigs
// (those of forwarded) go to the app, the first SIGTERM once the pod's stop signal allows it
// (exitreport.WaitStop: the replacement pod runs, or none is coming). The steps follow package
// exitreport's protocol; signalFile is the start signal, beside which the fence and the stop signal are.
func supervise(path string, argv []string, dir, name, signalFile string, sigs <-chan os.Signal) int {
	stoppingFile := exitreport.StoppingFile(signalFile)
	// Taken first and never released: the sidecar waits on it for the wrapper to be gone, however it goes.
	if err := exitreport.HoldLock(dir, name); err != nil {
		fail("%v", err)
	}
	switch stopping, err := exitreport.MarkRunning(dir, name, stoppingFile); {
	case err != nil:
		// The app must not start unrecorded: a marker left by an earlier run of the container could
		// say "exited" while it runs.
		fail("recording the app's start in %s: %v", dir, err)
	case stopping:
		fmt.Fprintf(os.Stderr, "StatefulSingleton: the pod is stopping (%s); the app never started\n", stoppingFile)
		return 128 + int(syscall.SIGTERM)
	}

	var held time.Time // when the first SIGTERM came
	children := make(chan os.Signal, 1)
	signal.Notify(children, syscall.SIGCHLD)
	// Same stdio, environment and process group as the wrapper: only the process tree differs from exec.
	app, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "StatefulSingleton wrapper: executing %s: %v\n", path, err)
		return markExited(dir, name, 126) // nothing runs
	}

	// One loop both forwards and reaps, so a signal never goes to the app's PID once it is reaped (and
	// possibly reused).
	code := -1
	var (
		stopAllowed <-chan struct{} // set while the first SIGTERM is held back
		stopWhy     func() string
		termHeld    bool
	)
	for code < 0 {
		select {
		case s := <-sigs:
			if s == syscall.SIGTERM && !termHeld {
				// The pod may be stopping while its replacement starts: the app keeps running until the
				// stop signal (a second SIGTERM goes through at once).
				termHeld = true
				stopAllowed, stopWhy = exitreport.WaitStop(dir, stoppingFile, exitreport.StopSignalFile(signalFile))
				held = time.Now()
				continue
			}
			if s == syscall.SIGTERM {
				stopAllowed = nil // passed on now: not again when the stop signal comes
			}
			_ = syscall.Kill(app, s.(syscall.Signal))
		case <-stopAllowed:
			stopAllowed = nil
			fmt.Fprintf(os.Stderr, "StatefulSingleton: SIGTERM passed on to the app after %s (%s)\n",
				time.Since(held).Round(time.Millisecond), stopWhy())
			_ = syscall.Kill(app, syscall.SIGTERM)
		case <-children:
			code = reap(app)
		}
	}

	// What the kernel does when a container's PID 1 exits: nothing of the container outlives its main
	// process. kill(-1) reaches exactly the container's processes only from PID 1 of its PID namespace
	// (checked again here: anywhere else it would signal every process of the user).
	if os.Getpid() == 1 {
		_ = syscall.Kill(-1, syscall.SIGKILL)
	}
	for {
		_, err := syscall.Wait4(-1, nil, 0, nil)
		if errors.Is(err, syscall.ECHILD) {
			break // no process of the container is left but the wrapper
		}
		if err != nil && !errors.Is(err, syscall.EINTR) {
			// Cannot tell whether any is left: no "exited" (the sidecar then reports nothing).
			fmt.Fprintf(os.Stderr, "StatefulSingleton wrapper: reaping the container's processes: %v\n", err)
			return code
		}
	}
	return markExited(dir, name, code)
}

// reap collects every child that has exited — as PID 1 the wrapper inherits the orphans of the container,
// which would stay zombies otherwise — and returns the app's exit code once the app is among them, or -1.
func reap(app int) int {
	code := -1
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil || pid <= 0:
			return code // none left, or none exited yet
		case pid == app:
			code = exitCode(ws)
		}
	}
}

// exitCode is the container's exit code for a process that ended with ws, as the runtime reports it.
func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// markExited records the app's exit for the sidecar and returns code.
func markExited(dir, name string, code int) int {
	if err := exitreport.MarkExited(dir, name, code); err != nil {
		fmt.Fprintf(os.Stderr, "StatefulSingleton wrapper: recording the app's exit: %v\n", err)
	}
	return code
}
