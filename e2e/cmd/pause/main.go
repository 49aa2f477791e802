// Command pause is the pod sandbox ("pause") image of the real node: containerd's sandbox_image.
//
// Every pod has one sandbox container that holds the pod's namespaces (network, IPC, and PID when the
// pod shares its process namespace) for as long as the pod exists; the app containers join them. The
// sandbox process itself only has to stay alive, so this program:
//
//   - sleeps forever, waking only for signals;
//   - reaps zombies: it is PID 1 of the sandbox, so when the pod shares its process namespace every
//     orphaned process of every container is re-parented to it, and a PID 1 that never calls wait(2)
//     would leave them as zombies until the pod dies;
//   - exits 0 on SIGTERM or SIGINT, which is how the runtime stops a sandbox. (PID 1 of a PID namespace
//     gets no default signal actions, so without a handler SIGTERM would be ignored and the runtime
//     would have to wait for its timeout and SIGKILL.)
//
// `pause -v` prints the version and exits. The program is our own so the real node needs no image from a
// registry: it is built statically (CGO_ENABLED=0) and packaged by e2e/cmd/images like every other binary.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/statefulops/statefulops/shared/version"
)

func main() {
	// First thing: until Notify, the Go runtime would let SIGTERM kill the process. Separate channels: a
	// burst of SIGCHLD may overflow its buffer (harmless, one reap collects all) but must never crowd out
	// a stop request.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	children := make(chan os.Signal, 1)
	signal.Notify(children, syscall.SIGCHLD)

	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "-v", "-version", "--version":
			fmt.Println("pause", version.Get())
			return
		}
		fmt.Fprintln(os.Stderr, "usage: pause [-v]")
		os.Exit(2)
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "pause: warning: not PID 1, zombies of other processes are not reaped here")
	}

	for {
		select {
		case <-children:
			reap()
		case <-stop:
			// Reap what has exited so far; the runtime kills whatever else is left.
			reap()
			os.Exit(0)
		}
	}
}

// reap collects every child that has exited. Signals coalesce (one SIGCHLD can stand for many exits), so
// it loops until no exited child is left.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
