//go:build e2e

package singleton

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// TestSingletonFailures runs the singleton operator installed from deploy/singleton-operator.yaml (on
// the real node) against pods on kwok nodes, through failures: a pod force-deleted from a NotReady
// node (the next one is held until the out-of-service taint), the operator killed mid-handover, and
// the StatefulSingleton deleted mid-transition. An invariant checker watches every pod of each
// namespace and counts the instants at which two released pods exist (must be 0).
func TestSingletonFailures(t *testing.T) {
	if !framework.NeedRealNode(t) {
		return
	}
	framework.Install(t)
	for _, d := range []string{"singleton-operator-controller-manager", framework.WebhookDeployment} {
		_, err := framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", framework.SingletonNamespace, "deployment/"+d, "--timeout=240s")
		require.NoError(t, err)
	}

	t.Run("force delete on a NotReady node", func(t *testing.T) {
		ns := newSingletonNamespace(t, singletonv1.HoldModeWrapper)
		watchReleased(t, ns)
		node := localcluster.NodeName(2)
		t.Cleanup(func() {
			setOutOfService(t, node, false)
			assert.NoError(t, localcluster.SetNodeReady(context.Background(), framework.Clientset, node, true))
		})
		a := createSingletonPod(t, ns, node)
		waitPodReleased(t, ns, a)
		require.NoError(t, localcluster.SetNodeReady(t.Context(), framework.Clientset, node, false))
		b := createSingletonPod(t, ns, localcluster.NodeName(0))
		require.NoError(t, framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), a, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, metav1.ConditionTrue, singletonCondition(t, ns, singletonv1.ConditionFencingRequired))
		}, framework.Timeout, framework.Tick, "FencingRequired")
		testsupport.NeverWithin(t, 3*time.Second, framework.Tick, func() bool { return podReleased(t, ns, b) }, "held until the node is fenced")
		setOutOfService(t, node, true)
		waitPodReleased(t, ns, b)
	})

	t.Run("operator killed mid-handover", func(t *testing.T) {
		ns := newSingletonNamespace(t, singletonv1.HoldModeWrapper)
		watchReleased(t, ns)
		prev := createSingletonPod(t, ns, localcluster.NodeName(0))
		waitPodReleased(t, ns, prev)
		for i := range 2 { // SIGKILLed before, then after the old pod's deletion
			next := createSingletonPod(t, ns, localcluster.NodeName(i%3))
			start := time.Now()
			if i%2 == 0 {
				killOperator(t)
			}
			require.NoError(t, framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), prev, metav1.DeleteOptions{}))
			if i%2 == 1 {
				killOperator(t)
			}
			waitPodReleased(t, ns, next)
			t.Logf("handover %d with the operator SIGKILLed %s deleting the old pod: released after %s", i+1,
				map[bool]string{true: "before", false: "after"}[i%2 == 0], time.Since(start).Round(time.Millisecond))
			prev = next
		}
	})

	t.Run("StatefulSingleton deleted mid-transition", func(t *testing.T) {
		ns := newSingletonNamespace(t, singletonv1.HoldModeWrapper)
		watchReleased(t, ns)
		old := createSingletonPod(t, ns, localcluster.NodeName(0))
		waitPodReleased(t, ns, old)
		next := createSingletonPod(t, ns, localcluster.NodeName(1))
		_, err := framework.Kubectl().Run(t.Context(), "delete", "-n", ns, "statefulsingletons.apps.openshift.statefulsingleton.com", "app", "--wait=false")
		require.NoError(t, err)
		testsupport.NeverWithin(t, 2*time.Second, framework.Tick, func() bool { return podReleased(t, ns, next) })
		ss := singletonStatus(t, ns)
		assert.NotNil(t, ss.DeletionTimestamp, "kept by the finalizer while a pod is held")
		require.NoError(t, framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), old, metav1.DeleteOptions{}))
		waitPodReleased(t, ns, next)
		require.Eventually(t, func() bool {
			_, err := framework.Kubectl().Run(t.Context(), "get", "-n", ns, "statefulsingletons.apps.openshift.statefulsingleton.com", "app")
			return err != nil
		}, framework.Timeout, framework.Tick, "deleted once nothing is held")
		require.Eventually(t, func() bool {
			got, err := framework.Clientset.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{})
			return err == nil && got.Labels[singletonv1.LabelNamespaceEnabled] == ""
		}, framework.Timeout, framework.Tick, "namespace label removed with the last StatefulSingleton")
	})
}

// newSingletonNamespace creates a namespace with the StatefulSingleton "app" (selector app=app) and
// waits until the operator labelled it and the webhook admits its pods held.
func newSingletonNamespace(t *testing.T, mode singletonv1.HoldMode) string {
	t.Helper()
	ns := framework.NewNamespace(t)
	file := filepath.Join(t.TempDir(), "ss.yaml")
	yaml := fmt.Sprintf("apiVersion: apps.openshift.statefulsingleton.com/v1\nkind: StatefulSingleton\nmetadata:\n  name: app\nspec:\n"+
		"  holdMode: %s\n  terminationGracePeriod: 10\n  selector:\n    matchLabels: {app: app}\n", mode)
	require.NoError(t, os.WriteFile(file, []byte(yaml), 0o644))
	_, err := framework.Kubectl().Run(t.Context(), "apply", "-n", ns, "-f", file)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := framework.Clientset.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{})
		return err == nil && got.Labels[singletonv1.LabelNamespaceEnabled] == "true"
	}, framework.Timeout, framework.Tick, "the operator labels the namespace")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		probe, err := framework.Clientset.CoreV1().Pods(ns).Create(t.Context(), appPod("probe-", "app"), metav1.CreateOptions{})
		require.NoError(c, err)
		_ = framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), probe.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		assert.Equal(c, "true", probe.Labels[singletonv1.LabelManaged], "admitted managed")
	}, framework.Timeout, framework.Tick)
	require.Eventually(t, func() bool {
		pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0
	}, framework.Timeout, framework.Tick, "probe pods gone")
	return ns
}

// createSingletonPod creates a pod of the singleton on a kwok node and returns its name.
func createSingletonPod(t *testing.T, ns, node string) string {
	t.Helper()
	pod := appPod("app-", "app")
	pod.Spec.NodeName = node
	created, err := framework.Clientset.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Equal(t, "true", created.Labels[singletonv1.LabelManaged])
	return created.Name
}

func podReleased(t *testing.T, ns, name string) bool {
	pod, err := framework.Clientset.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	return err == nil && pod.Annotations[singletonv1.AnnotationEpoch] != ""
}

func waitPodReleased(t *testing.T, ns, name string) {
	t.Helper()
	require.Eventually(t, func() bool { return podReleased(t, ns, name) }, 2*time.Minute, framework.Tick, "pod %s released", name)
}

func singletonCondition(t *testing.T, ns, typ string) metav1.ConditionStatus {
	for _, c := range singletonStatus(t, ns).Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

// setOutOfService adds or removes the node.kubernetes.io/out-of-service taint.
func setOutOfService(t *testing.T, node string, on bool) {
	t.Helper()
	framework.RetryOnConflict(t, func() error {
		n, err := framework.Clientset.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var taints []corev1.Taint
		for _, tt := range n.Spec.Taints {
			if tt.Key != corev1.TaintNodeOutOfService {
				taints = append(taints, tt)
			}
		}
		if on {
			taints = append(taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
		}
		n.Spec.Taints = taints
		_, err = framework.Clientset.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
		return err
	})
}

// killOperator SIGKILLs the singleton operator's process on the real node (no shutdown, no lease
// release); the kubelet restarts the container, and the new process waits out the old leader's lease.
func killOperator(t *testing.T) {
	t.Helper()
	require.NoError(t, syscall.Kill(operatorPID(t), syscall.SIGKILL))
	t.Logf("singleton operator SIGKILLed")
}

// operatorPID is the host PID of the singleton operator's one process on the real node.
func operatorPID(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.HasPrefix(string(cmdline), "/singleton-operator\x00") {
			continue
		}
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil || !slices.Contains(strings.Split(string(environ), "\x00"), "POD_NAMESPACE="+framework.SingletonNamespace) {
			continue
		}
		pids = append(pids, pid)
	}
	require.Len(t, pids, 1, "the operator's processes")
	return pids[0]
}

// watchReleased is the API-level invariant checker: it counts the pod events after which two pods of
// one singleton of the namespace (same apps.statefulsingleton.com/singleton label) carry the epoch
// annotation and are not terminal, nor terminating with the exit of every app container reported
// (singletonv1.ExitRecorded). The process-level checker (checkHandovers) is the ground truth for the latter.
func watchReleased(t *testing.T, ns string) {
	t.Helper()
	w, err := framework.Clientset.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	var mu sync.Mutex
	overlaps, events := 0, 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		released := map[string]map[types.UID]bool{} // singleton → pod → released and not terminal
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			singleton := pod.Labels[singletonv1.LabelSingleton]
			if released[singleton] == nil {
				released[singleton] = map[types.UID]bool{}
			}
			terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
			released[singleton][pod.UID] = ev.Type != watch.Deleted && !terminal && !singletonv1.ExitRecorded(pod) && pod.Annotations[singletonv1.AnnotationEpoch] != ""
			n := 0
			for _, r := range released[singleton] {
				if r {
					n++
				}
			}
			mu.Lock()
			events++
			if n > 1 {
				overlaps++
				t.Logf("API-level overlap: %d released, non-terminal pods of singleton %s after an event of pod %s", n, singleton, pod.Name)
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		t.Logf("SINGLETON invariant checker %s: %d pod events, %d overlaps", ns, events, overlaps)
		assert.Zero(t, overlaps, "two released pods at once")
	})
}
