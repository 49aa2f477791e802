package realnode

import (
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"time"
)

// A run killed with all of its processes at once (the end of a session, a CI job cut off, a machine
// reused by another clone) leaves its real node's host changes behind in a state dir that the next
// run, started from another clone, knows nothing of: the bridge with the old pods' network namespaces
// still attached through their veths, their addresses, the KUBE-* chains. A new node on that bridge
// hands out the same pod addresses again, and its pods' probes reach the dead pods' namespaces (seen:
// a StatefulCluster's pods on the real node never all Ready, in a CI run after such a session).
// Start removes these leftovers before it takes its snapshot of the host; only one real node fits on
// a host, and Available has made sure no other kubelet runs.

// strayStateDirs returns the state dirs other than own whose real node left mounts on the host: its
// kubelet's and containerd's dirs are bind mounts and overlays that outlive the processes.
func strayStateDirs(own string) []string {
	var points []string
	for _, m := range mounts() {
		points = append(points, m.point)
	}
	return strayStateDirsOf(points, newLayout(own).root)
}

// strayStateDirsOf returns the state dirs of the realnode dirs other than ownRoot that mount points
// lie in, once each, in the order of first appearance.
func strayStateDirsOf(points []string, ownRoot string) []string {
	seen := map[string]bool{}
	var dirs []string
	for _, point := range points {
		i := strings.Index(point, "/realnode/")
		if i < 0 {
			continue
		}
		root := point[:i+len("/realnode")]
		rest := strings.TrimPrefix(point, root+"/")
		if rest != "kubelet" && !strings.HasPrefix(rest, "kubelet/") && !strings.HasPrefix(rest, "containerd/") {
			continue
		}
		if root == ownRoot || seen[root] {
			continue
		}
		seen[root] = true
		dirs = append(dirs, filepath.Dir(root))
	}
	return dirs
}

// strayHostChanges lists what a real node adds to the host and is there now: kubepods cgroups, KUBE-*
// and CNI-* chains, the bridge. Called once every state dir is cleaned up, anything listed was left
// by a node whose state dir is gone.
func strayHostChanges() []string {
	var found []string
	if n := len(kubepodsDirs()); n > 0 {
		found = append(found, fmt.Sprintf("%d kubepods cgroups", n))
	}
	for _, fam := range []string{"iptables", "ip6tables"} {
		if saved, err := run(fam + "-save"); err == nil && iptablesCleanupScript(saved) != "" {
			found = append(found, fam+" KUBE-*/CNI-* chains")
		}
	}
	if _, err := net.InterfaceByName(BridgeName); err == nil {
		found = append(found, "bridge "+BridgeName)
	}
	return found
}

// cleanupStray undoes what killed runs of other state dirs left on the host (see above): each such
// state dir is cleaned up as its own next Start would, then whatever a node adds host-wide is removed
// if it is still there. It logs what it found and returns what it could not undo.
func cleanupStray(log io.Writer, own string) error {
	var errs []error
	for _, other := range strayStateDirs(own) {
		fmt.Fprintf(log, "realnode: cleaning up the real node a killed run left in %s (another state dir)\n", other)
		errs = append(errs, Cleanup(other))
	}
	found := strayHostChanges()
	if len(found) == 0 {
		return errors.Join(errs...)
	}
	fmt.Fprintf(log, "realnode: removing what a real node of a state dir that is gone left on the host: %s\n", strings.Join(found, ", "))
	if left := terminate(log, "containers", kubepodsPIDs(), 5*time.Second); len(left) > 0 {
		errs = append(errs, fmt.Errorf("containers still running: %v", left))
	}
	errs = append(errs, removeCgroups(log), cleanIptables(log), deleteBridge(log))
	return errors.Join(errs...)
}
