package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/statefulops/statefulops/e2e/localcluster/podreaper"
)

// Labels and annotations the kwok Stages and SetNodeReady agree on.
const (
	// NodeReadyLabel set to "false" on a kwok node takes it out of kwok's node selector: kwok stops
	// renewing its Lease and handling its pods, as if its kubelet had died (see SetNodeReady).
	NodeReadyLabel = "statefulops.dev/kwok-node-ready"
	// TerminatingSecondsAnnotation on a pod sets how long it stays Terminating once deleted (default 1s,
	// never longer than its grace period); the pod reaper removes it then (package podreaper).
	TerminatingSecondsAnnotation = podreaper.TerminatingSecondsAnnotation
	// ExitCodeAnnotation on a pod with restartPolicy Never/OnFailure makes it complete (stage pod-complete).
	ExitCodeAnnotation = "statefulops.dev/kwok-exit-code"
)

// kwokManagedNodes is kwok's node selector: only the nodes Up creates, and not while they are NotReady.
// A real kubelet node joining the cluster later is left alone.
const kwokManagedNodes = KwokNodeLabel + "=" + KwokNodeValue + "," + NodeReadyLabel + "!=false"

// kwokctl runs kwokctl for the cluster kept in one state dir.
type kwokctl struct {
	opts Options
	// dnsPort is the host port of the cluster DNS component (clusterDNSPort), set by Up.
	dnsPort int
}

func newKwokctl(opts Options) *kwokctl { return &kwokctl{opts: opts} }

// workdir is KWOK_WORKDIR: kwokctl keeps its clusters, and nothing else, there.
func (k *kwokctl) workdir() string { return filepath.Join(k.opts.StateDir, "kwok") }

// clusterDir is where kwokctl keeps this cluster: config, pki, etcd data, logs/ and pids/.
func (k *kwokctl) clusterDir() string { return filepath.Join(k.workdir(), "clusters", ClusterName) }

func (k *kwokctl) configPath() string { return filepath.Join(k.opts.StateDir, "kwokctl-config.yaml") }

func (k *kwokctl) logPath() string { return filepath.Join(k.opts.StateDir, "kwokctl.log") }

// keptLogsDir holds the component logs of the last cluster that was deleted.
func (k *kwokctl) keptLogsDir() string { return filepath.Join(k.opts.StateDir, "logs") }

func (k *kwokctl) exists() bool {
	_, err := os.Stat(k.clusterDir())
	return err == nil
}

// createArgs are the arguments of `kwokctl create cluster`. Every binary is a local path, so kwokctl
// downloads nothing; kubectl comes from the environment (see env).
func (k *kwokctl) createArgs() []string {
	kube := func(name string) string { return filepath.Join(k.opts.KubeBin, name) }
	return []string{
		"--name", ClusterName,
		"create", "cluster",
		"--runtime", "binary",
		"--config", k.configPath(),
		"--kubeconfig", kubeconfigPath(k.opts.StateDir),
		"--etcd-binary", kube("etcd"),
		"--kube-apiserver-binary", kube("kube-apiserver"),
		"--kube-controller-manager-binary", kube("kube-controller-manager"),
		"--kube-scheduler-binary", kube("kube-scheduler"),
		"--kwok-controller-binary", filepath.Join(k.opts.KwokBin, "kwok"),
		// Scales kwokctl's heartbeat defaults (node lease 40s, kube-controller-manager
		// --node-monitor-grace-period 40s and --node-monitor-period 5s) to 20s, 20s and 2.5s, so a
		// NotReady node is noticed within about 20s rather than 40s, with 4 lease renewals per grace period.
		"--heartbeat-factor", "0.5",
		"--quiet-pull",
		"--timeout", "5m",
		// kwokctl always passes --manage-all-nodes=true; the later flag wins.
		"--extra-args", "kwok-controller=manage-all-nodes=false",
		"--extra-args", "kwok-controller=manage-nodes-with-label-selector=" + kwokManagedNodes,
	}
}

// apiServerArgs are extra kube-apiserver flags (without "--"), for the real node (package realnode):
// harmless without it, so a cluster is the same either way. kwokctl already passes
// --authorization-mode=Node,RBAC, which authorizes the kubelet. They go into kwokctl's config file
// (componentsPatches), because kwokctl v0.8.0's --extra-args indexes its patches wrongly and panics
// when a second component gets more than one flag.
func (k *kwokctl) apiServerArgs() [][2]string {
	return [][2]string{
		// logs, exec and port-forward: the API server calls the kubelet with this client certificate
		// (kwokctl's admin, group system:masters), which the kubelet's webhook authorizer accepts.
		{"kubelet-client-certificate", filepath.Join(k.clusterDir(), "pki", "admin.crt")},
		{"kubelet-client-key", filepath.Join(k.clusterDir(), "pki", "admin.key")},
		// The kubelet registers under a name no DNS resolves: reach it by its InternalIP.
		{"kubelet-preferred-address-types", "InternalIP,Hostname,InternalDNS,ExternalDNS,ExternalIP"},
		// Explicit, and apart from kwok's fake pod IPs (10.0.0.0/24 by default, which is the API server's
		// default Service range too), as the real node's kube-proxy routes both.
		{"service-cluster-ip-range", serviceCIDR},
	}
}

// serviceCIDR is the Service ClusterIP range; kubernetesServiceIP, its first address, is the
// ClusterIP of the default/kubernetes Service, through which pods reach the API server.
const (
	serviceCIDR         = "10.96.0.0/12"
	kubernetesServiceIP = "10.96.0.1"
)

// kwokCIDR holds the pretend addresses kwok gives its pods (its default pod CIDR) and the kwok nodes'
// InternalIPs (see kwokNode): no process answers there.
const kwokCIDR = "10.0.0.0/24"

// env keeps kwokctl inside the state dir and on the local kubectl: kwokctl looks kubectl up in PATH
// and would otherwise download one.
func (k *kwokctl) env() []string {
	return append(os.Environ(),
		"KWOK_WORKDIR="+k.workdir(),
		"KWOK_KUBECTL_BINARY="+filepath.Join(k.opts.KubeBin, "kubectl"),
		"PATH="+k.opts.KubeBin+string(os.PathListSeparator)+os.Getenv("PATH"),
	)
}

func (k *kwokctl) commandLine() string {
	return "KWOK_WORKDIR=" + k.workdir() + " " + filepath.Join(k.opts.KwokBin, "kwokctl") + " " + strings.Join(k.createArgs(), " ")
}

// config is the file given to --config: kwokctl options the command line cannot give, and the Stage
// documents, which replace kwok's default stages entirely; headed by the command line so that a change
// of any marks a running cluster outdated.
func (k *kwokctl) config() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Written by localcluster for:\n# %s\n", k.commandLine())
	b.WriteString("---\napiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokctlConfiguration\n")
	// kwokctl has no flag for the API server certificate's names: pods on the real node reach the API
	// server at the kubernetes Service's ClusterIP and verify the certificate against it.
	fmt.Fprintf(&b, "options:\n  kubeApiserverCertSANs:\n  - %q\n", kubernetesServiceIP)
	b.WriteString("componentsPatches:\n- name: kube-apiserver\n  extraArgs:\n")
	for _, arg := range k.apiServerArgs() {
		fmt.Fprintf(&b, "  - key: %q\n    value: %q\n", arg[0], arg[1])
	}
	// The volume provisioner is a component of the cluster: kwokctl starts it with the others, records
	// its pid and log beside theirs, and stops it on delete.
	fmt.Fprintf(&b, "components:\n- name: %s\n  binary: %q\n  workDir: %q\n  args:\n", provisionerComponent, k.opts.ProvisionerBin, k.clusterDir())
	for _, arg := range k.provisionerArgs() {
		fmt.Fprintf(&b, "  - %q\n", arg)
	}
	// So is the cluster DNS (clusterdns.go).
	fmt.Fprintf(&b, "- name: %s\n  binary: %q\n  workDir: %q\n  args:\n", clusterDNSComponent, filepath.Join(k.opts.KubeBin, clusterDNSComponent), k.clusterDir())
	for _, arg := range k.clusterDNSArgs() {
		fmt.Fprintf(&b, "  - %q\n", arg)
	}
	b.Write(Stages())
	return b.Bytes()
}

func (k *kwokctl) sameConfig(want []byte) bool {
	have, err := os.ReadFile(k.configPath())
	return err == nil && bytes.Equal(have, want)
}

func (k *kwokctl) create(ctx context.Context, config []byte) error {
	if err := os.WriteFile(k.configPath(), config, 0o644); err != nil {
		return err
	}
	if err := k.run(ctx, k.createArgs()...); err != nil {
		return fmt.Errorf("kwokctl create cluster: %w", err)
	}
	return flattenKubeconfig(kubeconfigPath(k.opts.StateDir))
}

// flattenKubeconfig embeds the certificates the kubeconfig names by path. Besides making the file
// self-contained, this matters for clients: client-go caches transports by certificate file path, and
// a re-created cluster has new certificates at the same paths, so a process that talked to the old
// cluster would keep presenting and trusting the old ones.
func flattenKubeconfig(path string) error {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return err
	}
	if err := clientcmdapi.FlattenConfig(cfg); err != nil {
		return fmt.Errorf("flatten %s: %w", path, err)
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// run runs kwokctl with its output appended to kwokctl.log. A file rather than a pipe, because the
// processes kwokctl forks could inherit a pipe and keep it open.
func (k *kwokctl) run(ctx context.Context, args ...string) error {
	logFile, err := os.OpenFile(k.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	start, _ := logFile.Seek(0, io.SeekEnd)
	fmt.Fprintf(logFile, "### %s kwokctl %s\n", time.Now().Format(time.RFC3339), strings.Join(args, " "))

	cmd := exec.CommandContext(ctx, filepath.Join(k.opts.KwokBin, "kwokctl"), args...)
	cmd.Env = k.env()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Run(); err != nil {
		out, _ := os.ReadFile(k.logPath())
		if int(start) <= len(out) {
			out = out[start:]
		}
		return fmt.Errorf("%w (output in %s):\n%s", err, k.logPath(), tail(out, 2000))
	}
	return nil
}

// healthy reports whether every component kwokctl started is still running and the API server is ready.
func (k *kwokctl) healthy(ctx context.Context) bool {
	pids, err := clusterPIDs(k.clusterDir())
	if err != nil || len(pids) < len(components) {
		return false
	}
	for _, pid := range pids {
		if !alive(pid) {
			return false
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigPath(k.opts.StateDir))
	if err != nil {
		return false
	}
	return apiServerReady(ctx, cfg) == nil
}

// down deletes the cluster with kwokctl, then makes sure by PID that none of its processes survived
// (kwokctl may have been interrupted, or its pid files may be gone) and removes its state. The
// components' logs are kept in <state dir>/logs until the next down, for post-mortems.
func (k *kwokctl) down(ctx context.Context) error {
	var errs []error
	if k.exists() {
		if err := os.RemoveAll(k.keptLogsDir()); err != nil {
			errs = append(errs, err)
		}
		if err := os.Rename(filepath.Join(k.clusterDir(), "logs"), k.keptLogsDir()); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		if err := k.run(ctx, "--name", ClusterName, "delete", "cluster", "--kubeconfig", kubeconfigPath(k.opts.StateDir)); err != nil {
			errs = append(errs, fmt.Errorf("kwokctl delete cluster: %w", err))
		}
	}
	if err := killProcessesStartedFrom(ctx, k.clusterDir()); err != nil {
		errs = append(errs, err)
	}
	for _, path := range []string{k.workdir(), k.configPath(), kubeconfigPath(k.opts.StateDir)} {
		if err := os.RemoveAll(path); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// apiServerReady asks the API server's /readyz once.
func apiServerReady(ctx context.Context, cfg *rest.Config) error {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
