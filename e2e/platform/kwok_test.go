//go:build e2e

package platform

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// These tests prove the simulation rules of the local cluster's kwok Stages (localcluster/stages/).

// TestKwokNodes checks the kwok nodes Up creates: Ready, one per zone, with a Lease that kwok renews.
func TestKwokNodes(t *testing.T) {
	nodes, err := framework.Clientset.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{LabelSelector: "type=kwok"})
	require.NoError(t, err)
	var names, zones []string
	for _, node := range nodes.Items {
		names = append(names, node.Name)
		zones = append(zones, node.Labels[corev1.LabelTopologyZone])
		assert.Equal(t, corev1.ConditionTrue, framework.NodeCondition(&node, corev1.NodeReady), "node %s Ready", node.Name)
		assert.Equal(t, node.Name, node.Labels[corev1.LabelHostname])

		lease, err := framework.Clientset.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(t.Context(), node.Name, metav1.GetOptions{})
		if assert.NoError(t, err, "lease of node %s", node.Name) {
			assert.WithinDuration(t, time.Now(), lease.Spec.RenewTime.Time, time.Minute, "lease of node %s renewed", node.Name)
		}
	}
	assert.ElementsMatch(t, []string{"statefulops-kwok-0", "statefulops-kwok-1", "statefulops-kwok-2"}, names)
	assert.ElementsMatch(t, []string{"zone-a", "zone-b", "zone-c"}, zones)
}

// TestKwokReadinessGate checks that kwok never sets a readiness gate's condition: the pod runs with
// ContainersReady=True but stays Ready=False until the test (standing in for the gate's controller)
// sets the gate condition True, and Ready follows when the gate flips back.
func TestKwokReadinessGate(t *testing.T) {
	const gate = "statefulops.dev/e2e-gate"
	ns := framework.NewNamespace(t)
	pod := framework.TestPod("gated")
	pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: gate}}
	framework.CreatePod(t, ns, pod)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := framework.FetchPod(t, ns, "gated")
		require.NoError(c, err)
		assert.Equal(c, corev1.ConditionTrue, framework.PodCondition(p, corev1.ContainersReady))
	}, framework.Timeout, framework.Tick, "containers ready")
	testsupport.NeverWithin(t, 3*time.Second, framework.Tick, func() bool {
		p, err := framework.FetchPod(t, ns, "gated")
		return err == nil && (framework.PodCondition(p, corev1.PodReady) == corev1.ConditionTrue || framework.PodCondition(p, gate) != "")
	}, "Ready or the gate condition set without the gate's controller")

	setGate := func(status corev1.ConditionStatus) {
		patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
			Type: gate, Status: status, LastTransitionTime: metav1.Now(),
		}}}})
		require.NoError(t, err)
		_, err = framework.Clientset.CoreV1().Pods(ns).Patch(t.Context(), "gated", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		require.NoError(t, err)
	}
	waitReady := func(want corev1.ConditionStatus) {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			p, err := framework.FetchPod(t, ns, "gated")
			require.NoError(c, err)
			assert.Equal(c, want, framework.PodCondition(p, corev1.PodReady))
		}, framework.Timeout, framework.Tick, "pod Ready=%s", want)
	}

	setGate(corev1.ConditionTrue)
	waitReady(corev1.ConditionTrue)
	setGate(corev1.ConditionFalse)
	waitReady(corev1.ConditionFalse)
	assert.Equal(t, corev1.ConditionTrue, framework.PodCondition(framework.GetPod(t, ns, "gated"), corev1.ContainersReady))
}

// TestKwokPodScheduled checks that a running pod shows PodScheduled=True, as under a real kubelet: a
// pod released from a scheduling gate, and one whose PodScheduled a late status patch (the scheduler's
// SchedulingGated, written for a gate removed a moment earlier) turned back to False while it ran.
func TestKwokPodScheduled(t *testing.T) {
	ns := framework.NewNamespace(t)
	pod := framework.TestPod("released")
	pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "statefulops.dev/e2e-hold"}}
	_, err := framework.Clientset.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := framework.FetchPod(t, ns, "released")
		require.NoError(c, err)
		assert.Equal(c, corev1.PodReasonSchedulingGated, framework.PodConditionReason(p, corev1.PodScheduled))
	}, framework.Timeout, framework.Tick, "the scheduler reports the gate")

	_, err = framework.Clientset.CoreV1().Pods(ns).Patch(t.Context(), "released", types.JSONPatchType,
		[]byte(`[{"op":"remove","path":"/spec/schedulingGates"}]`), metav1.PatchOptions{})
	require.NoError(t, err)
	scheduledAndRunning := func(what string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			p, err := framework.FetchPod(t, ns, "released")
			require.NoError(c, err)
			assert.Equal(c, corev1.PodRunning, p.Status.Phase)
			assert.Equal(c, corev1.ConditionTrue, framework.PodCondition(p, corev1.PodScheduled))
			assert.Empty(c, framework.PodConditionReason(p, corev1.PodScheduled))
			assert.Equal(c, corev1.ConditionTrue, framework.PodCondition(p, corev1.PodReady))
		}, framework.Timeout, framework.Tick, what)
	}
	scheduledAndRunning("released pod running with PodScheduled=True")

	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonSchedulingGated,
		Message: "late status patch", LastTransitionTime: metav1.Now(),
	}}}})
	require.NoError(t, err)
	_, err = framework.Clientset.CoreV1().Pods(ns).Patch(t.Context(), "released", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	require.NoError(t, err)
	scheduledAndRunning("a late SchedulingGated patch corrected")
}

// TestKwokTerminatingSeconds checks how long a deleted pod stays Terminating: 1s by default, the
// value of the annotation statefulops.dev/kwok-terminating-seconds, but never longer than its grace
// period. Timestamps have a one-second resolution, hence the loose bounds.
func TestKwokTerminatingSeconds(t *testing.T) {
	for _, tc := range []struct {
		name          string
		annotation    string
		grace         int64
		atLeast, most time.Duration
	}{
		{name: "default", grace: 30, atLeast: 0, most: 5 * time.Second},
		{name: "annotated", annotation: "6", grace: 30, atLeast: 4500 * time.Millisecond, most: 12 * time.Second},
		{name: "capped-by-grace", annotation: "600", grace: 4, atLeast: 2500 * time.Millisecond, most: 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := framework.NewNamespace(t)
			pod := framework.TestPod("doomed")
			pod.Spec.TerminationGracePeriodSeconds = ptr.To(tc.grace)
			if tc.annotation != "" {
				pod.Annotations = map[string]string{localcluster.TerminatingSecondsAnnotation: tc.annotation}
			}
			framework.CreatePod(t, ns, pod)

			start := time.Now()
			require.NoError(t, framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), "doomed", metav1.DeleteOptions{}))
			if tc.atLeast > time.Second {
				// Still there, Terminating, well before its time.
				time.Sleep(tc.atLeast - time.Second)
				assert.NotNil(t, framework.GetPod(t, ns, "doomed").DeletionTimestamp)
			}
			require.Eventually(t, func() bool { return framework.PodGone(t, ns, "doomed") }, framework.Timeout, 100*time.Millisecond)
			elapsed := time.Since(start)
			t.Logf("terminating for %s", elapsed.Round(time.Millisecond))
			assert.GreaterOrEqual(t, elapsed, tc.atLeast)
			assert.LessOrEqual(t, elapsed, tc.most)
		})
	}
}

// TestKwokNodeNotReady makes a node NotReady, as if its kubelet died, and checks that its pods stay
// put: still bound and running on paper but marked not ready by the node controller, and a deleted one
// is not removed (nobody is there to stop its containers) until the node is Ready again.
func TestKwokNodeNotReady(t *testing.T) {
	node := localcluster.NodeName(2)
	ns := framework.NewNamespace(t)
	for _, name := range []string{"stranded", "doomed"} {
		pod := framework.TestPod(name)
		pod.Spec.NodeName = node
		framework.CreatePod(t, ns, pod)
	}
	before := framework.GetPod(t, ns, "stranded")
	// Registered after the namespace, so it runs before the namespace is deleted.
	t.Cleanup(func() {
		assert.NoError(t, localcluster.SetNodeReady(context.Background(), framework.Clientset, node, true))
	})

	start := time.Now()
	require.NoError(t, localcluster.SetNodeReady(t.Context(), framework.Clientset, node, false))
	t.Logf("node NotReady after %s", time.Since(start).Round(time.Millisecond))
	n, err := framework.Clientset.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, []corev1.ConditionStatus{corev1.ConditionFalse, corev1.ConditionUnknown}, framework.NodeCondition(n, corev1.NodeReady))

	require.NoError(t, framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), "doomed", metav1.DeleteOptions{}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := framework.FetchPod(t, ns, "stranded")
		require.NoError(c, err)
		assert.Equal(c, corev1.ConditionFalse, framework.PodCondition(p, corev1.PodReady), "marked not ready by the node controller")
	}, framework.Timeout, framework.Tick)
	after := framework.GetPod(t, ns, "stranded")
	assert.Equal(t, before.UID, after.UID)
	assert.Equal(t, node, after.Spec.NodeName)
	assert.Equal(t, corev1.PodRunning, after.Status.Phase)
	testsupport.NeverWithin(t, 3*time.Second, framework.Tick, func() bool { return framework.PodGone(t, ns, "doomed") }, "pod removed from a NotReady node")
	assert.NotNil(t, framework.GetPod(t, ns, "doomed").DeletionTimestamp)

	require.NoError(t, localcluster.SetNodeReady(t.Context(), framework.Clientset, node, true))
	require.Eventually(t, func() bool { return framework.PodGone(t, ns, "doomed") }, framework.Timeout, framework.Tick, "pod removed once its node is back")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := framework.FetchPod(t, ns, "stranded")
		require.NoError(c, err)
		assert.Equal(c, corev1.ConditionTrue, framework.PodCondition(p, corev1.PodReady), "ready again")
	}, framework.Timeout, framework.Tick)
}

// TestKwokPodCompletes checks that pods which may complete do so when annotated with an exit code:
// a Job's pod exits 0 and the Job completes; a pod exiting 3 fails; a pod that always restarts ignores
// the annotation.
func TestKwokPodCompletes(t *testing.T) {
	ns := framework.NewNamespace(t)

	t.Run("job succeeds", func(t *testing.T) {
		t.Parallel()
		template := framework.PodTemplate("job")
		template.Annotations = map[string]string{localcluster.ExitCodeAnnotation: "0"}
		template.Spec.RestartPolicy = corev1.RestartPolicyNever
		_, err := framework.Clientset.BatchV1().Jobs(ns).Create(t.Context(), &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "job"},
			Spec:       batchv1.JobSpec{Template: template},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			job, err := framework.Clientset.BatchV1().Jobs(ns).Get(t.Context(), "job", metav1.GetOptions{})
			require.NoError(c, err)
			assert.True(c, slices.ContainsFunc(job.Status.Conditions, func(cond batchv1.JobCondition) bool {
				return cond.Type == batchv1.JobComplete && cond.Status == corev1.ConditionTrue
			}), "job complete: %+v", job.Status)
			assert.EqualValues(c, 1, job.Status.Succeeded)
		}, framework.Timeout, framework.Tick)
	})

	t.Run("pod fails", func(t *testing.T) {
		t.Parallel()
		pod := framework.TestPod("failing")
		pod.Annotations = map[string]string{localcluster.ExitCodeAnnotation: "3"}
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
		_, err := framework.Clientset.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
		require.NoError(t, err)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			p, err := framework.FetchPod(t, ns, "failing")
			require.NoError(c, err)
			require.Equal(c, corev1.PodFailed, p.Status.Phase)
			require.Len(c, p.Status.ContainerStatuses, 1)
			terminated := p.Status.ContainerStatuses[0].State.Terminated
			require.NotNil(c, terminated)
			assert.EqualValues(c, 3, terminated.ExitCode)
		}, framework.Timeout, framework.Tick)
	})

	t.Run("always restarting pod keeps running", func(t *testing.T) {
		t.Parallel()
		pod := framework.TestPod("server")
		pod.Annotations = map[string]string{localcluster.ExitCodeAnnotation: "0"}
		framework.CreatePod(t, ns, pod)
		testsupport.NeverWithin(t, 3*time.Second, framework.Tick, func() bool {
			p, err := framework.FetchPod(t, ns, "server")
			return err == nil && p.Status.Phase != corev1.PodRunning
		})
	})
}
