//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/realnode"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// TestSingletonOnTheRealNode: the singleton operator and webhook server installed from
// deploy/singleton-operator.yaml run on the real node; a one-replica Deployment of the e2e test app runs
// there under a StatefulSingleton. Handovers (Recreate and RollingUpdate rollouts, pod deletions,
// evictions as a drain does them) run in Wrapper mode, then in SchedulingGate mode. The checker reads
// the processes' own start and stop records: no two intervals may overlap, and the gap (old process
// exit → new process start) is reported as p50/p99.
func TestSingletonOnTheRealNode(t *testing.T) {
	if !needRealNode(t) {
		return
	}
	install(t)
	for _, d := range []string{"singleton-operator-controller-manager", webhookDeployment} {
		_, err := kubectl().Run(t.Context(), "rollout", "status", "-n", singletonNamespace, "deployment/"+d, "--timeout=240s")
		require.NoError(t, err)
	}
	for _, mode := range []singletonv1.HoldMode{singletonv1.HoldModeWrapper, singletonv1.HoldModeSchedulingGate} {
		t.Run(string(mode), func(t *testing.T) { singletonHandovers(t, mode) })
	}
}

func singletonHandovers(t *testing.T, mode singletonv1.HoldMode) {
	ns := newNamespace(t)
	file := filepath.Join(t.TempDir(), "ss.yaml")
	yaml := fmt.Sprintf("apiVersion: apps.openshift.statefulsingleton.com/v1\nkind: StatefulSingleton\nmetadata:\n  name: app\nspec:\n"+
		"  holdMode: %s\n  terminationGracePeriod: 10\n  selector:\n    matchLabels: {app: app}\n", mode)
	require.NoError(t, os.WriteFile(file, []byte(yaml), 0o644))
	_, err := kubectl().Run(t.Context(), "apply", "-n", ns, "-f", file)
	require.NoError(t, err)

	// The operator labels the namespace; the webhook's cache learns the singleton: a probe pod (on a
	// kwok node) is admitted managed, then removed.
	require.Eventually(t, func() bool {
		got, err := client.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{})
		return err == nil && got.Labels[singletonv1.LabelNamespaceEnabled] == "true"
	}, timeout, tick, "the operator labels the namespace")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		probe, err := client.CoreV1().Pods(ns).Create(t.Context(), appPod("probe-", "app"), metav1.CreateOptions{})
		require.NoError(c, err)
		_ = client.CoreV1().Pods(ns).Delete(t.Context(), probe.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		assert.Equal(c, "true", probe.Labels[singletonv1.LabelManaged], "admitted managed")
	}, timeout, tick)
	require.Eventually(t, func() bool {
		pods, err := client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0
	}, timeout, tick, "probe pods gone")

	pod := testAppPod("app", "--shutdown-seconds=0.2")
	pod.Spec.Containers[0].Command = []string{"/testapp"} // Wrapper mode needs the command in the spec
	// The local cluster runs no cluster DNS: the status-sidecar finds the grant Service through
	// /etc/hosts (its certificate is for the Service's DNS name).
	grantSvc, err := client.CoreV1().Services(singletonNamespace).Get(t.Context(), "singleton-operator-grant", metav1.GetOptions{})
	require.NoError(t, err)
	pod.Spec.HostAliases = []corev1.HostAlias{{IP: grantSvc.Spec.ClusterIP, Hostnames: []string{"singleton-operator-grant.singleton-operator-system.svc"}}}
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](10)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "app"}},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec},
		},
	}
	_, err = client.AppsV1().Deployments(ns).Create(t.Context(), dep, metav1.CreateOptions{})
	require.NoError(t, err)
	waitSingletonActive(t, ns, 1)

	handovers := 0
	step := func(what string, do func()) {
		t.Helper()
		before := singletonEpoch(t, ns)
		start := time.Now()
		do()
		waitSingletonActive(t, ns, before+1)
		handovers++
		t.Logf("%s mode, %s: new pod active %s after the trigger", mode, what, time.Since(start).Round(time.Millisecond))
	}
	rollout := func(i int) {
		retryOnConflict(t, func() error {
			d, err := client.AppsV1().Deployments(ns).Get(t.Context(), "app", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if d.Spec.Template.Annotations == nil {
				d.Spec.Template.Annotations = map[string]string{}
			}
			d.Spec.Template.Annotations["e2e/rollout"] = strconv.Itoa(i)
			_, err = client.AppsV1().Deployments(ns).Update(t.Context(), d, metav1.UpdateOptions{})
			return err
		})
	}
	setStrategy := func(typ appsv1.DeploymentStrategyType) {
		retryOnConflict(t, func() error {
			d, err := client.AppsV1().Deployments(ns).Get(t.Context(), "app", metav1.GetOptions{})
			if err != nil {
				return err
			}
			d.Spec.Strategy = appsv1.DeploymentStrategy{Type: typ}
			_, err = client.AppsV1().Deployments(ns).Update(t.Context(), d, metav1.UpdateOptions{})
			return err
		})
	}
	activePod := func() string {
		ss := singletonStatus(t, ns)
		return ss.Status.ActivePod
	}

	const rounds = 3
	for i := range rounds {
		step("Recreate rollout", func() { rollout(i) })
	}
	setStrategy(appsv1.RollingUpdateDeploymentStrategyType)
	waitDeploymentSettled(t, ns)
	for i := range rounds {
		step("RollingUpdate rollout", func() { rollout(100 + i) })
		waitDeploymentSettled(t, ns)
	}
	for range rounds {
		step("pod delete", func() {
			require.NoError(t, client.CoreV1().Pods(ns).Delete(t.Context(), activePod(), metav1.DeleteOptions{}))
		})
		waitDeploymentSettled(t, ns)
	}
	for range rounds {
		step("eviction (drain)", func() {
			require.NoError(t, client.CoreV1().Pods(ns).EvictV1(t.Context(), &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: activePod(), Namespace: ns}}))
		})
		waitDeploymentSettled(t, ns)
	}

	overlapCount, gaps := checkProcessIntervals(t, ns)
	t.Logf("SINGLETON %s mode: %d handovers, %d overlapping process intervals, gap old exit → new start p50 %s p99 %s (n=%d)",
		mode, handovers, overlapCount, singletonPercentile(gaps, 50), singletonPercentile(gaps, 99), len(gaps))
	assert.Zero(t, overlapCount, "process intervals overlap")
}

// singletonStatus reads the StatefulSingleton "app" of ns.
func singletonStatus(t *testing.T, ns string) *singletonv1.StatefulSingleton {
	t.Helper()
	out, err := kubectl().Run(t.Context(), "get", "-n", ns, "statefulsingletons.apps.openshift.statefulsingleton.com", "app", "-o", "json")
	require.NoError(t, err)
	ss := &singletonv1.StatefulSingleton{}
	require.NoError(t, json.Unmarshal([]byte(out), ss))
	return ss
}

func singletonEpoch(t *testing.T, ns string) int64 { return singletonStatus(t, ns).Status.Epoch }

// waitSingletonActive waits until the epoch reached at least epoch and the active pod is Ready.
func waitSingletonActive(t *testing.T, ns string, epoch int64) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ss := singletonStatus(t, ns)
		assert.GreaterOrEqual(c, ss.Status.Epoch, epoch)
		if !assert.NotEmpty(c, ss.Status.ActivePod) {
			return
		}
		pod, err := client.CoreV1().Pods(ns).Get(t.Context(), ss.Status.ActivePod, metav1.GetOptions{})
		if assert.NoError(c, err) {
			assert.Equal(c, corev1.ConditionTrue, podCondition(pod, corev1.PodReady), "active pod %s Ready", pod.Name)
		}
	}, 3*time.Minute, 100*time.Millisecond)
}

// waitDeploymentSettled waits until the Deployment has exactly one pod.
func waitDeploymentSettled(t *testing.T, ns string) {
	t.Helper()
	require.Eventually(t, func() bool {
		pods, err := client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=app"})
		return err == nil && len(pods.Items) == 1
	}, 3*time.Minute, 100*time.Millisecond, "one pod left")
}

// interval is one process of the test app, from its own records.
type interval struct {
	pod         string
	instance    string
	start, stop time.Time
}

// checkProcessIntervals reads the test app's records of ns and counts pairs of process intervals that
// overlap; it returns the gaps between consecutive processes.
func checkProcessIntervals(t *testing.T, ns string) (int, []time.Duration) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(realnode.RecordDir(realNode.stateDir), "*.jsonl"))
	require.NoError(t, err)
	byInstance := map[string]*interval{}
	for _, f := range files {
		fh, err := os.Open(f)
		require.NoError(t, err)
		s := bufio.NewScanner(fh)
		for s.Scan() {
			var r struct {
				appRecord
				Instance string `json:"instance"`
			}
			if json.Unmarshal(s.Bytes(), &r) != nil || r.Pod.Namespace != ns {
				continue
			}
			iv := byInstance[r.Instance]
			if iv == nil {
				iv = &interval{pod: r.Pod.Name, instance: r.Instance}
				byInstance[r.Instance] = iv
			}
			switch r.Event {
			case "start":
				iv.start = r.Time
			case "stop":
				iv.stop = r.Time
			}
		}
		_ = fh.Close()
	}
	var ivs []*interval
	for _, iv := range byInstance {
		if !iv.start.IsZero() {
			ivs = append(ivs, iv)
		}
	}
	slices.SortFunc(ivs, func(a, b *interval) int { return a.start.Compare(b.start) })
	overlaps := 0
	var gaps []time.Duration
	for i := 1; i < len(ivs); i++ {
		prev, next := ivs[i-1], ivs[i]
		if prev.stop.IsZero() || next.start.Before(prev.stop) {
			overlaps++
			t.Logf("overlap: %s (%s, start %s, stop %s) and %s (start %s)", prev.pod, prev.instance, prev.start, prev.stop, next.pod, next.start)
			continue
		}
		gaps = append(gaps, next.start.Sub(prev.stop))
	}
	return overlaps, gaps
}

func singletonPercentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[min(i, len(s)-1)].Round(time.Millisecond)
}
