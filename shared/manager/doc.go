// Package manager is the one bootstrap every statefulops binary uses: a cobra root command with the
// kubebuilder flag names and controller-runtime's zap flags, a controller-runtime manager with secure
// metrics, /healthz and /readyz, and leader election under an ID unique to the binary. A binary's main
// only names itself, its API types and its controllers, and passes two things in one way each:
//
// # Flags
//
// A binary's own settings are a struct with a method AddFlags(fs *pflag.FlagSet) that registers them on
// fs: the controller package's Options, or its component's config struct (grant.ServeConfig,
// server.Config). main creates the value and passes its methods: AddFlags as Options.Flags and Setup as
// Options.Setup, which runs after the flags have filled the value. Every operator's controller Options
// has the method Setup(ctx, mgr) and embeds controllerutil.Overrides (what its tests replace):
//
//	opts := &controller.Options{}
//	manager.Main(manager.Options{
//		Flags: opts.AddFlags,
//		Setup: opts.Setup,
//	})
//
// No package-level flag variables, no flags registered inline in main. The common flags (metrics,
// probes, leader election, --webhook-*) are this package's; AddFlags may adjust one of them on fs (the
// webhook-server turns --enable-http2 on by default).
//
// # Leader election
//
// Every binary elects its active replica through a Lease named Options.LeaderElectionID and releases it
// on a clean stop (SIGTERM), so a standby takes over within one of its polls. The timings are flags
// (--leader-elect-lease-duration, --leader-elect-renew-deadline, --leader-elect-retry-period) whose
// defaults a binary chooses in Options.LeaderElection: LeaderElectionTimings says what each costs (Lease
// writes per minute at rest) and buys (handover after a graceful stop, failover after a SIGKILL), and
// docs/upgrading.md has the figures measured by e2e/handover (TestBenchLeaderHandover, make bench).
//
// # Cache scoping
//
// The manager's cache holds every object of a watched kind, cluster-wide, without managedFields. A
// controller that needs only part of a kind (pods with a label, some fields of nodes) scopes it in one
// place: a function CacheOptions(*cache.Options) in its controller package's cache.go, which main passes
// as Options.Cache and the controller's envtests apply when they build their manager, so the tests run
// with the cache production runs with. A transform belongs there too (cache.Options.DefaultTransform or
// ByObject's Transform; shared/controllerutil has SlimNode, SlimPod, StripManagedFields).
//
// A private cache (cache.New) only for a scope that changes at run time, such as singleton-operator's
// per-namespace and per-selector caches, which start and stop as StatefulSingletons come and go: the
// manager's cache is scoped once, before it starts. Where one is created, a comment says why.
package manager
