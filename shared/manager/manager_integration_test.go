//go:build integration

package manager

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

// A binary built on this bootstrap starts against a real API server, serves /healthz and /readyz and
// metrics, wins its leader election under its own ID, calls Setup, and returns cleanly when its context
// ends (SIGTERM cancels it in Main), releasing the Lease so a successor can take over at once.
func TestRunServesHealthWinsLeaderElectionAndStopsCleanly(t *testing.T) {
	cfg, kubeconfig := startEnvtest(t)

	probePort, metricsPort, pprofPort := freePort(t), freePort(t), freePort(t)
	setupCalled := make(chan ctrl.Manager, 1)
	cmd := NewRootCommand(Options{
		Name:             "test-operator",
		LeaderElectionID: "test-operator.statefulops.dev",
		// The binary's cache hook reaches the manager: here the cache is scoped to one namespace.
		Cache: func(o *cache.Options) { o.DefaultNamespaces = map[string]cache.Config{"default": {}} },
		Setup: func(_ context.Context, mgr ctrl.Manager) error {
			setupCalled <- mgr
			return nil
		},
	})
	cmd.SetArgs([]string{
		"--kubeconfig", kubeconfig,
		"--leader-election-namespace", "default",
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probePort),
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metricsPort),
		fmt.Sprintf("--pprof-bind-address=127.0.0.1:%d", pprofPort),
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	var mgr ctrl.Manager
	select {
	case mgr = <-setupCalled:
	case err := <-done:
		t.Fatalf("the command returned before Setup: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Setup was not called")
	}
	// --pprof-bind-address serves Go's profiles (off by default: TestRootCommandHasTheKubebuilderFlagsWithTheirDefaults).
	for _, ep := range []struct {
		port int
		path string
	}{{probePort, "/healthz"}, {probePort, "/readyz"}, {pprofPort, "/debug/pprof/heap?debug=1"}} {
		port, path := ep.port, ep.path
		require.Eventually(t, func() bool {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, 30*time.Second, 100*time.Millisecond, "%s never answered 200", path)
	}

	require.NoError(t, mgr.GetCache().List(t.Context(), &corev1.ConfigMapList{}, client.InNamespace("default")))
	assert.Error(t, mgr.GetCache().List(t.Context(), &corev1.ConfigMapList{}, client.InNamespace("kube-system")),
		"Options.Cache scoped the cache to the namespace default")

	clientset, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	// Cached objects come without managedFields (the default transform), while the API server keeps them.
	created, err := clientset.CoreV1().ConfigMaps("default").Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cached"}, Data: map[string]string{"k": "v"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, created.ManagedFields)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cached := &corev1.ConfigMap{}
		require.NoError(c, mgr.GetCache().Get(t.Context(), client.ObjectKeyFromObject(created), cached))
		assert.Equal(c, "v", cached.Data["k"])
		assert.Empty(c, cached.ManagedFields, "managedFields are stripped from the cache")
	}, 30*time.Second, 100*time.Millisecond)
	var lease *coordinationv1.Lease
	require.Eventually(t, func() bool {
		lease, err = clientset.CoordinationV1().Leases("default").Get(t.Context(), "test-operator.statefulops.dev", metav1.GetOptions{})
		return err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != ""
	}, 30*time.Second, 100*time.Millisecond, "the leader-election Lease was never acquired")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, "a cancelled context is a clean stop")
	case <-time.After(30 * time.Second):
		t.Fatal("the command did not return after its context was cancelled")
	}
	lease, err = clientset.CoordinationV1().Leases("default").Get(t.Context(), "test-operator.statefulops.dev", metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "", "the Lease is released on a clean stop")
}

// A fresh install applies the CRD and the Deployment together, so the operator may start before its
// kind is served. The bootstrap waits for it (the controller's field index and watch would fail with
// "no matches for kind") instead of exiting: once the CRD is installed, the controller reconciles and
// the command never returned.
func TestRunWaitsForItsCRDInsteadOfExiting(t *testing.T) {
	cfg, kubeconfig := startEnvtest(t)

	reconciled := make(chan string, 10)
	setupCalled := make(chan struct{})
	cmd := NewRootCommand(Options{
		Name:             "test-operator",
		LeaderElectionID: "test-operator-crd.statefulops.dev",
		Schemes:          []func(*runtime.Scheme) error{leasev1.AddToScheme},
		Setup: func(ctx context.Context, mgr ctrl.Manager) error {
			close(setupCalled)
			// A field index on the kind, as extended-operator has: it fails at once on a kind not served.
			if err := mgr.GetFieldIndexer().IndexField(ctx, &leasev1.StatefulSetLock{}, "spec.statefulSetName", func(o client.Object) []string {
				return []string{o.(*leasev1.StatefulSetLock).Spec.StatefulSetName}
			}); err != nil {
				return err
			}
			return ctrl.NewControllerManagedBy(mgr).For(&leasev1.StatefulSetLock{}).
				Complete(reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
					reconciled <- req.Name
					return reconcile.Result{}, nil
				}))
		},
	})
	probePort := freePort(t)
	cmd.SetArgs([]string{
		"--kubeconfig", kubeconfig,
		"--leader-election-namespace", "default",
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probePort),
		"--metrics-bind-address=0",
	})
	probe := func(path string) int {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", probePort, path))
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	// Without the CRD, the command neither sets up its controllers nor exits.
	select {
	case err := <-done:
		t.Fatalf("the command returned before its CRD was installed: %v", err)
	case <-setupCalled:
		t.Fatal("Setup was called before the API server served the kind")
	case <-time.After(3 * time.Second):
	}
	// While it waits it is alive (the kubelet must not restart it) but not ready.
	assert.Equal(t, http.StatusOK, probe("/healthz"))
	assert.Equal(t, http.StatusServiceUnavailable, probe("/readyz"))

	_, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join("..", "..", "lease-operator", "config", "crd", "bases")}, ErrorIfPathMissing: true,
	})
	require.NoError(t, err)
	scheme := runtime.NewScheme()
	require.NoError(t, leasev1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	require.NoError(t, c.Create(t.Context(), &leasev1.StatefulSetLock{
		ObjectMeta: metav1.ObjectMeta{Name: "after-crd", Namespace: "default"},
		Spec:       leasev1.StatefulSetLockSpec{StatefulSetName: "db", LeaseName: "db-lease", LeaseDurationSeconds: 15},
	}))
	select {
	case name := <-reconciled:
		assert.Equal(t, "after-crd", name)
	case err := <-done:
		t.Fatalf("the command returned instead of reconciling: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the controller never reconciled the object created after the CRD was installed")
	}
	require.Eventually(t, func() bool { return probe("/readyz") == http.StatusOK }, 30*time.Second, 100*time.Millisecond,
		"the manager's own probes serve once it runs")
	select {
	case err := <-done:
		t.Fatalf("the command returned: %v", err)
	default:
	}
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the command did not return after its context was cancelled")
	}
}

// The kinds of another operator (OptionalSchemes, e.g. the rollout-operator's StatefulSetLocks) are in
// the scheme but never waited for: an operator installed alone, without that operator's CRD, starts,
// sets up its controllers and becomes ready.
func TestRunDoesNotWaitForOptionalKinds(t *testing.T) {
	cfg, kubeconfig := startEnvtest(t)
	_, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join("..", "..", "lease-operator", "config", "crd", "bases")}, ErrorIfPathMissing: true,
	})
	require.NoError(t, err)

	setupCalled := make(chan struct{})
	cmd := NewRootCommand(Options{
		Name:             "test-operator",
		LeaderElectionID: "test-operator-optional.statefulops.dev",
		Schemes:          []func(*runtime.Scheme) error{leasev1.AddToScheme},
		// A kind of a group no CRD serves in this API server.
		OptionalSchemes: []func(*runtime.Scheme) error{optionalKindScheme},
		Setup: func(ctx context.Context, mgr ctrl.Manager) error {
			require.True(t, mgr.GetScheme().Recognizes(optionalKindGV.WithKind("Widget")), "the optional kind is in the scheme")
			close(setupCalled)
			return nil
		},
	})
	probePort := freePort(t)
	cmd.SetArgs([]string{
		"--kubeconfig", kubeconfig,
		"--leader-election-namespace", "default",
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probePort),
		"--metrics-bind-address=0",
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	select {
	case <-setupCalled:
	case err := <-done:
		t.Fatalf("the command returned: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("Setup was never called: the bootstrap waited for the optional kind")
	}
	require.Eventually(t, func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 100*time.Millisecond, "ready without the optional kind's CRD")
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the command did not return after its context was cancelled")
	}
}

var optionalKindGV = schema.GroupVersion{Group: "optional.statefulops.dev", Version: "v1"}

// optionalKindScheme registers Widget and WidgetList (as a CRD's Go types would) in a group nothing serves.
func optionalKindScheme(s *runtime.Scheme) error {
	s.AddKnownTypeWithName(optionalKindGV.WithKind("Widget"), &unstructuredWidget{})
	s.AddKnownTypeWithName(optionalKindGV.WithKind("WidgetList"), &unstructuredWidgetList{})
	return nil
}

type unstructuredWidget struct{ metav1.PartialObjectMetadata }

func (w *unstructuredWidget) DeepCopyObject() runtime.Object {
	return &unstructuredWidget{PartialObjectMetadata: *w.PartialObjectMetadata.DeepCopy()}
}

type unstructuredWidgetList struct {
	metav1.PartialObjectMetadataList
}

func (w *unstructuredWidgetList) DeepCopyObject() runtime.Object {
	return &unstructuredWidgetList{PartialObjectMetadataList: *w.PartialObjectMetadataList.DeepCopy()}
}
