//go:build e2e

package singleton

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/statefulops/statefulops/e2e/framework"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// The webhook server installed from deploy/singleton-operator.yaml runs on the real node (it must
// really serve TLS): its replicas become Ready only with a rotated certificate whose CA is in the
// MutatingWebhookConfiguration, the API server reaches them through the Service, pods of a labelled
// namespace that a StatefulSingleton selects are mutated, others are untouched, and with the webhook
// server scaled to 0 pod creation is refused in labelled namespaces and works everywhere else. Once its
// StatefulSingleton is gone, a pod of a still-labelled namespace is admitted unheld.
func TestSingletonAdmissionOnTheRealNode(t *testing.T) {
	framework.Install(t)
	if !framework.NeedRealNode(t) {
		return
	}
	_, err := framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", framework.SingletonNamespace, "deployment/"+framework.WebhookDeployment, "--timeout=180s")
	require.NoError(t, err)

	secret, err := framework.Clientset.CoreV1().Secrets(framework.SingletonNamespace).Get(t.Context(), "singleton-operator-webhook-server-cert", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, secret.Data["tls.crt"], "the rotator wrote the serving certificate")
	mwc, err := framework.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), "singleton-operator-mutating-webhook-configuration", metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, mwc.Webhooks, 1)
	assert.Equal(t, secret.Data["ca.crt"], mwc.Webhooks[0].ClientConfig.CABundle, "the rotator injected its CA")

	ns := framework.NewNamespace(t)
	labelNamespace(t, ns)
	applySingleton(t, ns, "db", "app: db")

	// The webhook server's cache learns about the new StatefulSingleton within moments.
	var pod *corev1.Pod
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		created, err := framework.Clientset.CoreV1().Pods(ns).Create(t.Context(), appPod("db-", "db"), metav1.CreateOptions{})
		require.NoError(c, err)
		if created.Labels[singletonv1.LabelManaged] != "true" {
			_ = framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), created.Name, metav1.DeleteOptions{})
			c.Errorf("pod %s was admitted before the webhook knew the singleton", created.Name)
			return
		}
		pod = created
	}, framework.Timeout, framework.Tick)
	assert.Equal(t, "db", pod.Labels[singletonv1.LabelSingleton])
	assert.Equal(t, "Wrapper", pod.Annotations[singletonv1.AnnotationHoldMode])
	assert.Contains(t, pod.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: singletonv1.ReadinessGate})
	assert.Equal(t, singletonv1.SidecarContainerName, pod.Spec.Containers[0].Name, "the sidecar first: its postStart hook installs the wrapper")
	assert.Equal(t, []string{singletonv1.WrapperBinary}, pod.Spec.Containers[1].Command)
	assert.Empty(t, pod.Spec.InitContainers)

	other, err := framework.Clientset.CoreV1().Pods(ns).Create(t.Context(), appPod("web-", "web"), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.NotContains(t, other.Labels, singletonv1.LabelManaged)
	assert.Equal(t, []string{"/pause"}, other.Spec.Containers[0].Command)
	assert.Len(t, other.Spec.Containers, 1)

	// Label and annotation changes of a managed pod are never blocked (UPDATE is not intercepted).
	_, err = framework.Kubectl().Run(t.Context(), "label", "-n", ns, "pod", pod.Name, "team=x")
	require.NoError(t, err)

	// Issue 16: once no StatefulSingleton selects a pod (deleted, or gone with the CRD at uninstall), a
	// pod created in a namespace that still carries the label is admitted unchanged, never held.
	t.Run("StatefulSingleton gone", func(t *testing.T) {
		gone := framework.NewNamespace(t)
		labelNamespace(t, gone)
		applySingleton(t, gone, "db", "app: db")
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			created, err := framework.Clientset.CoreV1().Pods(gone).Create(t.Context(), appPod("db-", "db"), metav1.CreateOptions{})
			require.NoError(c, err)
			assert.Equal(c, "true", created.Labels[singletonv1.LabelManaged], "held while the StatefulSingleton exists")
		}, framework.Timeout, framework.Tick)
		_, err := framework.Kubectl().Run(t.Context(), "delete", "pods", "--all", "-n", gone, "--wait=true", "--timeout=60s")
		require.NoError(t, err)
		_, err = framework.Kubectl().Run(t.Context(), "delete", "statefulsingleton", "db", "-n", gone, "--wait=true", "--timeout=60s")
		require.NoError(t, err)
		// As an uninstall may leave it: the operator removes it when it sees the last one go.
		_, err = framework.Kubectl().Run(t.Context(), "label", "--overwrite", "namespace", gone, singletonv1.LabelNamespaceEnabled+"=true")
		require.NoError(t, err)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			created, err := framework.Clientset.CoreV1().Pods(gone).Create(t.Context(), appPod("db-", "db"), metav1.CreateOptions{})
			require.NoError(c, err)
			assert.NotContains(c, created.Labels, singletonv1.LabelManaged, "admitted unheld")
			assert.Empty(c, created.Spec.SchedulingGates)
			assert.Len(c, created.Spec.Containers, 1, "no sidecar")
		}, framework.Timeout, framework.Tick)
	})

	// Issue 19: a rolling restart of the webhook server (as an upgrade does) refuses no pod creation:
	// a stopping replica drains (--shutdown-delay) before it stops. Dry-run creations go through
	// admission, the webhook included, and leave nothing behind.
	t.Run("rolling restart refuses nothing", func(t *testing.T) {
		creations := startDryRunCreations(t, ns, "db", 200*time.Millisecond)
		time.Sleep(2 * time.Second) // creations before the restart too
		_, err := framework.Kubectl().Run(t.Context(), "rollout", "restart", "-n", framework.SingletonNamespace, "deployment/"+framework.WebhookDeployment)
		require.NoError(t, err)
		_, err = framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", framework.SingletonNamespace, "deployment/"+framework.WebhookDeployment, "--timeout=180s")
		require.NoError(t, err)
		// The last old replica drains, then stops, after the rollout is complete.
		require.Eventually(t, func() bool { return len(webhookPods(t)) == 2 }, 2*time.Minute, framework.Tick, "the old webhook server pods are gone")
		time.Sleep(2 * time.Second)
		created, refusals := creations.finish()
		t.Logf("webhook server rolling restart: %d pod creations, %d refused", created, len(refusals))
		assert.Empty(t, refusals, "pod creations refused during the rolling restart")
		assert.Greater(t, created, 20, "creations ran throughout the restart")
	})

	// Issue 19: one of the two replicas dies at once (its process SIGKILLed, as on a node lost with it):
	// the other serves on. What the dead one cannot answer is refused: a call in flight on the API
	// server's connection to it, or sent on a connection the Service routed to it before the kubelet
	// reported the container dead and its endpoint went (client-go retries no POST on a broken
	// connection, and the webhook's failurePolicy is Fail: an unheld singleton pod would break the
	// seed's promise). So a creation may be refused in the first seconds, never after.
	t.Run("a replica SIGKILLed", func(t *testing.T) {
		if !framework.NeedRealNode(t) {
			return
		}
		pods := webhookPods(t)
		require.Len(t, pods, 2)
		victim := pods[0]
		restarts := victim.Status.ContainerStatuses[0].RestartCount
		pid := framework.ContainerPID(t, &victim, "webhook-server")
		creations := startDryRunCreations(t, ns, "db", 200*time.Millisecond)
		time.Sleep(2 * time.Second)
		killed := time.Now()
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		require.Eventually(t, func() bool {
			p, err := framework.FetchPod(t, framework.SingletonNamespace, victim.Name)
			return err == nil && p.Status.ContainerStatuses[0].RestartCount > restarts && framework.PodCondition(p, corev1.PodReady) == corev1.ConditionTrue
		}, 2*time.Minute, framework.Tick, "the killed replica restarted and Ready")
		back := time.Since(killed)
		time.Sleep(2 * time.Second)
		created, refusals := creations.finish()
		t.Logf("webhook server replica %s SIGKILLed: %d pod creations, %d refused; the replica Ready again %s later",
			victim.Name, created, len(refusals), back.Round(time.Millisecond))
		for _, r := range refusals {
			after := r.at.Sub(killed)
			t.Logf("refused %s after the kill: %s", after.Round(time.Millisecond), r.err)
			// The kubelet's relist (1 s), the EndpointSlice update and kube-proxy's sync (1 s) take
			// about 2 s; 5 s leaves room for a loaded machine.
			assert.Less(t, after, 5*time.Second, "a creation refused once the dead replica's endpoint should be gone")
			assert.Contains(t, r.err, "mpod.kb.io", "refused by the webhook call, not for another reason")
		}
		assert.Greater(t, created-len(refusals), 10, "creations went on with one replica dead")
	})

	t.Run("webhook down", func(t *testing.T) {
		scaleWebhook(t, 0)
		t.Cleanup(func() { scaleWebhook(t, 2) })
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			_, err := framework.Clientset.CoreV1().Pods(ns).Create(t.Context(), appPod("db-", "db"), metav1.CreateOptions{})
			require.Error(c, err, "pod creation in a StatefulSingleton namespace is refused while the webhook is down")
			assert.Contains(c, err.Error(), "mpod.kb.io")
		}, framework.Timeout, framework.Tick)
		elsewhere := framework.NewNamespace(t)
		_, err := framework.Clientset.CoreV1().Pods(elsewhere).Create(t.Context(), appPod("db-", "db"), metav1.CreateOptions{})
		require.NoError(t, err, "namespaces without a StatefulSingleton are not affected")
	})
}

// refusal is a refused creation: when it was sent and why it was refused.
type refusal struct {
	at  time.Time
	err string
}

// dryRunCreations creates a pod of a singleton with server-side dry-run (admission runs, the webhook
// included; nothing is left behind) at a fixed interval and records the refusals, while the webhook
// server is rolled, upgraded or loses a replica.
type dryRunCreations struct {
	mu                   sync.Mutex
	created, lastCreated int
	refusals             []refusal
	lastRefused          int
	stop, done           chan struct{}
	once                 sync.Once
}

// startDryRunCreations starts creating a pod labelled app=<app> in ns every interval until finish
// (or the end of the test).
func startDryRunCreations(t *testing.T, ns, app string, every time.Duration) *dryRunCreations {
	l := &dryRunCreations{stop: make(chan struct{}), done: make(chan struct{})}
	ctx := t.Context()
	go func() {
		defer close(l.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			sent := time.Now()
			_, err := framework.Clientset.CoreV1().Pods(ns).Create(ctx, appPod("dryrun-", app), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if ctx.Err() != nil {
				return // the test ended: not a refusal
			}
			l.mu.Lock()
			l.created++
			if err != nil {
				l.refusals = append(l.refusals, refusal{at: sent, err: err.Error()})
			}
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() { l.finish() })
	return l
}

// window returns the creations and refusals since the last call.
func (l *dryRunCreations) window() (created, refused int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	created, refused = l.created-l.lastCreated, len(l.refusals)-l.lastRefused
	l.lastCreated, l.lastRefused = l.created, len(l.refusals)
	return created, refused
}

// finish stops the loop and returns how many creations were tried and those refused.
func (l *dryRunCreations) finish() (created int, refusals []refusal) {
	l.once.Do(func() { close(l.stop) })
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.created, slices.Clone(l.refusals)
}

// webhookPods returns the webhook server's pods.
func webhookPods(t *testing.T) []corev1.Pod {
	t.Helper()
	pods, err := framework.Clientset.CoreV1().Pods(framework.SingletonNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=webhook-server"})
	require.NoError(t, err)
	return pods.Items
}

// labelNamespace opts the namespace into the pod webhook, as the singleton operator will for every
// namespace that holds a StatefulSingleton.
func labelNamespace(t *testing.T, ns string) {
	t.Helper()
	_, err := framework.Kubectl().Run(t.Context(), "label", "namespace", ns, singletonv1.LabelNamespaceEnabled+"=true")
	require.NoError(t, err)
}

func applySingleton(t *testing.T, ns, name, matchLabels string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "ss.yaml")
	yaml := fmt.Sprintf("apiVersion: apps.openshift.statefulsingleton.com/v1\nkind: StatefulSingleton\nmetadata:\n  name: %s\nspec:\n  selector:\n    matchLabels: {%s}\n", name, matchLabels)
	require.NoError(t, os.WriteFile(file, []byte(yaml), 0o644))
	_, err := framework.Kubectl().Run(t.Context(), "apply", "-n", ns, "-f", file)
	require.NoError(t, err)
}

// appPod is a pod with an explicit command (so the Wrapper hold applies) on the kwok nodes.
func appPod(generateName, app string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: generateName, Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: framework.PauseImage, Command: []string{"/pause"}}}},
	}
}

// scaleWebhook scales the webhook server and waits until exactly that many replicas exist and are Ready.
func scaleWebhook(t *testing.T, replicas int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	_, err := framework.Kubectl().Run(ctx, "scale", "-n", framework.SingletonNamespace, "deployment/"+framework.WebhookDeployment, fmt.Sprintf("--replicas=%d", replicas))
	require.NoError(t, err)
	if replicas > 0 {
		_, err = framework.Kubectl().Run(ctx, "rollout", "status", "-n", framework.SingletonNamespace, "deployment/"+framework.WebhookDeployment, "--timeout=180s")
		require.NoError(t, err)
		return
	}
	require.Eventually(t, func() bool {
		out, err := framework.Kubectl().Run(ctx, "get", "pods", "-n", framework.SingletonNamespace, "-l", "app.kubernetes.io/component=webhook-server", "-o", "name")
		return err == nil && strings.TrimSpace(out) == ""
	}, 2*time.Minute, framework.Tick, "the webhook server's pods are gone")
}
