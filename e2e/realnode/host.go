package realnode

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// sysctls are the kernel settings a real node changes or may change: the kubelet's kernel tunables
// (vm.overcommit_memory, vm.panic_on_oom, kernel.panic, kernel.panic_on_oops, kernel.keys.*), the
// bridge plugin's forwarding (net.ipv4.ip_forward, which also sets every interface's forwarding and
// conf.all.accept_redirects), and what kube-proxy may touch (route_localnet, bridge netfilter,
// conntrack; its configuration asks it to leave them alone). Besides these, every interface's
// net.ipv4.conf.<if>.forwarding is included. Start saves them and teardown restores them, in this
// order: net.ipv4.ip_forward first, as writing it changes the others.
var sysctls = []string{
	"vm.overcommit_memory",
	"vm.panic_on_oom",
	"kernel.panic",
	"kernel.panic_on_oops",
	"kernel.keys.root_maxkeys",
	"kernel.keys.root_maxbytes",
	"net.ipv4.ip_forward",
	"net.ipv4.conf.all.accept_redirects",
	"net.ipv4.conf.all.forwarding",
	"net.ipv4.conf.default.forwarding",
	"net.ipv6.conf.all.forwarding",
	"net.ipv6.conf.default.forwarding",
	"net.ipv4.conf.all.route_localnet",
	"net.bridge.bridge-nf-call-iptables",
	"net.bridge.bridge-nf-call-ip6tables",
	"net.netfilter.nf_conntrack_max",
	"net.netfilter.nf_conntrack_tcp_timeout_established",
	"net.netfilter.nf_conntrack_tcp_timeout_close_wait",
	"net.netfilter.nf_conntrack_tcp_be_liberal",
	"net.netfilter.nf_conntrack_udp_timeout",
	"net.netfilter.nf_conntrack_udp_timeout_stream",
}

// hostPaths are paths outside the state dir that the node's programs create whatever their
// configuration: the kubelet's device-plugins dir and container log links, the CNI result cache,
// containerd 1.6's shim sockets. Those that did not exist before Start are removed by teardown.
var hostPaths = []string{
	"/var/lib/kubelet",
	"/var/lib/cni",
	"/var/lib/containerd",
	"/run/containerd",
	"/run/netns",
	"/var/log/containers",
	"/var/log/pods",
	"/etc/cni",
	"/opt/cni",
	"/opt/containerd",
	"/etc/kubernetes",
}

// kubeletPaths are the hostPaths only a kubelet uses (and only one kubelet runs per host).
var kubeletPaths = map[string]bool{"/var/lib/kubelet": true, "/var/log/containers": true, "/var/log/pods": true, "/etc/kubernetes": true}

// HostSnapshot is what a real node can change on the host, as it is at one moment. Each list is sorted.
// It leaves out what other programs change at the same time (another containerd's mounts, cgroups and
// processes): a real node's processes and mounts are recognised by the realnode dir in their paths.
type HostSnapshot struct {
	// Processes are the processes of a real node: kubelets, kube-proxies, anything started from or
	// naming a realnode dir (containerd, its shims, runc), and everything in kubepods cgroups.
	Processes []string `json:"processes"`
	// Mounts are the mount points (and file system types) in a realnode dir, the kubelet's default root
	// dir or the default network namespace dirs.
	Mounts []string `json:"mounts"`
	// Cgroups are the kubepods cgroups of every hierarchy.
	Cgroups []string `json:"cgroups"`
	// Iptables are the rules and chains of every table, IPv4 and IPv6, without counters.
	Iptables []string `json:"iptables"`
	// NftTables are the nftables tables (iptables-nft keeps its tables there).
	NftTables []string `json:"nftTables"`
	// Sysctls are the values of the sysctls a real node changes.
	Sysctls map[string]string `json:"sysctls"`
	// Links are the network interfaces of the host, Routes its IPv4 and IPv6 routes.
	Links  []string `json:"links"`
	Routes []string `json:"routes"`
	// Paths are those of the host paths the node's programs create that exist.
	Paths []string `json:"paths"`
}

// HostState takes a snapshot of everything a real node may change on the host.
func HostState() HostSnapshot {
	return HostSnapshot{
		Processes: nodeProcessList(),
		Mounts:    mountList(),
		Cgroups:   cgroupList(),
		Iptables:  iptablesList(),
		NftTables: nftTables(),
		Sysctls:   readSysctls(),
		Links:     linkList(),
		Routes:    routeList(),
		Paths:     existingPaths(),
	}
}

// Diff lists what differs from before to after, one line per difference: "+ what: item" for what is
// new in after, "- what: item" for what is gone, and "~ sysctl name: before -> after". Empty means the
// host is as it was.
func (before HostSnapshot) Diff(after HostSnapshot) []string {
	var diff []string
	lists := []struct {
		what      string
		old, next []string
	}{
		{"process", before.Processes, after.Processes},
		{"mount", before.Mounts, after.Mounts},
		{"cgroup", before.Cgroups, after.Cgroups},
		{"iptables", before.Iptables, after.Iptables},
		{"nft table", before.NftTables, after.NftTables},
		{"link", before.Links, after.Links},
		{"route", before.Routes, after.Routes},
		{"path", before.Paths, after.Paths},
	}
	for _, l := range lists {
		gone, added := multisetDiff(l.old, l.next)
		for _, s := range added {
			diff = append(diff, "+ "+l.what+": "+s)
		}
		for _, s := range gone {
			diff = append(diff, "- "+l.what+": "+s)
		}
	}
	var names []string
	for name := range before.Sysctls {
		names = append(names, name)
	}
	for name := range after.Sysctls {
		if _, ok := before.Sysctls[name]; !ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		if b, a := before.Sysctls[name], after.Sysctls[name]; a != b {
			diff = append(diff, fmt.Sprintf("~ sysctl %s: %q -> %q", name, b, a))
		}
	}
	return diff
}

// multisetDiff returns the items of a missing from b and of b missing from a, counting duplicates.
func multisetDiff(a, b []string) (gone, added []string) {
	count := map[string]int{}
	for _, s := range a {
		count[s]++
	}
	for _, s := range b {
		count[s]--
	}
	for s, n := range count {
		for ; n > 0; n-- {
			gone = append(gone, s)
		}
		for ; n < 0; n++ {
			added = append(added, s)
		}
	}
	sort.Strings(gone)
	sort.Strings(added)
	return gone, added
}

// nodeProcessList lists the processes a real node runs, without PIDs' churn hiding anything: each
// entry is "<pid> <comm>: <argv>".
func nodeProcessList() []string {
	inKubepods := map[int]bool{}
	for _, pid := range kubepodsPIDs() {
		inKubepods[pid] = true
	}
	var list []string
	for _, p := range processes() {
		if nodeCommands[p.comm] || (nodeProgram(p.comm) && p.mentions("/realnode")) || inKubepods[p.pid] {
			list = append(list, p.String())
		}
	}
	sort.Strings(list)
	return list
}

// runtimeCommands are container runtimes that use containerd's and CNI's default host dirs.
var runtimeCommands = map[string]bool{"containerd": true, "dockerd": true, "crio": true, "podman": true}

// otherRuntimes describes the container runtimes running on the host that are not a real node's.
func otherRuntimes() []string {
	var list []string
	for _, p := range processes() {
		if runtimeCommands[p.comm] && !p.mentions("/realnode") {
			list = append(list, p.String())
		}
	}
	return list
}

// mountInfo is one line of /proc/self/mountinfo.
type mountInfo struct {
	point, fstype string
}

func mounts() []mountInfo {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var list []mountInfo
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		// id parent major:minor root mount-point options [optional fields...] - fstype source super-options
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		m := mountInfo{point: unescapeMount(fields[4])}
		for i, f := range fields {
			if f == "-" && i+1 < len(fields) {
				m.fstype = fields[i+1]
				break
			}
		}
		list = append(list, m)
	}
	return list
}

// unescapeMount undoes the octal escapes (\040 for a space) of mountinfo paths.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountDirs are where a real node's mounts may be: the kubelet's default root dir and the network
// namespace dirs, besides the realnode dirs.
var mountDirs = []string{"/var/lib/kubelet", "/run/netns", "/var/run/netns"}

func mountList() []string {
	var list []string
	for _, m := range mounts() {
		ours := strings.Contains(m.point+"/", "/realnode/")
		for _, d := range mountDirs {
			ours = ours || m.point == d || strings.HasPrefix(m.point, d+"/")
		}
		if ours {
			list = append(list, m.point+" ("+m.fstype+")")
		}
	}
	sort.Strings(list)
	return list
}

// cgroupMounts returns the mount points of the cgroup hierarchies (v1 and v2).
func cgroupMounts() []string {
	var list []string
	for _, m := range mounts() {
		if m.fstype == "cgroup" || m.fstype == "cgroup2" {
			list = append(list, m.point)
		}
	}
	return list
}

// kubepodsDirs returns the kubepods cgroups of every hierarchy, deepest first.
func kubepodsDirs() []string {
	var dirs []string
	for _, root := range cgroupMounts() {
		tops, _ := filepath.Glob(filepath.Join(root, "kubepods*"))
		for _, top := range tops {
			_ = filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, path)
				}
				return nil
			})
		}
	}
	sort.Slice(dirs, func(i, j int) bool {
		if di, dj := strings.Count(dirs[i], "/"), strings.Count(dirs[j], "/"); di != dj {
			return di > dj
		}
		return dirs[i] < dirs[j]
	})
	return dirs
}

// kubepodsPIDs returns the processes in kubepods cgroups: the containers of a real node.
func kubepodsPIDs() []int {
	var pids []int
	for _, d := range kubepodsDirs() {
		raw, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(raw)) {
			var pid int
			if _, err := fmt.Sscan(f, &pid); err == nil && pid > 0 {
				pids = append(pids, pid)
			}
		}
	}
	return uniqueInts(pids)
}

func cgroupList() []string {
	list := kubepodsDirs()
	sort.Strings(list)
	return list
}

func iptablesList() []string {
	var list []string
	for _, fam := range []string{"iptables", "ip6tables"} {
		out, err := run(fam + "-save")
		if err != nil {
			list = append(list, fam+": "+err.Error())
			continue
		}
		list = append(list, iptablesLines(fam, out)...)
	}
	sort.Strings(list)
	return list
}

// iptablesLines turns one family's iptables-save output into snapshot lines: each table, its chains
// (without counters) and its rules, prefixed with the family and table. A table that holds nothing of
// anyone's (only built-in chains with policy ACCEPT, no rule) is left out: the kernel creates such a
// table the first time any program lists it (kube-proxy does) and never removes it, so on a machine
// where nothing had used iptables yet it would read as a change the node left behind when it is not.
func iptablesLines(fam, save string) []string {
	var list, table []string
	empty := true
	flush := func() {
		if !empty {
			list = append(list, table...)
		}
		table, empty = nil, true
	}
	name := ""
	for _, line := range strings.Split(save, "\n") {
		switch {
		case line == "" || strings.HasPrefix(line, "#") || line == "COMMIT":
		case strings.HasPrefix(line, "*"):
			flush()
			name = line[1:]
			table = append(table, fam+" "+name)
		case strings.HasPrefix(line, ":"):
			// ":CHAIN POLICY [packets:bytes]": drop the counters.
			if i := strings.LastIndex(line, " ["); i > 0 {
				line = line[:i]
			}
			if !strings.HasSuffix(line, " ACCEPT") {
				empty = false // a chain of someone's own ("-"), or a built-in one with another policy
			}
			table = append(table, fam+" "+name+" "+line)
		default:
			empty = false
			table = append(table, fam+" "+name+" "+line)
		}
	}
	flush()
	return list
}

// nftTables lists the nftables tables ("ip filter", ...); nil without the nft command.
func nftTables() []string {
	if _, err := lookPath("nft"); err != nil {
		return nil
	}
	out, err := run("nft", "list", "tables")
	if err != nil {
		return []string{"nft: " + err.Error()}
	}
	var list []string
	for _, line := range strings.Split(out, "\n") {
		if t, ok := strings.CutPrefix(strings.TrimSpace(line), "table "); ok {
			list = append(list, t)
		}
	}
	sort.Strings(list)
	return list
}

func sysctlPath(name string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
}

// sysctlNames returns the sysctls a snapshot holds, in the order to restore them: the fixed list, then
// the forwarding of every interface there is now.
func sysctlNames() []string {
	names := slices.Clone(sysctls)
	ifaces, _ := os.ReadDir("/proc/sys/net/ipv4/conf")
	for _, i := range ifaces {
		if i.Name() != "all" && i.Name() != "default" && !strings.Contains(i.Name(), ".") {
			names = append(names, "net.ipv4.conf."+i.Name()+".forwarding")
		}
	}
	return names
}

func readSysctls() map[string]string {
	values := map[string]string{}
	for _, name := range sysctlNames() {
		raw, err := os.ReadFile(sysctlPath(name))
		if err == nil {
			values[name] = strings.TrimSpace(string(raw))
		}
	}
	return values
}

func linkList() []string {
	ifaces, _ := net.Interfaces()
	var list []string
	for _, iface := range ifaces {
		list = append(list, iface.Name)
	}
	sort.Strings(list)
	return list
}

func routeList() []string {
	var list []string
	for _, fam := range []string{"-4", "-6"} {
		out, err := run("ip", fam, "route", "show", "table", "all")
		if err != nil {
			list = append(list, "ip "+fam+" route: "+err.Error())
			continue
		}
		for _, line := range strings.Split(out, "\n") {
			// Routes learned from router advertisements count down their lifetime: "expires 1799sec".
			fields := strings.Fields(line)
			if i := slices.Index(fields, "expires"); i >= 0 && i+1 < len(fields) {
				fields = slices.Delete(fields, i, i+2)
			}
			if len(fields) > 0 {
				list = append(list, strings.Join(fields, " "))
			}
		}
	}
	sort.Strings(list)
	return list
}

func existingPaths() []string {
	var list []string
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); err == nil {
			list = append(list, p)
		}
	}
	return list
}

// saveHost records the host as it was before Start, for teardown: the sysctls to restore, the nft
// tables and host paths that existed, and the links. Written atomically: a crash leaves the whole
// file or none.
func saveHost(l layout, before HostSnapshot) error {
	raw, err := json.MarshalIndent(before, "", "  ")
	if err != nil {
		return err
	}
	tmp := l.host("before.json.tmp")
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, l.host("before.json"))
}

// savedHost returns the host as Start recorded it, if it did.
func savedHost(l layout) (HostSnapshot, bool) {
	var before HostSnapshot
	raw, err := os.ReadFile(l.host("before.json"))
	if err != nil || json.Unmarshal(raw, &before) != nil {
		return before, false
	}
	return before, true
}
