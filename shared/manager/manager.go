package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/statefulops/statefulops/shared/version"
)

// Options describe one binary.
type Options struct {
	// Name is the binary's name, e.g. "lease-operator". It names the command and the logger.
	Name string
	// Short is the one-line description shown by --help.
	Short string
	// LeaderElectionID names the Lease that elects the active replica. It must be unique per binary so
	// that each operator can be installed, scaled and upgraded on its own.
	LeaderElectionID string
	// LeaderElection are the binary's default leader-election timings, which the --leader-elect-lease-duration,
	// --leader-elect-renew-deadline and --leader-elect-retry-period flags override; zero fields take
	// DefaultLeaderElection's. Choose them with the trade-off of LeaderElectionTimings' documentation.
	LeaderElection LeaderElectionTimings
	// Schemes add the API types the binary serves or watches, beyond client-go's built-in kinds. The
	// binary waits at start until the API server serves each of their kinds (its CRDs are installed).
	Schemes []func(*runtime.Scheme) error
	// OptionalSchemes add API types of other operators that the binary uses only when they are served
	// (e.g. the rollout-operator's StatefulSetLocks): in the scheme, but never waited for, so an operator
	// installed alone starts without the other operator's CRD.
	OptionalSchemes []func(*runtime.Scheme) error
	// Webhooks makes the binary serve admission webhooks over TLS and adds the --webhook-* flags.
	Webhooks bool
	// Flags adds the binary's own flags to its command's flag set, which already holds the common ones:
	// the AddFlags method of the value that holds the binary's settings (its controller package's Options
	// or its component's config), which Setup closes over. See the package documentation.
	Flags func(fs *pflag.FlagSet)
	// Cache scopes the manager's cache before the manager is created: the controller package's
	// CacheOptions (its cache.go), which its envtests apply too, e.g. to cache only the pods carrying a
	// label (cache.Options.ByObject). Nil keeps controller-runtime's defaults: every object of a watched
	// kind, cluster-wide. Either way, unless it sets DefaultTransform, cached objects are stored without
	// their managedFields (cache.TransformStripManagedFields). See the package documentation.
	Cache func(*cache.Options)
	// Setup registers the binary's controllers and webhooks with the manager before it starts. The
	// webhook server starts when Setup (or a runnable it adds, e.g. once a certificate exists) first calls
	// mgr.GetWebhookServer(); /readyz fails until it serves TLS.
	Setup func(ctx context.Context, mgr ctrl.Manager) error
}

// flags are the command-line settings shared by every binary.
type flags struct {
	metricsAddr             string
	metricsSecure           bool
	metricsCertPath         string
	metricsCertName         string
	metricsCertKey          string
	metricsServiceName      string
	metricsServiceNamespace string
	probeAddr               string
	pprofAddr               string
	leaderElect             bool
	leaderElectionNamespace string
	leaderElection          LeaderElectionTimings
	enableHTTP2             bool
	webhookCertPath         string
	webhookCertName         string
	webhookCertKey          string
	webhookHost             string
	webhookPort             int
	shutdownDelay           time.Duration
	zap                     zap.Options
}

// Main runs the binary described by opts and exits non-zero on error. SIGTERM and SIGINT stop it cleanly.
func Main(opts Options) {
	if err := NewRootCommand(opts).ExecuteContext(ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(1)
	}
}

// NewRootCommand returns the cobra command of the binary described by opts. Executing it runs the manager
// until the command's context is cancelled.
func NewRootCommand(opts Options) *cobra.Command {
	f := &flags{leaderElection: opts.LeaderElection.orDefault()}
	cmd := &cobra.Command{
		Use:           opts.Name,
		Short:         opts.Short,
		Version:       version.Get(),
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), opts, f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", ":8443",
		"Address the metrics endpoint binds to: :8443 for HTTPS, :8080 for HTTP, 0 to turn metrics off.")
	fs.BoolVar(&f.metricsSecure, "metrics-secure", true,
		"Serve metrics over HTTPS and allow only clients authorized by the API server (TokenReview and SubjectAccessReview).")
	fs.StringVar(&f.metricsCertPath, "metrics-cert-path", "",
		"Directory with the metrics server's certificate; empty means a self-signed certificate generated at start.")
	fs.StringVar(&f.metricsCertName, "metrics-cert-name", "tls.crt", "File name of the metrics server's certificate.")
	fs.StringVar(&f.metricsCertKey, "metrics-cert-key", "tls.key", "File name of the metrics server's key.")
	fs.StringVar(&f.metricsServiceName, "metrics-service-name", opts.Name+"-controller-manager-metrics-service",
		"With --metrics-secure, a scraper must be allowed to get the subresource services/metrics of this Service (the <operator>-metrics-reader Role grants it).")
	fs.StringVar(&f.metricsServiceNamespace, "metrics-service-namespace", "",
		"Namespace of --metrics-service-name; empty means POD_NAMESPACE, else the pod's own namespace, else --leader-election-namespace.")
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz endpoints bind to.")
	fs.StringVar(&f.pprofAddr, "pprof-bind-address", "0",
		"Address Go's profiling endpoints (/debug/pprof/) bind to, e.g. 127.0.0.1:6060 reached through kubectl port-forward; 0 turns them off. They have no authentication: bind them to loopback only.")
	fs.BoolVar(&f.leaderElect, "leader-elect", true,
		"Elect one active replica through a Lease, so that running several replicas is safe.")
	fs.StringVar(&f.leaderElectionNamespace, "leader-election-namespace", "",
		"Namespace of the leader-election Lease; defaults to the pod's own namespace in a cluster and is required outside one.")
	f.leaderElection.addFlags(fs)
	fs.BoolVar(&f.enableHTTP2, "enable-http2", false,
		"Allow HTTP/2 on the metrics and webhook servers (off by default: HTTP/2 Stream Cancellation and Rapid Reset CVEs).")
	if opts.Webhooks {
		fs.StringVar(&f.webhookCertPath, "webhook-cert-path", "",
			"Directory with the webhook server's certificate and key; reloaded when they change.")
		fs.StringVar(&f.webhookCertName, "webhook-cert-name", "tls.crt", "File name of the webhook server's certificate.")
		fs.StringVar(&f.webhookCertKey, "webhook-cert-key", "tls.key", "File name of the webhook server's key.")
		fs.StringVar(&f.webhookHost, "webhook-host", "", "Address the webhook server binds to; empty means all addresses.")
		fs.IntVar(&f.webhookPort, "webhook-port", 9443, "Port the webhook server listens on.")
		fs.DurationVar(&f.shutdownDelay, "shutdown-delay", 0,
			"After SIGTERM, how long the webhook server keeps answering, with /readyz failing and each answer closing its connection, before the binary stops, so the API server moves to other replicas without a refused admission. 0 stops at once; keep it below the pod's terminationGracePeriodSeconds.")
	}
	// controller-runtime registers --kubeconfig on the standard flag set; zap adds --zap-*.
	goflags := flag.NewFlagSet(opts.Name, flag.ContinueOnError)
	if kubeconfig := flag.CommandLine.Lookup(config.KubeconfigFlagName); kubeconfig != nil {
		goflags.Var(kubeconfig.Value, kubeconfig.Name, kubeconfig.Usage)
	}
	f.zap.BindFlags(goflags)
	fs.AddGoFlagSet(goflags)
	if opts.Flags != nil {
		opts.Flags(fs)
	}
	return cmd
}

// run builds the manager from the flags, lets the binary register its controllers and runs until ctx ends.
func run(ctx context.Context, opts Options, f *flags) error {
	setupLog := setupLogging(opts.Name, f)
	scheme, err := newScheme(append(slices.Clone(opts.Schemes), opts.OptionalSchemes...))
	if err != nil {
		return err
	}
	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	if err := waitForOwnKinds(ctx, setupLog, restConfig, opts.Schemes, f.probeAddr); err != nil {
		if errors.Is(err, context.Canceled) {
			return nil // stopped while waiting: a clean stop
		}
		return err
	}
	d := &drain{}
	mgrOpts, webhookServer, err := managerOptions(opts, f, scheme, d)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(restConfig, mgrOpts)
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := addProbes(mgr, webhookServer, d); err != nil {
		return err
	}
	if opts.Setup != nil {
		if err := opts.Setup(ctx, mgr); err != nil {
			return fmt.Errorf("setting up controllers: %w", err)
		}
	}
	setupLog.Info("Starting manager", "version", version.Get(), "leaderElection", f.leaderElect, "leaderElectionID", opts.LeaderElectionID)
	if err := mgr.Start(d.managerContext(ctx, f.shutdownDelay, setupLog)); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("running the manager: %w", err)
	}
	setupLog.Info("Manager stopped")
	return nil
}

// setupLogging makes the zap logger of the flags the logger of controller-runtime and client-go, and
// returns its "setup" logger.
func setupLogging(name string, f *flags) logr.Logger {
	logger := zap.New(zap.UseFlagOptions(&f.zap)).WithName(name)
	ctrl.SetLogger(logger)
	klog.SetLogger(logger) // client-go logs through the same zap logger.
	return logger.WithName("setup")
}

// newScheme registers client-go's built-in kinds and the binary's API types.
func newScheme(schemes []func(*runtime.Scheme) error) (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme}, schemes...) {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("registering API types: %w", err)
		}
	}
	return scheme, nil
}

// waitForOwnKinds returns once the API server serves the kinds of the binary's own API types. Controllers
// and field indexes on a kind the API server does not serve yet fail at once ("no matches for kind"), and
// a fresh install applies the CRD and the Deployment together. Meanwhile /healthz answers on probeAddr,
// so the kubelet does not restart a process that only waits, and /readyz says what it waits for. It
// returns ctx's error (context.Canceled) when stopped while waiting.
func waitForOwnKinds(ctx context.Context, log logr.Logger, restConfig *rest.Config, schemes []func(*runtime.Scheme) error, probeAddr string) error {
	kinds, err := resourceKinds(schemes)
	if err != nil || len(kinds) == 0 {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(restConfig)
	if err != nil {
		return fmt.Errorf("creating the discovery client: %w", err)
	}
	stopProbes := serveProbesWhileWaiting(log, probeAddr)
	err = waitForKinds(ctx, log, dc, kinds)
	stopProbes()
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("waiting for the API server to serve %v: %w", kinds, err)
	}
	return err
}

// managerOptions are the manager's options from the flags and the binary's Options: metrics, probes,
// leader election, the cache (Options.Cache, then managedFields stripped), and with Options.Webhooks the
// webhook server, which is also returned (nil without webhooks) for its readiness check.
func managerOptions(opts Options, f *flags, scheme *runtime.Scheme, d *drain) (ctrl.Options, webhook.Server, error) {
	var tlsOpts []func(*tls.Config)
	if !f.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	metricsOpts := metricsserver.Options{
		BindAddress:   f.metricsAddr,
		SecureServing: f.metricsSecure,
		CertDir:       f.metricsCertPath,
		CertName:      f.metricsCertName,
		KeyName:       f.metricsCertKey,
		TLSOpts:       tlsOpts,
	}
	if f.metricsSecure && f.metricsAddr != "0" {
		// Scrapes are authorized on the metrics Service's services/metrics subresource, not on the
		// nonResourceURL /metrics, whose grant would open the kube-apiserver's /metrics too.
		svc, err := resolveMetricsService(f, serviceAccountNamespaceFile)
		if err != nil {
			return ctrl.Options{}, nil, err
		}
		metricsOpts.FilterProvider = metricsAuthFilter(svc)
	}
	if f.leaderElect {
		if err := f.leaderElection.Validate(); err != nil {
			return ctrl.Options{}, nil, err
		}
	}
	mgrOpts := ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        f.probeAddr,
		PprofBindAddress:              f.pprofAddr,
		LeaderElection:                f.leaderElect,
		LeaderElectionID:              opts.LeaderElectionID,
		LeaderElectionNamespace:       f.leaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true, // the main process exits right after, so a successor need not wait out the lease
		LeaseDuration:                 &f.leaderElection.LeaseDuration,
		RenewDeadline:                 &f.leaderElection.RenewDeadline,
		RetryPeriod:                   &f.leaderElection.RetryPeriod,
	}
	if opts.Cache != nil {
		opts.Cache(&mgrOpts.Cache)
	}
	if mgrOpts.Cache.DefaultTransform == nil {
		// No binary reads managedFields from its cache, and they are a fifth or more of a cached object's
		// size (2-4 KB per pod). Writes lose nothing: an update without managedFields keeps the server's.
		mgrOpts.Cache.DefaultTransform = cache.TransformStripManagedFields()
	}
	if !opts.Webhooks {
		return mgrOpts, nil, nil
	}
	webhookServer := drainingServer{Server: webhook.NewServer(webhook.Options{
		Host:     f.webhookHost,
		Port:     f.webhookPort,
		CertDir:  f.webhookCertPath,
		CertName: f.webhookCertName,
		KeyName:  f.webhookCertKey,
		TLSOpts:  tlsOpts,
	}), drain: d}
	mgrOpts.WebhookServer = webhookServer
	return mgrOpts, webhookServer, nil
}

// addProbes adds /healthz and /readyz, and with a webhook server a readiness check that passes once it
// serves TLS.
func addProbes(mgr ctrl.Manager, webhookServer webhook.Server, d *drain) error {
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}
	if webhookServer == nil {
		return nil
	}
	if err := mgr.AddReadyzCheck("shutdown", d.readyCheck); err != nil {
		return fmt.Errorf("adding the shutdown readiness check: %w", err)
	}
	// Not ready until the webhook server serves TLS, so no admission request reaches a pod without a
	// certificate. The check asks the server itself, not mgr.GetWebhookServer(), which would add the
	// server to the manager now: the binary decides when it starts (see Options.Setup).
	if err := mgr.AddReadyzCheck("webhook", webhookServer.StartedChecker()); err != nil {
		return fmt.Errorf("adding the webhook readiness check: %w", err)
	}
	return nil
}
