//go:build e2e

package framework

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/localcluster"
	"github.com/statefulops/statefulops/e2e/operators"
)

// LocalOperator is one operator of deploy/<name>.yaml running as a local process for a test.
type LocalOperator struct {
	t        *testing.T
	name     string
	stateDir string
	// pprofPort serves the process's Go profiles on loopback (CPUProfiles), picked anew at each Start.
	pprofPort int
}

// installs remembers, per operator, the one `kubectl apply` of its manifest in this test run.
var installs sync.Map // operator name -> func() error

// InstallManifestOnce applies deploy/<name>.yaml once per test run and waits for its CRDs.
func InstallManifestOnce(name string) error {
	once, _ := installs.LoadOrStore(name, sync.OnceValue(func() error {
		root, err := localcluster.RepoRoot()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		// With the real node, the cluster steers the operator's namespace there: the in-cluster operator
		// a test scales back up afterwards runs for real, not as a kwok pretend pod.
		return operators.Install(ctx, Kubectl(), []string{filepath.Join(root, "deploy", name+".yaml")})
	}))
	return once.(func() error)()
}

// scaleInClusterOperator scales the Deployment of deploy/<name>.yaml and waits for it; at 0 it also
// waits until the operator's pod is gone.
func scaleInClusterOperator(t *testing.T, name string, replicas int) {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	namespace, deploy := name+"-system", "deployment/"+name+"-controller-manager"
	_, err := Kubectl().Run(ctx, "scale", "-n", namespace, deploy, fmt.Sprintf("--replicas=%d", replicas))
	require.NoError(t, err)
	_, err = Kubectl().Run(ctx, "rollout", "status", "-n", namespace, deploy, "--timeout=120s")
	require.NoError(t, err)
	if replicas == 0 {
		require.Eventually(t, func() bool {
			pods, err := Clientset.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name + ",control-plane=controller-manager"})
			return err == nil && len(pods.Items) == 0
		}, 2*time.Minute, 100*time.Millisecond, "the in-cluster %s pod is gone", name)
	}
}

// StartLocalOperator installs deploy/<name>.yaml (once), parks its in-cluster Deployment and starts
// the operator as a local process; the process is stopped and the Deployment restored when the test
// ends.
func StartLocalOperator(t *testing.T, name string) *LocalOperator {
	t.Helper()
	require.NoError(t, InstallManifestOnce(name), "kubectl apply -f deploy/%s.yaml", name)
	scaleInClusterOperator(t, name, 0)
	t.Cleanup(func() { scaleInClusterOperator(t, name, 1) })
	op := &LocalOperator{t: t, name: name, stateDir: filepath.Join(filepath.Dir(Kubeconfig), strings.TrimSuffix(name, "-operator")+"-e2e")}
	t.Cleanup(func() {
		assert.NoError(t, operators.Stop(context.Background(), op.stateDir, 15*time.Second, name))
	})
	op.Start()
	return op
}

// Start starts the process and waits until it is ready (which includes winning the manager's leader
// election: after a SIGKILL that waits for the old holder's Lease to expire). Its ports are picked
// free at each start, not operators.All()'s fixed ones, which a concurrent `make run` may hold.
func (o *LocalOperator) Start() {
	o.t.Helper()
	o.pprofPort = FreePort(o.t)
	b := operators.Binary{
		Name:           o.name,
		ServiceAccount: o.name + "-system/" + o.name + "-controller-manager",
		ProbePort:      FreePort(o.t), MetricsPort: FreePort(o.t), PprofPort: o.pprofPort,
	}
	start := time.Now()
	_, err := operators.Start(o.t.Context(), operators.Options{StateDir: o.stateDir, Kubeconfig: Kubeconfig}, []operators.Binary{b})
	require.NoError(o.t, err)
	o.t.Logf("%s started and ready in %s (log %s)", o.name, time.Since(start).Round(time.Millisecond), operators.LogPath(o.stateDir, o.name))
}

// Kill SIGKILLs the process: no cleanup, no release of its leader-election Lease.
func (o *LocalOperator) Kill() {
	o.t.Helper()
	raw, err := os.ReadFile(filepath.Join(operators.Dir(o.stateDir), o.name+".pid"))
	require.NoError(o.t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	require.NoError(o.t, err)
	require.NoError(o.t, syscall.Kill(pid, syscall.SIGKILL))
	require.NoError(o.t, operators.Stop(o.t.Context(), o.stateDir, time.Second, o.name))
}

// Stop ends the process with SIGTERM, as a rollout of the operator would.
func (o *LocalOperator) Stop() {
	o.t.Helper()
	require.NoError(o.t, operators.Stop(o.t.Context(), o.stateDir, 15*time.Second, o.name))
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// chaosWebhook is the webhook server run locally on a fixed loopback port, with the singleton
// manifest's MutatingWebhookConfiguration pointed at it (on kwok nodes the in-cluster replicas do not
// really run, so the API server could not call them; the caller parks them, see
// scaleWebhookDeployment); the configuration is put back when the test ends.
type chaosWebhook struct {
	stateDir string
	binary   operators.Binary
	mu       sync.Mutex
}

const singletonWebhookConfiguration = "singleton-operator-mutating-webhook-configuration"

func StartChaosWebhook(t *testing.T) *chaosWebhook {
	t.Helper()
	ctx := t.Context()
	probe, err1 := freeLoopbackPort()
	metrics, err2 := freeLoopbackPort()
	port, err3 := freeLoopbackPort()
	require.NoError(t, err1)
	require.NoError(t, err2)
	require.NoError(t, err3)
	wh := &chaosWebhook{stateDir: filepath.Join(filepath.Dir(Kubeconfig), "chaos-webhook"),
		binary: operators.Binary{Name: "webhook-server", ProbePort: probe, MetricsPort: metrics, WebhookPort: port}}
	t.Cleanup(func() {
		assert.NoError(t, operators.Stop(context.Background(), wh.stateDir, 15*time.Second, "webhook-server"))
	})
	require.NoError(t, wh.Start(ctx))
	ca, err := operators.WebhookCABundle(wh.stateDir, "webhook-server")
	require.NoError(t, err)

	cfgs := Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations()
	t.Cleanup(func() { RestoreWebhookService(t) })
	RetryOnConflict(t, func() error {
		cur, err := cfgs.Get(ctx, singletonWebhookConfiguration, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range cur.Webhooks {
			url := fmt.Sprintf("https://127.0.0.1:%d/mutate--v1-pod", port)
			cur.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca}
		}
		_, err = cfgs.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	t.Logf("webhook-server local on 127.0.0.1:%d (log %s)", port, operators.LogPath(wh.stateDir, "webhook-server"))
	return wh
}

func (w *chaosWebhook) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var last error
	for attempt := 0; attempt < 60 && ctx.Err() == nil; attempt++ {
		if _, last = operators.Start(ctx, operators.Options{StateDir: w.stateDir, Kubeconfig: Kubeconfig}, []operators.Binary{w.binary}); last == nil {
			return nil
		}
		_ = operators.Stop(context.WithoutCancel(ctx), w.stateDir, time.Second, "webhook-server")
		time.Sleep(time.Second) // test helper: the API server may be away
	}
	return fmt.Errorf("starting the webhook server: %w", last)
}

func (w *chaosWebhook) Kill(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return killByPIDFile(ctx, w.stateDir, "webhook-server")
}

// RestoreWebhookService points the singleton webhook configuration back at the in-cluster webhook
// Service, as the manifest has it (the in-cluster rotator injects its CA again when it runs).
func RestoreWebhookService(t *testing.T) {
	t.Helper()
	cfgs := Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations()
	RetryOnConflict(t, func() error {
		cur, err := cfgs.Get(context.Background(), singletonWebhookConfiguration, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil // not installed yet
		}
		if err != nil {
			return err
		}
		changed := false
		for i := range cur.Webhooks {
			if cur.Webhooks[i].ClientConfig.Service == nil {
				cur.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
					Namespace: SingletonNamespace, Name: "singleton-operator-webhook-service", Path: ptr.To("/mutate--v1-pod"), Port: ptr.To[int32](443)}}
				changed = true
			}
		}
		if !changed {
			return nil
		}
		_, err = cfgs.Update(context.Background(), cur, metav1.UpdateOptions{})
		return err
	})
}

const (
	SingletonNamespace = "singleton-operator-system"
	WebhookDeployment  = "singleton-operator-webhook-server"
)
