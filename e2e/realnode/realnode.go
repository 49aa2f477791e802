// Package realnode runs one real Kubernetes node, statefulops-real-0, beside the kwok nodes of the local
// cluster: containerd (with runc and the CNI plugins of the host's packages), the kubelet and kube-proxy,
// started and stopped by PID, with every file under <state dir>/realnode/. Pods that select the node's
// label and tolerate its taint run as real containers: logs, exec, probes, SIGTERM on delete, Services.
//
// A real node changes the host, and Stop and Cleanup undo every change: the kubelet and the CNI bridge
// set sysctls (saved before start, restored after), the kubelet bind-mounts its root dir and creates
// kubepods cgroups in every hierarchy, the kubelet and kube-proxy add iptables chains, the bridge plugin
// adds an interface, and containerd, its shims and the containers are processes. HostState takes a
// snapshot of all of that, so a caller can prove the host is as it was.
//
// Only one real node can run on a host: the kubelet's ports (10250, 10248), kube-proxy's (10249, 10256)
// and the kubepods cgroups are fixed. Start, Stop and Cleanup need root on Linux; Available says
// whether the machine can run the node at all.
//
// Layout of <state dir>/realnode/:
//
//	pids/         pid files of containerd, kubelet, kube-proxy
//	logs/         their logs, the image imports and teardown; kept after Stop until the next Start
//	              (the run before keeps its logs in logs.previous/)
//	host/         the host as it was before Start (HostSnapshot: sysctls to restore, nft tables and
//	              host paths that existed) and the kube-proxy binary for `kube-proxy --cleanup`
//	containerd/   containerd's config, socket, root and state (images, snapshots, task mounts, netns)
//	runc/         runc's state
//	cni/          the CNI network config and the host-local IPAM state
//	kubelet/      the kubelet's root dir (pod volumes); pki/ the cluster CA and the kubelet's serving
//	              certificate; pod-logs/ the container logs
//	records/      a world-writable dir pods may mount as hostPath to leave records for the tests
//	*.yaml, *.kubeconfig  the kubelet's and kube-proxy's configuration and credentials, and the
//	              cluster's admin kubeconfig Stop deletes the Node object with
package realnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The node's identity: its name, and the label and NoSchedule taint that keep every pod off it unless
// the pod selects the label and tolerates the taint.
const (
	// NodeName is the name of the real node.
	NodeName = "statefulops-real-0"
	// LabelKey=LabelValue is the real node's label, and TaintKey=LabelValue:NoSchedule its taint.
	LabelKey = "statefulops.dev/node"
	// LabelValue is the value of the real node's label and taint.
	LabelValue = "real"
	// TaintKey is the key of the real node's NoSchedule taint.
	TaintKey = LabelKey
)

// PodCIDR is the private /24 the CNI bridge hands pod IPs out of; BridgeName is the bridge interface.
const (
	PodCIDR    = "10.88.0.0/24"
	BridgeName = "statefulops0"
	// GatewayIP is the bridge's address on the host (the pods' gateway): a server on the host that
	// listens there is reached by the host's processes (containerd) and by the pods alike.
	GatewayIP = "10.88.0.1"
)

// SandboxImage is the pod sandbox image containerd runs (our pause program); it must be among the
// imported image tarballs.
const SandboxImage = "statefulops/pause:v0.1.0"

// Options say where the node keeps its state, which cluster it joins and what it runs.
type Options struct {
	// StateDir is the local cluster's state dir; the node keeps everything in <StateDir>/realnode.
	StateDir string
	// KubeBin is the directory with kubelet and kube-proxy.
	KubeBin string
	// ImagesDir holds image tarballs (docker-save layout); every *.tar is imported into containerd, and
	// pause.tar must be there.
	ImagesDir string
	// Kubeconfig is an admin kubeconfig of the cluster: its server address and CA are the node's.
	Kubeconfig string
	// CACert and CAKey are the cluster CA's PEM files: they sign the kubelet's and kube-proxy's client
	// certificates, and the kubelet trusts client certificates signed by CACert (the API server's).
	CACert, CAKey string
	// LocalOnlyCIDRs are the cluster's virtual address ranges (Service ClusterIPs, kwok's pretend pod
	// and node addresses): they are routed to the pod bridge while the node runs, so no packet to them
	// leaves the machine.
	LocalOnlyCIDRs []string
	// ClusterDNS is the cluster DNS's address (a Service ClusterIP) the kubelet gives pods as their
	// nameserver, with ClusterDomain as their search domain's base; "" leaves pods the host's resolv.conf.
	ClusterDNS    string
	ClusterDomain string
	// Log receives one line per step. Default: discarded.
	Log io.Writer
}

// Node is a started real node.
type Node struct {
	// HostBefore is the host as it was before Start changed anything (after the leftovers of an
	// earlier run were cleaned up).
	HostBefore HostSnapshot
	// Setup is the time from starting containerd to the node Ready with kube-proxy serving.
	Setup time.Duration
}

// dir returns <stateDir>/realnode.
func dir(stateDir string) string { return filepath.Join(stateDir, "realnode") }

// RecordDir returns the world-writable directory pods on the real node may mount as a hostPath volume
// to leave records (the test app's JSON lines) for the tests on the host. Start creates it empty.
func RecordDir(stateDir string) string { return filepath.Join(dir(stateDir), "records") }

// LogDir returns the directory with the logs of the node's daemons, kept after Stop until the next Start.
func LogDir(stateDir string) string { return filepath.Join(dir(stateDir), "logs") }

// Available reports why this machine cannot run the real node, or nil when it can: Linux, root, the
// host packages (containerd, runc, ctr, iptables, ip, CNI plugins), kubelet and kube-proxy in KubeBin,
// the pause image in ImagesDir, cgroups, and no other kubelet running on the host.
func Available(opts Options) error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("needs Linux, this is %s", runtime.GOOS)
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root (containers, mounts, cgroups, iptables)")
	}
	var missing []string
	for _, name := range hostCommands {
		if _, err := lookPath(name); err != nil {
			missing = append(missing, name)
		}
	}
	for _, name := range cniPlugins {
		if _, err := os.Stat(filepath.Join(cniBinDir, name)); err != nil {
			missing = append(missing, filepath.Join(cniBinDir, name))
		}
	}
	for _, name := range []string{"kubelet", "kube-proxy"} {
		if _, err := os.Stat(filepath.Join(opts.KubeBin, name)); err != nil {
			missing = append(missing, filepath.Join(opts.KubeBin, name))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s (the Makefile installs the host packages and builds kubelet and kube-proxy)", strings.Join(missing, ", "))
	}
	if opts.ImagesDir == "" {
		return errors.New("no images dir (set STATEFULOPS_IMAGES)")
	}
	if _, err := os.Stat(filepath.Join(opts.ImagesDir, "pause.tar")); err != nil {
		return fmt.Errorf("no pause image %s (make images builds it)", filepath.Join(opts.ImagesDir, "pause.tar"))
	}
	if len(cgroupMounts()) == 0 {
		return errors.New("no cgroup file system mounted")
	}
	if others := foreignNodeProcesses(newLayout(opts.StateDir).root); len(others) > 0 {
		return fmt.Errorf("another kubelet or real node runs on this host (only one fits): %s", strings.Join(others, "; "))
	}
	return nil
}

// Start brings the real node up and returns once it is Ready and kube-proxy serves. The leftovers of
// an earlier run in the same state dir (processes, mounts, cgroups, iptables chains, sysctls, a
// half-written state dir), and of a killed run in another one (cleanupStray), are cleaned up first;
// what that cleanup cannot undo is logged, and only fails Start if the node then cannot start. When
// Start fails it leaves nothing running.
func Start(ctx context.Context, opts Options) (*Node, error) {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if err := Available(opts); err != nil {
		return nil, err
	}
	l := newLayout(opts.StateDir)
	if err := Cleanup(opts.StateDir); err != nil {
		fmt.Fprintf(opts.Log, "realnode: the cleanup of an earlier run left this (continuing; see %s): %v\n", l.logFile("teardown"), err)
	}
	if err := cleanupStray(opts.Log, opts.StateDir); err != nil {
		fmt.Fprintf(opts.Log, "realnode: the cleanup of a killed run of another state dir left this (continuing): %v\n", err)
	}
	if err := l.reset(); err != nil {
		return nil, err
	}
	before := HostState()
	if err := saveHost(l, before); err != nil {
		return nil, err
	}
	n := &Node{HostBefore: before}
	setup, err := start(ctx, opts, l)
	if err != nil {
		// Leave nothing half-started behind; the start error is the one that matters.
		if cerr := Cleanup(opts.StateDir); cerr != nil {
			err = fmt.Errorf("%w (and the cleanup after it: %v)", err, cerr)
		}
		return nil, fmt.Errorf("real node: %w (logs in %s)", err, l.logs())
	}
	n.Setup = setup
	return n, nil
}

// start writes the configuration and starts the daemons; it returns the time from starting
// containerd to the node Ready with kube-proxy serving.
func start(ctx context.Context, opts Options, l layout) (time.Duration, error) {
	logf := func(format string, args ...any) { fmt.Fprintf(opts.Log, "realnode: "+format+"\n", args...) }
	cluster, err := readCluster(opts)
	if err != nil {
		return 0, err
	}
	nodeIP, err := hostIP()
	if err != nil {
		return 0, err
	}
	if err := writeConfigs(l, opts, cluster, nodeIP); err != nil {
		return 0, err
	}

	if err := ensureLocalOnlyRoutes(opts.Log, opts.LocalOnlyCIDRs); err != nil {
		return 0, err
	}
	started := time.Now()
	phase := time.Now()
	if err := startContainerd(ctx, l); err != nil {
		return 0, err
	}
	logf("containerd serving in %s", time.Since(phase).Round(time.Millisecond))

	// The images are imported while the kubelet and kube-proxy start: no pod runs before Start returns.
	type importResult struct {
		images []string
		took   time.Duration
		err    error
	}
	imported := make(chan importResult, 1)
	go func() {
		start := time.Now()
		images, err := importImages(ctx, l, opts.ImagesDir)
		imported <- importResult{images, time.Since(start), err}
	}()

	phase = time.Now()
	if _, err := startDaemon(l, "kubelet", filepath.Join(opts.KubeBin, "kubelet"), kubeletArgs(l, nodeIP)...); err != nil {
		return 0, err
	}
	client, err := kubernetes.NewForConfig(cluster.admin)
	if err != nil {
		return 0, err
	}
	if err := waitNodeReady(ctx, client, l, phase); err != nil {
		return 0, err
	}
	logf("node %s (%s) Ready %s after the kubelet started", NodeName, nodeIP, time.Since(phase).Round(time.Millisecond))

	phase = time.Now()
	if _, err := startDaemon(l, "kube-proxy", filepath.Join(opts.KubeBin, "kube-proxy"), "--config="+l.kubeProxyConfig(), "--v=1"); err != nil {
		return 0, err
	}
	if err := waitHTTP(ctx, "kube-proxy", "http://"+kubeProxyHealthz+"/healthz", l); err != nil {
		return 0, err
	}
	logf("kube-proxy serving in %s", time.Since(phase).Round(time.Millisecond))
	r := <-imported
	if r.err != nil {
		return 0, r.err
	}
	setup := time.Since(started)
	logf("imported %d images from %s in %s; real node up in %s", len(r.images), opts.ImagesDir, r.took.Round(time.Millisecond), setup.Round(time.Millisecond))
	return setup, nil
}

// Running reports whether the real node kept in stateDir runs: containerd, the kubelet and kube-proxy
// alive, and the node Ready.
func Running(ctx context.Context, stateDir, kubeconfig string) bool {
	l := newLayout(stateDir)
	for _, name := range daemons {
		if _, ok := l.runningPID(name); !ok {
			return false
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return false
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	node, err := client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	return err == nil && nodeReady(node)
}

// ImportImages imports every image tarball of opts.ImagesDir into the running real node's containerd
// again, so that a node reused across `make images` runs the images just built (their tags stay the
// same). It returns the tarballs' names.
func ImportImages(ctx context.Context, opts Options) ([]string, error) {
	l := newLayout(opts.StateDir)
	if _, ok := l.runningPID("containerd"); !ok {
		return nil, errors.New("the real node's containerd does not run")
	}
	return importImages(ctx, l, opts.ImagesDir)
}

// TrustRegistry lets the real node's containerd pull from the registry at host (host:port) over
// plain HTTP, as a cluster's nodes pull from an internal registry; containerd reads the hosts file at
// each pull, so it needs no restart.
func TrustRegistry(stateDir, host string) error {
	d := filepath.Join(newLayout(stateDir).registryHosts(), host)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	hosts := fmt.Sprintf("server = %[1]q\n\n[host.%[1]q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+host)
	return os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(hosts), 0o644)
}

// DaemonPIDs returns the PIDs of the real node's running daemons (containerd, kubelet, kube-proxy)
// by name, from their pid files.
func DaemonPIDs(stateDir string) map[string]int {
	l := newLayout(stateDir)
	pids := map[string]int{}
	for _, name := range daemons {
		if pid, ok := l.runningPID(name); ok {
			pids[name] = pid
		}
	}
	return pids
}

// Stop takes the real node kept in stateDir down and undoes its changes to the host: it deletes the
// Node object (when the API server still answers), stops kube-proxy (then `kube-proxy --cleanup`), the
// kubelet, the containers, the containerd shims and containerd by PID (SIGTERM first, in reverse order
// of start), and then cleans the host up as Cleanup does. The logs stay in LogDir. It is a no-op when
// there is no real node in stateDir.
func Stop(ctx context.Context, stateDir string) error {
	l := newLayout(stateDir)
	if !l.exists() {
		return nil
	}
	tl := l.teardownLog()
	defer tl.Close()
	if _, err := os.Stat(l.adminKubeconfig()); err == nil {
		deleteNode(ctx, l, tl)
	}
	return cleanup(l, tl, 10*time.Second)
}

// Cleanup stops whatever a real node left in stateDir and undoes its changes to the host, whether it
// was stopped, killed or half-started: processes (by PID, SIGTERM first), mounts under the state dir,
// kubepods cgroups, the KUBE-* and CNI-* iptables chains and the nft tables they needed, the CNI
// bridge, the sysctls saved before start, and the host paths it created. Everything under
// <stateDir>/realnode but the logs is removed. It is a no-op when there is no real node in stateDir.
func Cleanup(stateDir string) error {
	l := newLayout(stateDir)
	if !l.exists() {
		return nil
	}
	tl := l.teardownLog()
	defer tl.Close()
	return cleanup(l, tl, 5*time.Second)
}

// deleteNode deletes the Node object, so that the cluster does not keep a NotReady node; an API server
// that is gone is no error.
func deleteNode(ctx context.Context, l layout, log io.Writer) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.adminKubeconfig())
	if err != nil {
		return
	}
	cfg.Timeout = 5 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = client.CoreV1().Nodes().Delete(ctx, NodeName, metav1.DeleteOptions{})
	switch {
	case err == nil:
		fmt.Fprintf(log, "deleted node %s\n", NodeName)
	case apierrors.IsNotFound(err):
	default:
		fmt.Fprintf(log, "delete node %s (ignored): %v\n", NodeName, err)
	}
}

// waitNodeReady waits until the kubelet started at since reports the node Ready: a Ready condition
// heartbeat from before is the report of a kubelet that was killed (its Node object outlives it).
func waitNodeReady(ctx context.Context, client kubernetes.Interface, l layout, since time.Time) error {
	since = since.Truncate(time.Second) // the API keeps whole seconds
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if _, ok := l.runningPID("kubelet"); !ok {
			return false, errors.New("the kubelet exited")
		}
		node, err := client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		switch {
		case err != nil:
			last = err.Error()
			return false, nil
		case !nodeReady(node):
			last = "node not Ready: " + readyMessage(node)
			return false, nil
		case readyHeartbeat(node).Before(since):
			last = "Ready reported by an earlier kubelet"
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for node %s to become Ready: %w (last: %s); kubelet log:\n%s", NodeName, err, last, tailFile(l.logFile("kubelet"), 3000))
	}
	return nil
}

// waitHTTP waits until url answers 200.
func waitHTTP(ctx context.Context, name, url string, l layout) error {
	client := newLocalHTTPClient()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if _, ok := l.runningPID(name); !ok {
			return false, fmt.Errorf("%s exited", name)
		}
		status, err := httpGet(ctx, client, url)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = status
		return status == "200 OK", nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s at %s: %w (last: %s); log:\n%s", name, url, err, last, tailFile(l.logFile(name), 3000))
	}
	return nil
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func readyHeartbeat(node *corev1.Node) time.Time {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.LastHeartbeatTime.Time
		}
	}
	return time.Time{}
}

func readyMessage(node *corev1.Node) string {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Reason + ": " + c.Message
		}
	}
	return "no Ready condition yet"
}

// hostIP returns the host's address for the node: the first IPv4 address of the interface of the
// default route (the hostname may resolve to 127.0.0.1), else of any other non-loopback interface.
func hostIP() (net.IP, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	first := defaultRouteInterface()
	for pass := 0; pass < 2; pass++ {
		for _, iface := range ifaces {
			if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 || iface.Name == BridgeName {
				continue
			}
			if pass == 0 && iface.Name != first {
				continue
			}
			addrs, err := iface.Addrs()
			if err != nil {
				continue
			}
			for _, a := range addrs {
				if ipnet, ok := a.(*net.IPNet); ok && ipnet.IP.To4() != nil && !ipnet.IP.IsLinkLocalUnicast() {
					return ipnet.IP.To4(), nil
				}
			}
		}
	}
	return nil, errors.New("no non-loopback IPv4 address on this host")
}

// defaultRouteInterface returns the interface of the IPv4 default route, "" when there is none.
func defaultRouteInterface() string {
	raw, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(raw), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 2 && f[1] == "00000000" {
			return f[0]
		}
	}
	return ""
}

// lookPath finds a host command also in the sbin directories, which a non-login PATH may lack.
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
