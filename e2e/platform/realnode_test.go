//go:build e2e

package platform

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
	"github.com/statefulops/statefulops/e2e/realnode"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// The real-node tests (TestRealNode*) run real containers on the local cluster's real node
// (package realnode). They never skip themselves. Each starts with framework.NeedRealNode: when the run has no
// real node, the test fails with the reason, unless E2E_REAL_NODE=0 turned the real node off on
// purpose; then it logs "real node off" and returns early, passing, and framework.Main's summary line says
// "e2e: real-node tests OFF (<why>)".

// TestRealNodeJoinsTainted checks the real node: Ready, a real kubelet and containerd, its label and
// NoSchedule taint, and none of kwok's labels; a plain pod lands on a kwok node, and a pod that selects
// the real node without tolerating its taint is never scheduled.
func TestRealNodeJoinsTainted(t *testing.T) {
	if !framework.NeedRealNode(t) {
		return
	}
	node, err := framework.Clientset.CoreV1().Nodes().Get(t.Context(), realnode.NodeName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.ConditionTrue, framework.NodeCondition(node, corev1.NodeReady))
	assert.Equal(t, realnode.LabelValue, node.Labels[realnode.LabelKey])
	assert.Contains(t, node.Spec.Taints, corev1.Taint{Key: realnode.TaintKey, Value: realnode.LabelValue, Effect: corev1.TaintEffectNoSchedule})
	assert.NotContains(t, node.Labels, localcluster.KwokNodeLabel, "kwok leaves the real node alone")
	assert.NotContains(t, node.Labels, localcluster.NodeReadyLabel)
	assert.True(t, strings.HasPrefix(node.Status.NodeInfo.ContainerRuntimeVersion, "containerd://"), node.Status.NodeInfo.ContainerRuntimeVersion)
	assert.True(t, strings.HasPrefix(node.Status.NodeInfo.KubeletVersion, "v1."), node.Status.NodeInfo.KubeletVersion)
	require.Error(t, localcluster.SetNodeReady(t.Context(), framework.Clientset, realnode.NodeName, false), "kwok's NotReady label is for kwok nodes only")

	ns := framework.NewNamespace(t)
	plain := framework.CreatePod(t, ns, framework.TestPod("plain"))
	assert.NotEqual(t, realnode.NodeName, plain.Spec.NodeName, "a pod without the toleration lands on a kwok node")

	untolerated := framework.TestPod("untolerated")
	untolerated.Spec.NodeSelector = map[string]string{realnode.LabelKey: realnode.LabelValue}
	_, err = framework.Clientset.CoreV1().Pods(ns).Create(t.Context(), untolerated, metav1.CreateOptions{})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := framework.FetchPod(t, ns, "untolerated")
		require.NoError(c, err)
		assert.Equal(c, corev1.ConditionFalse, framework.PodCondition(p, corev1.PodScheduled))
	}, framework.Timeout, framework.Tick, "the scheduler has tried and failed")
	testsupport.NeverWithin(t, 3*time.Second, framework.Tick, func() bool {
		p, err := framework.FetchPod(t, ns, "untolerated")
		return err != nil || p.Spec.NodeName != ""
	}, "a pod without the toleration is never scheduled onto the real node")
}

// TestRealNodeRunsTestApp runs the test app as a real container on the real node: it becomes Ready
// through its HTTP readiness probe, `kubectl logs` shows its start record, `kubectl exec` runs in it,
// a Service's ClusterIP reaches it from the host (kube-proxy), the API server's ClusterIP answers with
// a certificate pods can verify, and a graceful delete delivers SIGTERM: the app records sigterm and,
// --shutdown-seconds later, stop, and the pod object goes away.
func TestRealNodeRunsTestApp(t *testing.T) {
	if !framework.NeedRealNode(t) {
		return
	}
	const shutdownSeconds = 2
	ns := framework.NewNamespace(t)
	pod := framework.TestAppPod("app", "--shutdown-seconds="+fmt.Sprint(shutdownSeconds))

	start := time.Now()
	_, err := framework.Clientset.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
	require.NoError(t, err)
	var running, ready time.Duration
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := framework.FetchPod(t, ns, "app")
		require.NoError(c, err)
		if running == 0 && p.Status.Phase == corev1.PodRunning {
			running = time.Since(start)
		}
		require.Equal(c, corev1.ConditionTrue, framework.PodCondition(p, corev1.PodReady), "pod Ready")
		ready = time.Since(start)
		pod = p
	}, framework.Timeout, 50*time.Millisecond, "pod Ready")
	t.Logf("timing: pod create -> Running %s, -> Ready %s", running.Round(time.Millisecond), ready.Round(time.Millisecond))
	require.Equal(t, realnode.NodeName, pod.Spec.NodeName)
	uid := string(pod.UID)

	t.Run("kubectl logs shows the start record", func(t *testing.T) {
		out, err := framework.KubectlOnRealNode(t, "logs", "-n", ns, "app")
		require.NoError(t, err, out)
		start := framework.FindRecord(t, out, "start")
		assert.Equal(t, uid, start.Pod.UID)
		assert.Equal(t, realnode.NodeName, start.Pod.Node)
	})

	t.Run("kubectl exec runs in the container", func(t *testing.T) {
		// The image has no shell: the app's own --version is the command there is.
		out, err := framework.KubectlOnRealNode(t, "exec", "-n", ns, "app", "--", "/testapp", "--version")
		require.NoError(t, err, out)
		assert.True(t, strings.HasPrefix(out, "testapp "), out)
	})

	t.Run("a Service ClusterIP reaches the pod from the host", func(t *testing.T) {
		svc, err := framework.Clientset.CoreV1().Services(ns).Create(t.Context(), &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "app"},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": "app"},
				Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		url := "http://" + net.JoinHostPort(svc.Spec.ClusterIP, "80") + "/healthz"
		// A new connection each time: until kube-proxy has synced the Service, a connection to the
		// ClusterIP leaves by the default route and may be answered out there; a kept-alive one would
		// stay there.
		httpClient := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			resp, err := httpClient.Get(url)
			require.NoError(c, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Equal(c, http.StatusOK, resp.StatusCode, "%s", body)
		}, framework.Timeout, framework.Tick, "GET %s", url)
	})

	t.Run("the API server's ClusterIP serves a certificate pods can verify", func(t *testing.T) {
		svc, err := framework.Clientset.CoreV1().Services(metav1.NamespaceDefault).Get(t.Context(), "kubernetes", metav1.GetOptions{})
		require.NoError(t, err)
		// What an in-cluster client does: https://<KUBERNETES_SERVICE_HOST>, the cluster CA.
		cfg := rest.CopyConfig(framework.RESTConfig)
		cfg.Host = "https://" + net.JoinHostPort(svc.Spec.ClusterIP, "443")
		cfg.TLSClientConfig.ServerName = ""
		require.NotEmpty(t, cfg.TLSClientConfig.CAData)
		viaService, err := kubernetes.NewForConfig(cfg)
		require.NoError(t, err)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			_, err := viaService.Discovery().ServerVersion()
			assert.NoError(c, err)
		}, framework.Timeout, framework.Tick, "API server at %s", cfg.Host)
	})

	t.Run("a graceful delete delivers SIGTERM and the app takes its time", func(t *testing.T) {
		start := time.Now()
		err := framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), "app", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](20)})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return framework.PodGone(t, ns, "app") }, framework.Timeout, 50*time.Millisecond, "pod object gone")
		gone := time.Since(start)
		t.Logf("timing: graceful delete (grace 20s, app shutdown %ds) -> pod object gone %s", shutdownSeconds, gone.Round(time.Millisecond))
		assert.Less(t, gone, 15*time.Second, "gone once the app exited, long before the grace period ends")

		raw, err := os.ReadFile(filepath.Join(realnode.RecordDir(framework.RealNode.StateDir), uid+".jsonl"))
		require.NoError(t, err)
		sigterm, stop := framework.FindRecord(t, string(raw), "sigterm"), framework.FindRecord(t, string(raw), "stop")
		took := stop.Time.Sub(sigterm.Time)
		t.Logf("timing: delete -> sigterm recorded %s, -> stop recorded %s later (exit code %d), -> pod object gone %s after that",
			sigterm.Time.Sub(start).Round(time.Millisecond), took.Round(time.Millisecond), stop.ExitCode, start.Add(gone).Sub(stop.Time).Round(time.Millisecond))
		assert.InDelta(t, shutdownSeconds, took.Seconds(), 0.5, "stop comes --shutdown-seconds after sigterm")
		assert.Equal(t, 0, stop.ExitCode)
		assert.True(t, sigterm.Time.After(start.Add(-time.Second)), "sigterm after the delete")
	})
}

// TestRealNodeRecoversFromAKilledRun kills the real node's daemons with SIGKILL while a pod runs, as a
// killed `make test` leaves them (no teardown: the container and its shim still run, mounts, cgroups,
// iptables chains and changed sysctls stay), and brings the node up again: the leftovers are cleaned
// up first, the old container is gone, and the node runs pods again.
func TestRealNodeRecoversFromAKilledRun(t *testing.T) {
	if !framework.NeedRealNode(t) {
		return
	}
	ns := framework.NewNamespace(t)
	waitReady := func(name string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			p, err := framework.FetchPod(t, ns, name)
			require.NoError(c, err)
			assert.Equal(c, corev1.ConditionTrue, framework.PodCondition(p, corev1.PodReady))
		}, framework.Timeout, framework.Tick, "pod %s Ready", name)
	}
	_, err := framework.Clientset.CoreV1().Pods(ns).Create(t.Context(), framework.TestAppPod("before"), metav1.CreateOptions{})
	require.NoError(t, err)
	waitReady("before")
	var containers []string
	for _, p := range realnode.HostState().Processes {
		if strings.Contains(p, " testapp: ") {
			containers = append(containers, p)
		}
	}
	require.NotEmpty(t, containers, "the test app runs as a host process")

	daemons := realnode.DaemonPIDs(framework.RealNode.StateDir)
	require.Len(t, daemons, 3, "containerd, kubelet, kube-proxy")
	for name, pid := range daemons {
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL), name)
	}
	require.Eventually(t, func() bool { return len(realnode.DaemonPIDs(framework.RealNode.StateDir)) == 0 }, framework.Timeout, framework.Tick, "daemons killed")

	start := time.Now()
	require.NoError(t, framework.RealNode.Cluster.UpRealNode(t.Context()))
	t.Logf("timing: real node Ready again %s after a killed run (cleanup included)", time.Since(start).Round(time.Millisecond))
	after := realnode.HostState().Processes
	for _, p := range containers {
		assert.NotContains(t, after, p, "the killed run's container was stopped")
	}
	_, err = framework.Clientset.CoreV1().Pods(ns).Create(t.Context(), framework.TestAppPod("after"), metav1.CreateOptions{})
	require.NoError(t, err)
	waitReady("after")
}
