//go:build e2e

package singleton

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/realnode"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// TestSingletonOnTheRealNode: the singleton operator and webhook server installed from
// deploy/singleton-operator.yaml run on the real node; a one-replica Deployment and a three-replica
// StatefulSet of the e2e test app run there, each under a StatefulSingleton. Handovers (Recreate and
// RollingUpdate rollouts, pod deletions, a real `kubectl drain` of the node, StatefulSet rollouts) run
// in Wrapper mode, then in SchedulingGate mode. The checker reads the processes' own start and stop
// records: no two intervals of one singleton may overlap, and the gap (old process exit → new process
// start) is reported as p50/p99, split into the kubelet's, the operator's and the grant's share.
func TestSingletonOnTheRealNode(t *testing.T) {
	if !framework.NeedRealNode(t) {
		return
	}
	start := time.Now()
	framework.Install(t)
	t.Logf("kubectl apply of deploy/*.yaml done in %s", time.Since(start).Round(time.Millisecond))
	for _, d := range []string{"singleton-operator-controller-manager", framework.WebhookDeployment} {
		_, err := framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", framework.SingletonNamespace, "deployment/"+d, "--timeout=240s")
		require.NoError(t, err)
		// From the Deployment's creation (the apply of deploy/singleton-operator.yaml; one-second
		// resolution) to its pods being Ready: the operator is Ready once its grant endpoint serves, the
		// webhook server once it serves with its certificate and holds the grant CA. Meaningful when this
		// test installed the manifests (run alone).
		dep, err := framework.Clientset.AppsV1().Deployments(framework.SingletonNamespace).Get(t.Context(), d, metav1.GetOptions{})
		require.NoError(t, err)
		if dep.CreationTimestamp.Time.Before(start.Truncate(time.Second)) {
			t.Logf("SINGLETON install: %s was installed by an earlier test; install time not measured here", d)
			continue
		}
		t.Logf("SINGLETON install: %s created → Ready in %s (%s after this test began installing)", d,
			time.Since(dep.CreationTimestamp.Time).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	}
	// Two rounds of each kind of handover per mode: every path is taken, and `make test` stays short.
	// The many handovers that gap percentiles need are TestBenchSingletonRealNode's (`make bench`),
	// which checks them for overlaps with the same checker.
	for _, mode := range []singletonv1.HoldMode{singletonv1.HoldModeWrapper, singletonv1.HoldModeSchedulingGate} {
		t.Run(string(mode), func(t *testing.T) { singletonHandovers(t, mode, "", 2) })
	}
	// Issue 20: most images run their ENTRYPOINT, with no command in the pod. The test app's image is
	// served by a registry the kubelet pulls from and the webhook-server reads the image's config
	// from: the pods must be held in Wrapper mode all the same, with 0 overlaps. One round of each kind:
	// what differs from the Wrapper case above is how the pods are admitted, not how they hand over.
	t.Run("Wrapper without command", func(t *testing.T) {
		singletonHandovers(t, singletonv1.HoldModeWrapper, framework.ServeTestAppRegistry(t), 1)
	})
}

// applyRealNodeSingleton applies the StatefulSingleton name (selector app=name) in ns.
func applyRealNodeSingleton(t *testing.T, ns, name string, mode singletonv1.HoldMode) {
	t.Helper()
	file := filepath.Join(t.TempDir(), name+".yaml")
	yaml := fmt.Sprintf("apiVersion: apps.openshift.statefulsingleton.com/v1\nkind: StatefulSingleton\nmetadata:\n  name: %s\nspec:\n"+
		"  holdMode: %s\n  terminationGracePeriod: 10\n  selector:\n    matchLabels: {app: %s}\n", name, mode, name)
	require.NoError(t, os.WriteFile(file, []byte(yaml), 0o644))
	_, err := framework.Kubectl().Run(t.Context(), "apply", "-n", ns, "-f", file)
	require.NoError(t, err)
}

// singletonAppTemplate is the pod template of the test app under the singleton name, on the real node.
// With image set the pod runs that image of the test app without a command (its ENTRYPOINT), as most
// pods do (framework.ServeTestAppRegistry).
func singletonAppTemplate(t *testing.T, name, image string) corev1.PodTemplateSpec {
	t.Helper()
	pod := framework.TestAppPod(name, "--shutdown-seconds=0.2")
	pod.Spec.Containers[0].Command = []string{"/testapp"} // Wrapper mode needs the command in the spec
	// The local cluster runs no cluster DNS: the status-sidecar finds the grant Service through
	// /etc/hosts (its certificate is for the Service's DNS name).
	grantSvc, err := framework.Clientset.CoreV1().Services(framework.SingletonNamespace).Get(t.Context(), "singleton-operator-grant", metav1.GetOptions{})
	require.NoError(t, err)
	pod.Spec.HostAliases = []corev1.HostAlias{{IP: grantSvc.Spec.ClusterIP, Hostnames: []string{"singleton-operator-grant.singleton-operator-system.svc"}}}
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](10)
	if image != "" {
		c := &pod.Spec.Containers[0]
		c.Image, c.Command, c.ImagePullPolicy = image, nil, corev1.PullIfNotPresent
	}
	return corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec}
}

// singletonHandovers runs rounds of each kind of handover in mode; with image set, the pods run that
// image of the test app without a command (its ENTRYPOINT), as most pods do.
func singletonHandovers(t *testing.T, mode singletonv1.HoldMode, image string, rounds int) {
	label := string(mode)
	if image != "" {
		label += " (image without command)"
	}
	ns := framework.NewNamespace(t)
	applyRealNodeSingleton(t, ns, "app", mode)
	applyRealNodeSingleton(t, ns, "sts", mode)

	// The operator labels the namespace; the webhook's cache learns the singletons: probe pods (on a
	// kwok node) are admitted managed, then removed.
	require.Eventually(t, func() bool {
		got, err := framework.Clientset.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{})
		return err == nil && got.Labels[singletonv1.LabelNamespaceEnabled] == "true"
	}, framework.Timeout, framework.Tick, "the operator labels the namespace")
	for _, app := range []string{"app", "sts"} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			probe, err := framework.Clientset.CoreV1().Pods(ns).Create(t.Context(), appPod("probe-", app), metav1.CreateOptions{})
			require.NoError(c, err)
			_ = framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), probe.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			assert.Equal(c, "true", probe.Labels[singletonv1.LabelManaged], "admitted managed")
		}, framework.Timeout, framework.Tick)
	}
	require.Eventually(t, func() bool {
		pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0
	}, framework.Timeout, framework.Tick, "probe pods gone")
	timeline := watchPodTimeline(t, ns)
	watchReleased(t, ns) // the API-level checker, beside the process-level one below

	// The scenario each handover belongs to: the one running when the new process started.
	type mark struct {
		at   time.Time
		name string
	}
	var marks []mark
	scenarioAt := func(at time.Time) string {
		name := "initial start"
		for _, m := range marks {
			if !at.Before(m.at) {
				name = m.name
			}
		}
		return name
	}
	steps := 0 // each step is a handover
	step := func(app, what string, do func()) {
		t.Helper()
		steps++
		before := singletonEpoch(t, ns, app)
		marks = append(marks, mark{time.Now(), what})
		start := time.Now()
		do()
		waitSingletonActive(t, ns, app, before+1)
		t.Logf("%s mode, %s: new pod active %s after the trigger", mode, what, time.Since(start).Round(time.Millisecond))
	}
	activePod := func(app string) string { return singletonStatus(t, ns, app).Status.ActivePod }

	// --- Deployment: Recreate and RollingUpdate rollouts, pod deletions, a real drain.
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "app"}},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: singletonAppTemplate(t, "app", image),
		},
	}
	_, err := framework.Clientset.AppsV1().Deployments(ns).Create(t.Context(), dep, metav1.CreateOptions{})
	require.NoError(t, err)
	waitSingletonActive(t, ns, "app", 1)
	assertHoldMode(t, ns, activePod("app"), mode)
	appEpoch0 := singletonEpoch(t, ns, "app")

	rollout := func(i int) {
		framework.RetryOnConflict(t, func() error {
			d, err := framework.Clientset.AppsV1().Deployments(ns).Get(t.Context(), "app", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if d.Spec.Template.Annotations == nil {
				d.Spec.Template.Annotations = map[string]string{}
			}
			d.Spec.Template.Annotations["e2e/rollout"] = strconv.Itoa(i)
			_, err = framework.Clientset.AppsV1().Deployments(ns).Update(t.Context(), d, metav1.UpdateOptions{})
			return err
		})
	}
	setStrategy := func(typ appsv1.DeploymentStrategyType) {
		framework.RetryOnConflict(t, func() error {
			d, err := framework.Clientset.AppsV1().Deployments(ns).Get(t.Context(), "app", metav1.GetOptions{})
			if err != nil {
				return err
			}
			d.Spec.Strategy = appsv1.DeploymentStrategy{Type: typ}
			_, err = framework.Clientset.AppsV1().Deployments(ns).Update(t.Context(), d, metav1.UpdateOptions{})
			return err
		})
	}

	for i := range rounds {
		step("app", "Recreate rollout", func() { rollout(i) })
	}
	setStrategy(appsv1.RollingUpdateDeploymentStrategyType)
	waitDeploymentSettled(t, ns)
	for i := range rounds {
		step("app", "RollingUpdate rollout", func() { rollout(100 + i) })
		waitDeploymentSettled(t, ns)
	}
	for range rounds {
		step("app", "pod delete", func() {
			require.NoError(t, framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), activePod("app"), metav1.DeleteOptions{}))
		})
		waitDeploymentSettled(t, ns)
	}
	for range rounds {
		step("app", "kubectl drain", func() { drainRealNode(t, ns, activePod("app"), "app=app") })
		waitDeploymentSettled(t, ns)
	}
	if mode == singletonv1.HoldModeWrapper {
		// Chaos in the middle of exit reports: the old pod's status-sidecar, or the operator, is
		// SIGKILLed while the old app is stopping (deleteAndKill says what follows). Never overlapping.
		for range rounds {
			step("app", "delete, sidecar killed", func() { deleteAndKill(t, ns, activePod("app"), singletonv1.SidecarContainerName) })
			waitDeploymentSettled(t, ns)
		}
		step("app", "delete, operator killed", func() { deleteAndKill(t, ns, activePod("app"), "") })
		waitDeploymentSettled(t, ns)
	}
	appHandovers := singletonEpoch(t, ns, "app") - appEpoch0

	// --- StatefulSet: three replicas (one runs, two are held), rollouts and pod deletions. On a
	// rollout the StatefulSet controller recreates the highest ordinal first with the update revision;
	// the operator then hands over from the running pod of the old revision, and of the held pods it
	// must release one of the update revision, never an older one.
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "sts"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "sts"}},
			// Held pods are never Ready: OrderedReady would wait for them forever.
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template:            singletonAppTemplate(t, "sts", image),
		},
	}
	_, err = framework.Clientset.AppsV1().StatefulSets(ns).Create(t.Context(), sts, metav1.CreateOptions{})
	require.NoError(t, err)
	waitSingletonActive(t, ns, "sts", 1)
	assertHoldMode(t, ns, activePod("sts"), mode)
	stsEpoch0 := singletonEpoch(t, ns, "sts")
	stsRollout := func(i int) {
		framework.RetryOnConflict(t, func() error {
			s, err := framework.Clientset.AppsV1().StatefulSets(ns).Get(t.Context(), "sts", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if s.Spec.Template.Annotations == nil {
				s.Spec.Template.Annotations = map[string]string{}
			}
			s.Spec.Template.Annotations["e2e/rollout"] = strconv.Itoa(i)
			_, err = framework.Clientset.AppsV1().StatefulSets(ns).Update(t.Context(), s, metav1.UpdateOptions{})
			return err
		})
	}
	for i := range rounds {
		step("sts", "StatefulSet rollout", func() { stsRollout(i) })
		waitStatefulSetActiveUpdated(t, ns)
	}
	for range rounds {
		step("sts", "StatefulSet pod delete", func() {
			require.NoError(t, framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), activePod("sts"), metav1.DeleteOptions{}))
		})
		waitStatefulSetActiveUpdated(t, ns)
	}
	stsHandovers := singletonEpoch(t, ns, "sts") - stsEpoch0

	// The operator's own view of each release and grant (its log lines for this namespace).
	if logs, err := framework.Kubectl().Run(t.Context(), "logs", "-n", framework.SingletonNamespace, "deployment/singleton-operator-controller-manager", "--since=10m"); err == nil {
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, ns) && (strings.Contains(line, "Released pod") || strings.Contains(line, "Start granted")) {
				t.Logf("operator: %s", line)
			}
		}
	}

	overlaps := 0
	var all []handover
	reported := 0
	for _, app := range []string{"app", "sts"} {
		n, hs := checkHandovers(t, readIntervals(t, ns, app+"-"), timeline, scenarioAt)
		overlaps += n
		all = append(all, hs...)
		for _, h := range hs {
			if h.reported {
				reported++
			}
		}
	}
	logHandovers(t, fmt.Sprintf("SINGLETON %s mode:", label), all)
	var gaps []time.Duration
	for _, h := range all {
		gaps = append(gaps, h.gap)
	}
	releases, violations := timeline.revisionRule()
	for _, v := range violations {
		t.Logf("REVISION RULE: %s", v)
	}
	t.Logf("SINGLETON %s mode: %d handovers (Deployment %d, StatefulSet %d), %d overlapping process intervals, "+
		"%d of %d releases chose an older revision than a held pod's, gap old exit → new start p50 %s p99 %s (n=%d)",
		label, appHandovers+stsHandovers, appHandovers, stsHandovers, overlaps, len(violations), releases,
		singletonPercentile(gaps, 50), singletonPercentile(gaps, 99), len(gaps))
	assert.Zero(t, overlaps, "process intervals overlap")
	assert.Empty(t, violations, "a release chose an older revision than a held pod's")
	assert.GreaterOrEqual(t, appHandovers+stsHandovers, int64(steps), "a handover per step")
	if mode == singletonv1.HoldModeWrapper {
		// Every RollingUpdate rollout, pod deletion and drain of the Deployment, and every StatefulSet
		// handover whose old pod stopped cleanly, can go on the exit report.
		assert.GreaterOrEqual(t, reported, 2*rounds, "handovers on the old pod's exit report")
	} else {
		assert.Zero(t, reported, "exit reports in SchedulingGate mode (no sidecar)")
	}
}

// deleteAndKill deletes pod ns/name and, while its app stops (the test app takes 200 ms), SIGKILLs its
// container named sidecar, or with sidecar empty the singleton operator's process. A killed operator
// loses the report (the sidecar gives up after its 3 s budget; the handover waits for the kubelet and
// the next leader). A killed sidecar is restarted by the kubelet although the pod is terminating
// (containerd shows Attempt 1): the new one fences, finds every app exited and reports again.
func deleteAndKill(t *testing.T, ns, name, sidecar string) {
	t.Helper()
	pod, err := framework.FetchPod(t, ns, name)
	require.NoError(t, err)
	// Found before the deletion: a scan of /proc takes long enough for the report to be made meanwhile.
	var pid int
	if sidecar == "" {
		pid, sidecar = operatorPID(t), "the singleton operator"
	} else {
		pid = framework.ContainerPID(t, pod, sidecar)
	}
	require.NoError(t, framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), name, metav1.DeleteOptions{}))
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	t.Logf("deleted pod %s and SIGKILLed %s (process %d) 50 ms later", name, sidecar, pid)
}

// assertHoldMode checks that the webhook held pod in mode, without falling back.
func assertHoldMode(t *testing.T, ns, pod string, mode singletonv1.HoldMode) {
	t.Helper()
	p, err := framework.FetchPod(t, ns, pod)
	require.NoError(t, err)
	assert.Equal(t, string(mode), p.Annotations[singletonv1.AnnotationHoldMode], "hold mode of %s", pod)
	assert.Empty(t, p.Annotations[singletonv1.AnnotationHoldFallback], "fallback reason of %s", pod)
}

// drainRealNode drains the real node with kubectl (cordon, then PDB-aware evictions of the pods
// matching selector) and uncordons it as soon as the old pod was evicted, so that the replacement,
// which can only run there, is scheduled — as it would be on another node of a bigger cluster.
func drainRealNode(t *testing.T, ns, old, selector string) {
	t.Helper()
	t.Cleanup(func() { _, _ = framework.Kubectl().Run(context.Background(), "uncordon", realnode.NodeName) })
	done := make(chan error, 1)
	go func() {
		_, err := framework.Kubectl().Run(context.Background(), "drain", realnode.NodeName, "--pod-selector="+selector,
			"--ignore-daemonsets", "--delete-emptydir-data", "--timeout=120s")
		done <- err
	}()
	require.Eventually(t, func() bool {
		pod, err := framework.Clientset.CoreV1().Pods(ns).Get(t.Context(), old, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || err == nil && pod.DeletionTimestamp != nil
	}, framework.Timeout, 20*time.Millisecond, "kubectl drain evicted pod %s", old)
	_, err := framework.Kubectl().Run(t.Context(), "uncordon", realnode.NodeName)
	require.NoError(t, err)
	require.NoError(t, <-done, "kubectl drain")
}

// waitStatefulSetActiveUpdated waits until the StatefulSet "sts" has its three pods, none terminating,
// and the singleton's active pod is Ready and of the update revision. When the rollout recreates the
// active pod first, a held pod of the old revision may run for a moment (no pod of the update revision
// exists yet); the operator then hands over to the update revision as soon as its pod runs.
func waitStatefulSetActiveUpdated(t *testing.T, ns string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=sts"})
		if !assert.NoError(c, err) || !assert.Len(c, pods.Items, 3) {
			return
		}
		for _, p := range pods.Items {
			assert.Nil(c, p.DeletionTimestamp, "pod %s terminating", p.Name)
		}
		ss := singletonStatus(t, ns, "sts")
		s, err := framework.Clientset.AppsV1().StatefulSets(ns).Get(t.Context(), "sts", metav1.GetOptions{})
		if !assert.NoError(c, err) {
			return
		}
		for i := range pods.Items {
			if pods.Items[i].Name == ss.Status.ActivePod && framework.PodCondition(&pods.Items[i], corev1.PodReady) == corev1.ConditionTrue {
				assert.Equal(c, s.Status.UpdateRevision, pods.Items[i].Labels[appsv1.ControllerRevisionHashLabelKey], "the active pod's revision")
				return
			}
		}
		c.Errorf("no Ready active pod yet")
	}, 3*time.Minute, 100*time.Millisecond)
}

// singletonStatus reads the StatefulSingleton of ns named name (default "app").
func singletonStatus(t *testing.T, ns string, name ...string) *singletonv1.StatefulSingleton {
	t.Helper()
	n := "app"
	if len(name) > 0 {
		n = name[0]
	}
	out, err := framework.Kubectl().Run(t.Context(), "get", "-n", ns, "statefulsingletons.apps.openshift.statefulsingleton.com", n, "-o", "json")
	require.NoError(t, err)
	ss := &singletonv1.StatefulSingleton{}
	require.NoError(t, json.Unmarshal([]byte(out), ss))
	return ss
}

func singletonEpoch(t *testing.T, ns, name string) int64 {
	return singletonStatus(t, ns, name).Status.Epoch
}

// waitSingletonActive waits until the epoch of the StatefulSingleton name reached at least epoch and the
// active pod is Ready.
func waitSingletonActive(t *testing.T, ns, name string, epoch int64) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ss := singletonStatus(t, ns, name)
		assert.GreaterOrEqual(c, ss.Status.Epoch, epoch)
		if !assert.NotEmpty(c, ss.Status.ActivePod) {
			return
		}
		pod, err := framework.Clientset.CoreV1().Pods(ns).Get(t.Context(), ss.Status.ActivePod, metav1.GetOptions{})
		if assert.NoError(c, err) {
			assert.Equal(c, corev1.ConditionTrue, framework.PodCondition(pod, corev1.PodReady), "active pod %s Ready", pod.Name)
		}
	}, 3*time.Minute, 100*time.Millisecond)
}

// waitDeploymentSettled waits until the Deployment has exactly one pod.
func waitDeploymentSettled(t *testing.T, ns string) {
	t.Helper()
	require.Eventually(t, func() bool {
		pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=app"})
		return err == nil && len(pods.Items) == 1
	}, 3*time.Minute, 100*time.Millisecond, "one pod left")
}
