// Package localcluster brings a local Kubernetes cluster up and down for the e2e tests and `make run`:
// etcd, kube-apiserver, kube-controller-manager and kube-scheduler run as local processes started by
// `kwokctl create cluster --runtime binary` from binaries built beforehand (nothing is downloaded),
// and kwok simulates the nodes and the pod lifecycle with the honest Stages under stages/, all but the
// removal of a deleted pod, which local-provisioner's pod reaper does (package podreaper). Where the
// machine allows it, one real node (package realnode: containerd, kubelet, kube-proxy) joins beside
// the kwok nodes; kwok leaves it alone, and only pods that select and tolerate it run there: the pods
// of RealNodeNamespaces (the operators' namespaces) get both from a MutatingAdmissionPolicy of the
// cluster (steering.go). The default StorageClass "local" is served by local-provisioner, a component
// kwokctl runs beside the control plane, so every claim binds (provisioner.go); the cluster DNS
// (CoreDNS's kubernetes plugin, behind the kube-dns Service) is another (clusterdns.go).
//
// All state lives under one state dir (by default <repo>/.local): kwokctl's workdir in kwok/ (the
// running components' logs in kwok/clusters/statefulops/logs/), the kwokctl config in
// kwokctl-config.yaml, kwokctl's output in kwokctl.log, the admin kubeconfig in kubeconfig, and the
// component logs of the last deleted cluster in logs/, the real node in realnode/, the provisioned
// volumes in volumes/. Up reuses a healthy cluster and replaces a stale one; Down leaves no process
// running and the host as it was.
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/statefulops/statefulops/e2e/realnode"
)

// ClusterName is the kwokctl cluster name; kwokctl names the kubeconfig context "kwok-statefulops".
const ClusterName = "statefulops"

// DefaultNodes is the number of kwok nodes Up creates when Options.Nodes is 0: three, one per zone, so
// anti-affinity, drains and zone spreading can be exercised.
const DefaultNodes = 3

// Options says where the cluster lives and which binaries run it. The zero value is usable: every
// field has a default.
type Options struct {
	// StateDir holds everything the cluster writes. Default: <repo>/.local, where <repo> is the
	// nearest directory above the working directory that contains go.work.
	StateDir string
	// KubeBin is the directory with etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
	// kubectl and clusterdns (`make tools`). Default: $STATEFULOPS_KUBE_BIN, else $HOME/.cache/statefulops/kube-v1.36.3-etcd-v3.6.16
	// (the Makefile's pinned build).
	KubeBin string
	// KwokBin is the directory with kwok and kwokctl. Default: $STATEFULOPS_KWOK_BIN, else
	// $HOME/.cache/statefulops/kwok-v0.8.0.
	KwokBin string
	// Nodes is the number of kwok nodes (statefulops-kwok-0, -1, ...). Default: DefaultNodes.
	Nodes int
	// RealNode says whether the real node (realnode.NodeName) joins the cluster. Default: RealNodeAuto.
	RealNode RealNodeMode
	// ImagesDir holds the image tarballs the real node imports (pause.tar is its sandbox image).
	// Default: $STATEFULOPS_IMAGES, else $HOME/.cache/statefulops/images/v<VERSION of the repo>.
	ImagesDir string
	// ProvisionerBin is the local-provisioner binary (e2e/cmd/local-provisioner, built by `make build`)
	// that serves the default StorageClass. Default: $STATEFULOPS_BIN/local-provisioner.
	ProvisionerBin string
	// Log receives one line per step and kwokctl's output. Default: discarded.
	Log io.Writer
}

// RealNodeMode says whether the local cluster has a real node.
type RealNodeMode int

const (
	// RealNodeAuto does what $E2E_REAL_NODE asks for (RealNodeFromEnv), and when it is unset runs the
	// real node if the machine allows it (realnode.Available: Linux, root, the host packages, kubelet
	// and kube-proxy, the pause image); otherwise the cluster has kwok nodes only and Up says why in
	// one log line.
	RealNodeAuto RealNodeMode = iota
	// RealNodeOn requires the real node: Up fails when the machine cannot run it.
	RealNodeOn
	// RealNodeOff never starts the real node (one already running in the state dir is left alone).
	RealNodeOff
)

// RealNodeEnv is the environment variable RealNodeFromEnv reads: "0" (or "false") turns the real
// node off, "1" (or "true") requires it, unset or empty leaves it to the machine.
const RealNodeEnv = "E2E_REAL_NODE"

// RealNodeFromEnv returns the RealNodeMode $E2E_REAL_NODE asks for.
func RealNodeFromEnv() (RealNodeMode, error) {
	switch v := strings.ToLower(os.Getenv(RealNodeEnv)); v {
	case "":
		return RealNodeAuto, nil
	case "0", "false", "off":
		return RealNodeOff, nil
	case "1", "true", "on":
		return RealNodeOn, nil
	default:
		return RealNodeAuto, fmt.Errorf("%s=%q: want 0 or 1", RealNodeEnv, v)
	}
}

// Cluster is a running local cluster.
type Cluster struct {
	opts    Options
	started bool
	config  *rest.Config
	client  kubernetes.Interface

	realNode        bool
	realNodeOff     string
	realNodeStarted *realnode.Node

	// dnsPort is the host port of the cluster DNS (clusterdns.go).
	dnsPort int
}

// Up starts the local cluster, or reuses it when one is already running healthy with the same
// configuration, and returns once the API server serves, the default ServiceAccount and the
// kube-root-ca.crt ConfigMap exist and every kwok node is Ready. A stale or half-dead cluster in the
// state dir is deleted first. Concurrent calls on one state dir wait for each other.
func Up(ctx context.Context, opts Options) (*Cluster, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := opts.checkBinaries(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.StateDir, 0o755); err != nil {
		return nil, err
	}
	unlock, err := lockStateDir(ctx, opts.StateDir)
	if err != nil {
		return nil, err
	}
	defer unlock()

	k := newKwokctl(opts)
	if k.dnsPort, err = clusterDNSPort(opts.StateDir, k.exists()); err != nil {
		return nil, err
	}
	wantConfig := k.config()
	c := &Cluster{opts: opts, dnsPort: k.dnsPort}
	if err := c.decideRealNode(); err != nil {
		return nil, err
	}
	switch {
	case !k.exists():
		c.logf("no cluster in %s", opts.StateDir)
	case k.healthy(ctx) && k.sameConfig(wantConfig):
		c.logf("reusing the running cluster in %s", opts.StateDir)
	default:
		c.logf("deleting the stale or outdated cluster in %s", opts.StateDir)
		// A real node of the old cluster holds credentials of its CA: it goes first, killed or not.
		if err := realnode.Cleanup(opts.StateDir); err != nil {
			c.logf("cleaning up the real node (continuing): %v", err)
		}
		if err := k.down(ctx); err != nil {
			return nil, err
		}
	}

	if !k.exists() {
		start := time.Now()
		c.logf("creating the cluster: %s", k.commandLine())
		if err := k.create(ctx, wantConfig); err != nil {
			// Leave nothing half-started behind; the create error is the one that matters.
			_ = k.down(context.WithoutCancel(ctx))
			return nil, err
		}
		c.started = true
		c.logf("kwokctl created the cluster in %s", time.Since(start).Round(time.Millisecond))
	}

	if err := c.connect(); err != nil {
		return nil, err
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	if err := c.ensureStorageClass(ctx); err != nil {
		return nil, err
	}
	if err := c.ensureClusterDNS(ctx); err != nil {
		return nil, err
	}
	if err := c.ensureRealNodeSteering(ctx); err != nil {
		return nil, err
	}
	if c.realNode {
		if err := c.upRealNode(ctx, k); err != nil {
			// realnode.Start has cleaned up after itself; a cluster Up created goes too.
			if c.started {
				_ = k.down(context.WithoutCancel(ctx))
			}
			return nil, err
		}
	}
	return c, nil
}

// decideRealNode decides whether the cluster gets its real node, and says why not in one log line.
func (c *Cluster) decideRealNode() error {
	mode := c.opts.RealNode
	if mode == RealNodeAuto {
		var err error
		if mode, err = RealNodeFromEnv(); err != nil {
			return err
		}
	}
	switch mode {
	case RealNodeOff:
		c.realNodeOff = "turned off (" + RealNodeEnv + "=0)"
	case RealNodeOn:
		if err := realnode.Available(c.realNodeOptions(nil)); err != nil {
			return fmt.Errorf("the real node is required but this machine cannot run it: %w", err)
		}
	default:
		if err := realnode.Available(c.realNodeOptions(nil)); err != nil {
			c.realNodeOff = "this machine cannot run it: " + err.Error()
		}
	}
	c.realNode = c.realNodeOff == ""
	if !c.realNode {
		c.logf("real node off: %s", c.realNodeOff)
	}
	return nil
}

// upRealNode starts the real node, or reuses it when it runs Ready already.
func (c *Cluster) upRealNode(ctx context.Context, k *kwokctl) error {
	if realnode.Running(ctx, c.opts.StateDir, c.Kubeconfig()) {
		start := time.Now()
		images, err := realnode.ImportImages(ctx, c.realNodeOptions(k))
		if err != nil {
			return err
		}
		c.logf("reusing the running real node %s; imported its %d images again in %s", realnode.NodeName, len(images), time.Since(start).Round(time.Millisecond))
		return nil
	}
	start := time.Now()
	node, err := realnode.Start(ctx, c.realNodeOptions(k))
	if err != nil {
		return err
	}
	if c.realNodeStarted == nil {
		// The first start saw the host as it was; a restart sees it after the cleanup.
		c.realNodeStarted = node
	}
	c.logf("real node %s Ready in %s (containerd to Ready %s)", realnode.NodeName, time.Since(start).Round(time.Millisecond), node.Setup.Round(time.Millisecond))
	return nil
}

func (c *Cluster) realNodeOptions(k *kwokctl) realnode.Options {
	opts := realnode.Options{
		StateDir:   c.opts.StateDir,
		KubeBin:    c.opts.KubeBin,
		ImagesDir:  c.opts.ImagesDir,
		Kubeconfig: c.Kubeconfig(),
		// Addresses that exist only in this cluster: nothing sent to them may leave the machine.
		LocalOnlyCIDRs: []string{serviceCIDR, kwokCIDR},
		ClusterDNS:     ClusterDNSIP,
		ClusterDomain:  ClusterDomain,
		Log:            c.opts.Log,
	}
	if k != nil {
		opts.CACert = filepath.Join(k.clusterDir(), "pki", "ca.crt")
		opts.CAKey = filepath.Join(k.clusterDir(), "pki", "ca.key")
	}
	return opts
}

// RealNode reports whether the cluster has its real node (realnode.NodeName) and, when it has not, why.
func (c *Cluster) RealNode() (on bool, why string) { return c.realNode, c.realNodeOff }

// RealNodeStarted returns the real node Up started, nil when Up reused a running one or has none. Its
// HostBefore is the host as it was before the node changed anything.
func (c *Cluster) RealNodeStarted() *realnode.Node { return c.realNodeStarted }

// UpRealNode starts the real node unless it runs Ready already, as Up does: the leftovers of one that
// was stopped or killed are cleaned up first. It fails when the cluster was brought up without it.
func (c *Cluster) UpRealNode(ctx context.Context) error {
	if !c.realNode {
		return fmt.Errorf("the cluster has no real node: %s", c.realNodeOff)
	}
	unlock, err := lockStateDir(ctx, c.opts.StateDir)
	if err != nil {
		return err
	}
	defer unlock()
	return c.upRealNode(ctx, newKwokctl(c.opts))
}

// StopRealNode stops the real node and undoes its changes to the host (realnode.Stop), leaving the
// rest of the cluster running.
func (c *Cluster) StopRealNode(ctx context.Context) error {
	unlock, err := lockStateDir(ctx, c.opts.StateDir)
	if err != nil {
		return err
	}
	defer unlock()
	return realnode.Stop(ctx, c.opts.StateDir)
}

// Started reports whether Up created the cluster (true) or reused one that was already running (false),
// so a caller can stop only what it started.
func (c *Cluster) Started() bool { return c.started }

// Kubeconfig returns the path of the admin kubeconfig: <StateDir>/kubeconfig.
func (c *Cluster) Kubeconfig() string { return kubeconfigPath(c.opts.StateDir) }

// Client returns an admin clientset.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// StateDir returns the directory the cluster keeps its state, logs and kubeconfig in.
func (c *Cluster) StateDir() string { return c.opts.StateDir }

// KubeBin returns the directory of the Kubernetes binaries the cluster runs, kubectl included.
func (c *Cluster) KubeBin() string { return c.opts.KubeBin }

// KwokBin returns the directory of the kwok and kwokctl binaries.
func (c *Cluster) KwokBin() string { return c.opts.KwokBin }

// ImagesDir returns the dir of the image tarballs the real node imports.
func (c *Cluster) ImagesDir() string { return c.opts.ImagesDir }

// SetNodeReady makes a kwok node NotReady (ready=false) or Ready again and waits until it is; see
// the package function SetNodeReady.
func (c *Cluster) SetNodeReady(ctx context.Context, name string, ready bool) error {
	return SetNodeReady(ctx, c.client, name, ready)
}

// Down deletes the cluster and its state, leaving no process running and the host as it was (the real
// node is stopped first). The kubeconfig is removed.
func (c *Cluster) Down(ctx context.Context) error {
	return DownExisting(ctx, c.opts.StateDir)
}

// DownExisting deletes the cluster kept in stateDir (the default state dir when empty), whether it is
// running, stopped or half-dead, and verifies by PID that none of its processes is left. Its real node,
// if any, is stopped first (realnode.Stop: the host as it was). It is a no-op when there is no cluster
// there.
func DownExisting(ctx context.Context, stateDir string) error {
	opts, err := Options{StateDir: stateDir}.withDefaults()
	if err != nil {
		return err
	}
	if _, err := os.Stat(opts.StateDir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	unlock, err := lockStateDir(ctx, opts.StateDir)
	if err != nil {
		return err
	}
	defer unlock()
	var errs []error
	if err := realnode.Stop(ctx, opts.StateDir); err != nil {
		errs = append(errs, fmt.Errorf("real node: %w", err))
	}
	if err := newKwokctl(opts).down(ctx); err != nil {
		errs = append(errs, err)
	}
	// The volumes' directories, once nothing (the real node's kubelet) has them mounted any more.
	if err := os.RemoveAll(volumesDir(opts.StateDir)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (c *Cluster) connect() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig())
	if err != nil {
		return fmt.Errorf("load %s: %w", c.Kubeconfig(), err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	c.config, c.client = cfg, client
	return nil
}

func (c *Cluster) logf(format string, args ...any) {
	fmt.Fprintf(c.opts.Log, "localcluster: "+format+"\n", args...)
}

func (o Options) withDefaults() (Options, error) {
	if o.StateDir == "" {
		root, err := RepoRoot()
		if err != nil {
			return o, err
		}
		o.StateDir = filepath.Join(root, ".local")
	}
	abs, err := filepath.Abs(o.StateDir)
	if err != nil {
		return o, err
	}
	o.StateDir = abs
	home, _ := os.UserHomeDir()
	if o.KubeBin == "" {
		o.KubeBin = envOr("STATEFULOPS_KUBE_BIN", filepath.Join(home, ".cache/statefulops/kube-v1.36.3-etcd-v3.6.16"))
	}
	if o.KwokBin == "" {
		o.KwokBin = envOr("STATEFULOPS_KWOK_BIN", filepath.Join(home, ".cache/statefulops/kwok-v0.8.0"))
	}
	if o.Nodes == 0 {
		o.Nodes = DefaultNodes
	}
	if o.ImagesDir == "" {
		o.ImagesDir = os.Getenv("STATEFULOPS_IMAGES")
	}
	if o.ImagesDir == "" {
		if root, err := RepoRoot(); err == nil {
			if v, err := os.ReadFile(filepath.Join(root, "VERSION")); err == nil {
				o.ImagesDir = filepath.Join(home, ".cache/statefulops/images/v"+strings.TrimSpace(string(v)))
			}
		}
	}
	if o.ProvisionerBin == "" {
		if bin := os.Getenv("STATEFULOPS_BIN"); bin != "" {
			o.ProvisionerBin = filepath.Join(bin, provisionerComponent)
		}
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return o, nil
}

// checkBinaries fails early with a useful message instead of letting kwokctl fall back to downloads.
func (o Options) checkBinaries() error {
	var missing []string
	for dir, names := range map[string][]string{
		o.KubeBin: {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", clusterDNSComponent},
		o.KwokBin: {"kwok", "kwokctl"},
	} {
		for _, name := range names {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				missing = append(missing, filepath.Join(dir, name))
			}
		}
	}
	if o.ProvisionerBin == "" {
		return errors.New("no local-provisioner binary: set STATEFULOPS_BIN (the Makefile sets it) to the directory of `make build`'s binaries")
	}
	if _, err := os.Stat(o.ProvisionerBin); err != nil {
		missing = append(missing, o.ProvisionerBin+" (make build)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("local cluster binaries missing (build them with the Makefile, or set STATEFULOPS_KUBE_BIN / STATEFULOPS_KWOK_BIN): %v", missing)
	}
	return nil
}

// RepoRoot returns the nearest directory at or above the working directory that contains go.work.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work above the working directory: give the state dir explicitly")
		}
		dir = parent
	}
}

func kubeconfigPath(stateDir string) string { return filepath.Join(stateDir, "kubeconfig") }

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
