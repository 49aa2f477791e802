package realnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// cleanup stops every process of the node in l and undoes its changes to the host, in reverse order of
// start. grace is how long each group of processes gets between SIGTERM and SIGKILL. The host-wide
// steps (containers, kubepods cgroups, iptables, bridge, sysctls, host paths) are skipped while
// another kubelet runs on the host: those are then its, not ours.
func cleanup(l layout, log io.Writer, grace time.Duration) error {
	start := time.Now()
	var errs []error
	fail := func(err error) {
		if err != nil {
			fmt.Fprintf(log, "error: %v\n", err)
			errs = append(errs, err)
		}
	}
	before, saved := savedHost(l)
	foreign := foreignNodeProcesses(l.root)
	global := len(foreign) == 0
	if !global {
		fmt.Fprintf(log, "another kubelet runs on this host, leaving containers, cgroups, iptables, bridge and sysctls alone: %s\n", strings.Join(foreign, "; "))
	}

	// Processes, last started first: kube-proxy, the kubelet, the containers, the shims, containerd.
	stop := func(what string, pids []int) {
		if left := terminate(log, what, pids, grace); len(left) > 0 {
			fail(fmt.Errorf("%s still running: %v", what, left))
		}
	}
	for _, name := range []string{"kube-proxy", "kubelet"} {
		stop(name, daemonPIDs(l, name))
	}
	if global {
		stop("containers", kubepodsPIDs())
	}
	stop("containerd shims", pidsOf(processesUnder(l.root), func(p proc) bool { return strings.HasPrefix(p.comm, "containerd-shim") }))
	stop("containerd", daemonPIDs(l, "containerd"))
	stop("other processes", pidsOf(processesUnder(l.root), func(proc) bool { return true }))

	if global {
		if raw, err := os.ReadFile(l.host("kube-proxy")); err == nil {
			out, err := runInput("", strings.TrimSpace(string(raw)), "--cleanup", "--v=0")
			fmt.Fprintf(log, "kube-proxy --cleanup: %s\n", strings.TrimSpace(out))
			if err != nil {
				fmt.Fprintf(log, "kube-proxy --cleanup failed (the chains are removed below anyway): %v\n", err)
			}
		}
	}

	unmountErr := unmountUnder(log, l.root)
	fail(unmountErr)

	if global {
		fail(removeCgroups(log))
		fail(cleanIptables(log))
		if saved {
			fail(deleteNewNftTables(log, before.NftTables))
		}
		fail(deleteBridge(log))
		if saved {
			waitLinks(log, before.Links)
			fail(restoreSysctls(log, before.Sysctls))
			fail(removeNewHostPaths(log, before.Paths))
		}
	}

	// Everything but the logs goes; the logs stay for post-mortems until the next Start. Never through
	// a mount that is still there: its files are not the state dir's.
	if unmountErr == nil {
		entries, _ := os.ReadDir(l.root)
		for _, e := range entries {
			if !kept[e.Name()] {
				fail(os.RemoveAll(filepath.Join(l.root, e.Name())))
			}
		}
	}
	fmt.Fprintf(log, "teardown done in %s (%d errors)\n", time.Since(start).Round(time.Millisecond), len(errs))
	return errors.Join(errs...)
}

// daemonPIDs returns the PID of the daemon name from its pid file and of any other process of that
// name started from the realnode dir (a pid file may be lost or stale).
func daemonPIDs(l layout, name string) []int {
	var pids []int
	if pid, ok := l.runningPID(name); ok {
		pids = append(pids, pid)
	}
	pids = append(pids, pidsOf(processesUnder(l.root), func(p proc) bool { return p.comm == name })...)
	return pids
}

func pidsOf(procs []proc, match func(proc) bool) []int {
	var pids []int
	for _, p := range procs {
		if match(p) {
			pids = append(pids, p.pid)
		}
	}
	return pids
}

// unmountUnder unmounts every mount at or below root, last mounted first (the kubelet bind-mounts its
// root dir onto itself; pod volumes, container root file systems, sandbox shm and network namespaces
// are mounted inside). A mount that stays busy is detached.
func unmountUnder(log io.Writer, root string) error {
	for round := 0; ; round++ {
		var points []string
		for _, m := range mounts() {
			if m.point == root || strings.HasPrefix(m.point, root+"/") {
				points = append(points, m.point)
			}
		}
		if len(points) == 0 {
			return nil
		}
		if round == 5 {
			return fmt.Errorf("still mounted under %s: %v", root, points)
		}
		slices.Reverse(points)
		for _, p := range points {
			if err := unmount(p, round > 0); err != nil {
				fmt.Fprintf(log, "unmount %s: %v\n", p, err)
			} else {
				fmt.Fprintf(log, "unmounted %s\n", p)
			}
		}
	}
}

// removeCgroups removes the kubepods cgroups of every hierarchy, deepest first. A cgroup whose last
// process has just exited may still be busy for a moment, so it is retried.
func removeCgroups(log io.Writer) error {
	var left []string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		left = nil
		for _, d := range kubepodsDirs() {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				left = append(left, d)
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("kubepods cgroups left: %v", left)
	}
	fmt.Fprintln(log, "kubepods cgroups removed")
	return nil
}

// ours reports whether an iptables chain is one a real node adds: KUBE-* (kubelet, kube-proxy) and
// CNI-* (bridge and portmap plugins).
func ours(chain string) bool {
	return strings.HasPrefix(chain, "KUBE-") || strings.HasPrefix(chain, "CNI-")
}

// cleanIptables removes the KUBE-* and CNI-* chains of every table, IPv4 and IPv6, and the rules of
// other chains that jump to them, with one iptables-restore --noflush per family.
func cleanIptables(log io.Writer) error {
	var errs []error
	for _, fam := range []string{"iptables", "ip6tables"} {
		saved, err := run(fam + "-save")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		script := iptablesCleanupScript(saved)
		if script == "" {
			continue
		}
		fmt.Fprintf(log, "%s-restore --noflush:\n%s", fam, script)
		if _, err := runInput(script, fam+"-restore", "--noflush"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// iptablesCleanupScript turns iptables-save output into an iptables-restore --noflush script that
// deletes the rules jumping to our chains from other chains, then flushes and deletes our chains. It
// is "" when there is nothing of ours.
func iptablesCleanupScript(saved string) string {
	var b strings.Builder
	var table string
	var deletes, chains []string
	flush := func() {
		if table == "" || (len(deletes) == 0 && len(chains) == 0) {
			return
		}
		b.WriteString("*" + table + "\n")
		for _, d := range deletes {
			b.WriteString(d + "\n")
		}
		for _, c := range chains {
			b.WriteString("-F " + c + "\n")
		}
		for _, c := range chains {
			b.WriteString("-X " + c + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	for _, line := range strings.Split(saved, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table, deletes, chains = line[1:], nil, nil
		case line == "COMMIT":
			flush()
			table = ""
		case strings.HasPrefix(line, ":"):
			if name, _, _ := strings.Cut(line[1:], " "); ours(name) {
				chains = append(chains, name)
			}
		case strings.HasPrefix(line, "-A "):
			fields := strings.Fields(line)
			if ours(fields[1]) {
				continue // flushed with its chain
			}
			for i := 2; i+1 < len(fields); i++ {
				if (fields[i] == "-j" || fields[i] == "-g" || fields[i] == "--jump" || fields[i] == "--goto") && ours(fields[i+1]) {
					deletes = append(deletes, "-D "+strings.TrimPrefix(line, "-A "))
					break
				}
			}
		}
	}
	return b.String()
}

// deleteNewNftTables deletes the nftables tables that did not exist before Start and are empty now
// (iptables-nft creates a table with its base chains on first use and never removes it).
func deleteNewNftTables(log io.Writer, before []string) error {
	var errs []error
	for _, t := range nftTables() {
		if slices.Contains(before, t) || strings.HasPrefix(t, "nft:") {
			continue
		}
		family, name, _ := strings.Cut(t, " ")
		out, err := run("nft", "list", "table", family, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !nftTableEmpty(out) {
			fmt.Fprintf(log, "nft table %s is not empty, left alone:\n%s", t, out)
			continue
		}
		if _, err := run("nft", "delete", "table", family, name); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(log, "deleted empty nft table %s\n", t)
	}
	return errors.Join(errs...)
}

// nftTableEmpty reports whether `nft list table` output shows nothing but base chains without rules.
func nftTableEmpty(listing string) bool {
	for _, line := range strings.Split(listing, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "", line == "}", strings.HasPrefix(line, "table "), strings.HasPrefix(line, "type "):
		case strings.HasPrefix(line, "chain "):
			name := strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(line, "chain ")), " {")
			if !builtinChains[name] {
				return false
			}
		default:
			return false
		}
	}
	return true
}

var builtinChains = map[string]bool{"INPUT": true, "OUTPUT": true, "FORWARD": true, "PREROUTING": true, "POSTROUTING": true}

// deleteBridge deletes the CNI bridge.
func deleteBridge(log io.Writer) error {
	if _, err := net.InterfaceByName(BridgeName); err != nil {
		return nil
	}
	if _, err := run("ip", "link", "delete", BridgeName); err != nil {
		return err
	}
	fmt.Fprintf(log, "deleted bridge %s\n", BridgeName)
	return nil
}

// waitLinks waits a little for the pods' veth interfaces to go: the kernel removes them with their
// network namespaces, asynchronously.
func waitLinks(log io.Writer, before []string) {
	var extra []string
	_ = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, extra = multisetDiff(before, linkList())
		return len(extra) == 0, nil
	})
	if len(extra) > 0 {
		fmt.Fprintf(log, "links still there: %v\n", extra)
	}
}

// restoreSysctls writes back the sysctls Start saved where they differ now: the fixed ones in the order
// of sysctls (net.ipv4.ip_forward before what it changes), then the interfaces'. A second pass catches
// what a write changed again; an interface that is gone is no error.
func restoreSysctls(log io.Writer, saved map[string]string) error {
	order := slices.Clone(sysctls)
	var rest []string
	for name := range saved {
		if !slices.Contains(order, name) {
			rest = append(rest, name)
		}
	}
	sort.Strings(rest)
	order = append(order, rest...)
	var errs []error
	for pass := 0; pass < 2; pass++ {
		errs = nil
		for _, name := range order {
			want, ok := saved[name]
			raw, err := os.ReadFile(sysctlPath(name))
			have := strings.TrimSpace(string(raw))
			if !ok || err != nil || have == want {
				continue
			}
			if err := os.WriteFile(sysctlPath(name), []byte(want), 0o644); err != nil {
				if !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, fmt.Errorf("restore sysctl %s=%s: %w", name, want, err))
				}
				continue
			}
			fmt.Fprintf(log, "restored sysctl %s: %s -> %s\n", name, have, want)
		}
	}
	return errors.Join(errs...)
}

// removeNewHostPaths removes the host paths that did not exist before Start. Another container runtime
// on the host may have come to use them meanwhile (containerd's and CNI's default dirs are shared by
// every containerd): while one runs, they are left alone.
func removeNewHostPaths(log io.Writer, before []string) error {
	var errs []error
	runtimes := otherRuntimes()
	for _, p := range existingPaths() {
		if slices.Contains(before, p) {
			continue
		}
		if len(runtimes) > 0 && !kubeletPaths[p] {
			fmt.Fprintf(log, "left %s alone: another container runtime runs: %s\n", p, strings.Join(runtimes, "; "))
			continue
		}
		if err := unmountUnder(log, p); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(log, "removed %s\n", p)
	}
	return errors.Join(errs...)
}
