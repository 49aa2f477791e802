package testsupport

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Suite is the envtest API server (kube-apiserver and etcd from KUBEBUILDER_ASSETS) of one package's
// integration tests, with the operator's CRDs installed and a client that also watches.
type Suite struct {
	Config *rest.Config
	Scheme *runtime.Scheme
	Client client.WithWatch
}

// RunSuite starts envtest with the CRDs in crdDir and a scheme of client-go's types plus
// addToScheme, fills s, runs the package's tests and stops envtest. It returns the exit code for
// os.Exit. The controllers' logs are discarded: the tests assert on the cluster, not on log lines.
func RunSuite(m *testing.M, s *Suite, crdDir string, addToScheme ...func(*runtime.Scheme) error) int {
	return RunSuiteWith(m, s, crdDir, nil, addToScheme...)
}

// RunSuiteWith is RunSuite with before, when not nil, run once s is filled and before the tests
// (e.g. to create the nodes every test relies on); its error ends the run.
func RunSuiteWith(m *testing.M, s *Suite, crdDir string, before func() error, addToScheme ...func(*runtime.Scheme) error) int {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(testLogOut())))
	env := &envtest.Environment{CRDDirectoryPaths: []string{crdDir}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "envtest:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	scheme := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme}, addToScheme...) {
		if err := add(scheme); err != nil {
			fmt.Fprintln(os.Stderr, "scheme:", err)
			return 1
		}
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		return 1
	}
	*s = Suite{Config: cfg, Scheme: scheme, Client: c}
	if before != nil {
		if err := before(); err != nil {
			fmt.Fprintln(os.Stderr, "suite setup:", err)
			return 1
		}
	}
	return m.Run()
}

// StartManager runs a controller-runtime manager against the suite's API server, set up by setup,
// until the test ends or stop is called (stop waits for the manager to return, like an operator
// process that has died). Metrics are off and controller names may repeat, so each test can start
// its own operator, or several in turn. adjust, when given, changes the manager's options before it
// is created (e.g. the cache scope the operator's main sets).
func (s *Suite) StartManager(t *testing.T, setup func(ctx context.Context, mgr ctrl.Manager) error, adjust ...func(*ctrl.Options)) (stop func()) {
	t.Helper()
	return s.StartManagerAs(t, s.Config, setup, adjust...)
}

// StartManagerAs is StartManager with the manager talking to the API server as the user of cfg
// (e.g. impersonating the ServiceAccount of an operator's manifest, to test its RBAC).
func (s *Suite) StartManagerAs(t *testing.T, cfg *rest.Config, setup func(ctx context.Context, mgr ctrl.Manager) error, adjust ...func(*ctrl.Options)) (stop func()) {
	t.Helper()
	opts := ctrl.Options{
		Scheme:     s.Scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	for _, a := range adjust {
		a(&opts)
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	require.NoError(t, err)
	require.NoError(t, setup(t.Context(), mgr))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		assert.NoError(t, mgr.Start(ctx))
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// testLogOut is where the operators' logs go in envtest suites: nowhere, unless TEST_LOG is set (to see
// why a controller did not act, e.g. TEST_LOG=1 go test -tags integration -run TestX -v).
func testLogOut() io.Writer {
	if os.Getenv("TEST_LOG") != "" {
		return os.Stderr
	}
	return io.Discard
}
