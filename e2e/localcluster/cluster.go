// Package localcluster brings a local Kubernetes cluster up and down for the e2e tests and `make run`:
// etcd, kube-apiserver, kube-controller-manager and kube-scheduler run as local processes started by
// `kwokctl create cluster --runtime binary` from binaries built beforehand (nothing is downloaded),
// and kwok simulates the nodes and the pod lifecycle with the honest Stages under stages/.
//
// All state lives under one state dir (by default <repo>/.local): kwokctl's workdir in kwok/ (the
// running components' logs in kwok/clusters/statefulops/logs/), the kwokctl config in
// kwokctl-config.yaml, kwokctl's output in kwokctl.log, the admin kubeconfig in kubeconfig, and the
// component logs of the last deleted cluster in logs/. Up reuses a healthy cluster and replaces a
// stale one; Down leaves no process running.
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
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
	// KubeBin is the directory with etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
	// kubectl. Default: $STATEFULOPS_KUBE_BIN, else $HOME/.cache/statefulops/kube-v1.36.3-etcd-v3.6.16
	// (the Makefile's pinned build).
	KubeBin string
	// KwokBin is the directory with kwok and kwokctl. Default: $STATEFULOPS_KWOK_BIN, else
	// $HOME/.cache/statefulops/kwok-v0.8.0.
	KwokBin string
	// Nodes is the number of kwok nodes (statefulops-kwok-0, -1, ...). Default: DefaultNodes.
	Nodes int
	// Log receives one line per step and kwokctl's output. Default: discarded.
	Log io.Writer
}

// Cluster is a running local cluster.
type Cluster struct {
	opts    Options
	started bool
	config  *rest.Config
	client  kubernetes.Interface
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
	wantConfig := k.config()
	c := &Cluster{opts: opts}
	switch {
	case !k.exists():
		c.logf("no cluster in %s", opts.StateDir)
	case k.healthy(ctx) && k.sameConfig(wantConfig):
		c.logf("reusing the running cluster in %s", opts.StateDir)
	default:
		c.logf("deleting the stale or outdated cluster in %s", opts.StateDir)
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
	return c, nil
}

// Started reports whether Up created the cluster (true) or reused one that was already running (false),
// so a caller can stop only what it started.
func (c *Cluster) Started() bool { return c.started }

// Kubeconfig returns the path of the admin kubeconfig: <StateDir>/kubeconfig.
func (c *Cluster) Kubeconfig() string { return kubeconfigPath(c.opts.StateDir) }

// RESTConfig returns a copy of the admin client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.config) }

// Client returns an admin clientset.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// StateDir returns the directory the cluster keeps its state, logs and kubeconfig in.
func (c *Cluster) StateDir() string { return c.opts.StateDir }

// KubeBin returns the directory of the Kubernetes binaries the cluster runs, kubectl included.
func (c *Cluster) KubeBin() string { return c.opts.KubeBin }

// KwokBin returns the directory of the kwok and kwokctl binaries.
func (c *Cluster) KwokBin() string { return c.opts.KwokBin }

// SetNodeReady makes a kwok node NotReady (ready=false) or Ready again and waits until it is; see
// the package function SetNodeReady.
func (c *Cluster) SetNodeReady(ctx context.Context, name string, ready bool) error {
	return SetNodeReady(ctx, c.client, name, ready)
}

// Down deletes the cluster and its state, leaving no process running. The kubeconfig is removed.
func (c *Cluster) Down(ctx context.Context) error {
	return DownExisting(ctx, c.opts.StateDir)
}

// DownExisting deletes the cluster kept in stateDir (the default state dir when empty), whether it is
// running, stopped or half-dead, and verifies by PID that none of its processes is left. It is a
// no-op when there is no cluster there.
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
	return newKwokctl(opts).down(ctx)
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
	if o.Log == nil {
		o.Log = io.Discard
	}
	return o, nil
}

// checkBinaries fails early with a useful message instead of letting kwokctl fall back to downloads.
func (o Options) checkBinaries() error {
	var missing []string
	for dir, names := range map[string][]string{
		o.KubeBin: {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"},
		o.KwokBin: {"kwok", "kwokctl"},
	} {
		for _, name := range names {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				missing = append(missing, filepath.Join(dir, name))
			}
		}
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
