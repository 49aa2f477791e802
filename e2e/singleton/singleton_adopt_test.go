//go:build e2e

package singleton

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/statefulops/statefulops/e2e/framework"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// TestSingletonAdoption adds a StatefulSingleton to a workload whose pod runs without a start hold, in
// both orders a user takes: the workload first and the StatefulSingleton later, and both in one
// `kubectl apply -f` of one file (the pod is then usually created before the operator labelled the
// namespace for the pod webhook). Each for a Deployment and a StatefulSet, on kwok nodes, with the
// operator and the webhook server as local processes (as TestChaosSingleton runs them). The singleton
// must become Ready with the running pod as its active pod (adopted: the Event Adopted), then a rollout
// (a template change) and a pod deletion must hand over from it, while the overlap checker
// (watchReleased) sees two released pods of the singleton at no instant.
func TestSingletonAdoption(t *testing.T) {
	framework.RestoreWebhookService(t) // in case a killed run left it pointing at loopback: the manifest would not apply
	require.NoError(t, framework.InstallManifestOnce("singleton-operator"), "kubectl apply -f deploy/singleton-operator.yaml")
	scaleWebhookDeployment(t, 0)
	t.Cleanup(func() { scaleWebhookDeployment(t, 2) })
	op := framework.StartLocalOperator(t, "singleton-operator")
	framework.StartChaosWebhook(t)

	for _, kind := range []string{"Deployment", "StatefulSet"} {
		t.Run(kind+"/workload first", func(t *testing.T) { adoptionScenario(t, op, kind, false) })
		t.Run(kind+"/one apply", func(t *testing.T) { adoptionScenario(t, op, kind, true) })
	}
	t.Run("Deployment/two pods", adoptionRefused)
}

// adoptionRefused adds a StatefulSingleton to a Deployment with two running pods: none is adopted and
// `kubectl describe` says why and what to do; scaled to one replica, the pod left is adopted.
func adoptionRefused(t *testing.T) {
	ns := framework.NewNamespace(t)
	watchReleased(t, ns)
	applyYAML(t, ns, strings.Replace(adoptionWorkloadYAML("Deployment"), "replicas: 1", "replicas: 2", 1))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=app", FieldSelector: "status.phase=Running"})
		if assert.NoError(c, err) {
			assert.Len(c, pods.Items, 2, "two running pods")
		}
	}, framework.Timeout, framework.Tick)
	applyYAML(t, ns, "apiVersion: apps.openshift.statefulsingleton.com/v1\nkind: StatefulSingleton\nmetadata:\n  name: app\nspec:\n"+
		"  holdMode: SchedulingGate\n  selector:\n    matchLabels: {app: app}\n")
	assert.Contains(t, singletonEventNote(t, ns, singletonv1.ReasonSeveralPodsWithoutHold), "delete all but one")
	describe, err := framework.Kubectl().Run(t.Context(), "describe", "-n", ns, "statefulsingletons.apps.openshift.statefulsingleton.com", "app")
	require.NoError(t, err)
	assert.Contains(t, describe, singletonv1.ReasonSeveralPodsWithoutHold, "kubectl describe shows why")
	t.Logf("kubectl describe, two pods without a hold:\n%s", describe)
	pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=app"})
	require.NoError(t, err)
	for _, p := range pods.Items {
		assert.Empty(t, p.Annotations[singletonv1.AnnotationEpoch], "pod %s not adopted", p.Name)
	}

	_, err = framework.Kubectl().Run(t.Context(), "scale", "-n", ns, "deployment/app", "--replicas=1")
	require.NoError(t, err)
	adopted := waitActiveOnlyPod(t, ns, func(c *assert.CollectT, p *corev1.Pod) {
		assert.Equal(c, "true", p.Annotations[singletonv1.AnnotationAdopted], "pod %s adopted", p.Name)
	})
	t.Logf("scaled to one replica: pod %s adopted", adopted.Name)
}

// adoptionScenario runs one workload of kind under a StatefulSingleton added after it (or with it, in
// one apply), then rolls it out and deletes its pod. The one apply happens while the operator is
// stopped, as when `make run` installs the operator and applies the sample at once: the pod is then
// created before the operator labelled the namespace for the webhook, as the issue reported.
func adoptionScenario(t *testing.T, op *framework.LocalOperator, kind string, oneApply bool) {
	ns := framework.NewNamespace(t)
	watchReleased(t, ns)
	singleton := "apiVersion: apps.openshift.statefulsingleton.com/v1\nkind: StatefulSingleton\nmetadata:\n  name: app\nspec:\n" +
		"  holdMode: SchedulingGate\n  terminationGracePeriod: 10\n  selector:\n    matchLabels: {app: app}\n"
	workload := adoptionWorkloadYAML(kind)

	var first *corev1.Pod
	running := func(c *assert.CollectT, p *corev1.Pod) {
		assert.Equal(c, corev1.PodRunning, p.Status.Phase, "pod %s running", p.Name)
	}
	if oneApply {
		op.Stop()
		applyYAML(t, ns, singleton+"---\n"+workload)
		first = waitOnlyPod(t, ns, running)
		op.Start()
	} else {
		applyYAML(t, ns, workload)
		first = waitOnlyPod(t, ns, running)
		applyYAML(t, ns, singleton)
	}
	require.NotContains(t, first.Labels, singletonv1.LabelManaged, "created before the namespace was labelled: no hold")

	// Ready, with the running pod adopted as the active pod.
	active := waitActiveOnlyPod(t, ns, func(*assert.CollectT, *corev1.Pod) {})
	require.Equal(t, first.UID, active.UID, "the running pod is adopted, not replaced")
	assert.Equal(t, "true", active.Annotations[singletonv1.AnnotationAdopted])
	assert.Contains(t, singletonEventNote(t, ns, singletonv1.ReasonAdopted), "not held")
	t.Logf("%s: pod %s was running without a start hold and was adopted (epoch %s)", kind, active.Name, active.Annotations[singletonv1.AnnotationEpoch])

	// A rollout: the new revision's pod is held until the adopted pod is gone, then released.
	_, err := framework.Kubectl().Run(t.Context(), "patch", "-n", ns, strings.ToLower(kind)+"/app", "--type=merge",
		"-p", `{"spec":{"template":{"metadata":{"annotations":{"rollout":"1"}}}}}`)
	require.NoError(t, err)
	rolled := waitActiveOnlyPod(t, ns, func(c *assert.CollectT, p *corev1.Pod) {
		assert.NotEqual(c, active.UID, p.UID, "the pod of the new template")
		assert.Equal(c, "1", p.Annotations["rollout"], "pod %s of the new template", p.Name)
	})
	t.Logf("%s rollout: pod %s released with epoch %s after the adopted pod %s was gone", kind, rolled.Name, rolled.Annotations[singletonv1.AnnotationEpoch], active.Name)

	// A deletion: the replacement is held until the deleted pod is gone, then released.
	require.NoError(t, framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), rolled.Name, metav1.DeleteOptions{}))
	replaced := waitActiveOnlyPod(t, ns, func(c *assert.CollectT, p *corev1.Pod) {
		assert.NotEqual(c, rolled.UID, p.UID, "the replacement of the deleted pod")
		assert.Equal(c, "1", p.Annotations["rollout"])
	})
	t.Logf("%s deletion: pod %s released with epoch %s after pod %s was gone", kind, replaced.Name, replaced.Annotations[singletonv1.AnnotationEpoch], rolled.Name)
}

// adoptionWorkloadYAML is a one-replica Deployment or StatefulSet "app" of pods labelled app=app.
func adoptionWorkloadYAML(kind string) string {
	extra := ""
	if kind == "StatefulSet" {
		extra = "  serviceName: app\n"
	}
	return fmt.Sprintf("apiVersion: apps/v1\nkind: %s\nmetadata:\n  name: app\nspec:\n  replicas: 1\n%s"+
		"  selector:\n    matchLabels: {app: app}\n  template:\n    metadata:\n      labels: {app: app}\n"+
		"    spec:\n      terminationGracePeriodSeconds: 5\n      containers:\n      - name: main\n        image: %s\n        command: [/pause]\n",
		kind, extra, framework.PauseImage)
}

// applyYAML writes the documents to one file and applies it with `kubectl apply -f` in ns.
func applyYAML(t *testing.T, ns, docs string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "app.yaml")
	require.NoError(t, os.WriteFile(file, []byte(docs), 0o644))
	_, err := framework.Kubectl().Run(t.Context(), "apply", "-n", ns, "-f", file)
	require.NoError(t, err)
}

// waitOnlyPod waits until ns holds exactly one pod labelled app=app, not being deleted, for which check
// passes, and returns it.
func waitOnlyPod(t *testing.T, ns string, check func(*assert.CollectT, *corev1.Pod)) *corev1.Pod {
	t.Helper()
	var only *corev1.Pod
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=app"})
		if !assert.NoError(c, err) || !assert.Len(c, pods.Items, 1, "one pod") {
			return
		}
		p := &pods.Items[0]
		assert.Nil(c, p.DeletionTimestamp, "pod %s being deleted", p.Name)
		check(c, p)
		only = p
	}, framework.Timeout, framework.Tick)
	return only
}

// waitActiveOnlyPod waits until the StatefulSingleton "app" is Ready with the only pod of ns (see
// waitOnlyPod) as its released, active pod, and returns that pod.
func waitActiveOnlyPod(t *testing.T, ns string, check func(*assert.CollectT, *corev1.Pod)) *corev1.Pod {
	t.Helper()
	return waitOnlyPod(t, ns, func(c *assert.CollectT, p *corev1.Pod) {
		check(c, p)
		assert.NotEmpty(c, p.Annotations[singletonv1.AnnotationEpoch], "pod %s released or adopted", p.Name)
		ss := &singletonv1.StatefulSingleton{}
		raw, err := framework.Kubectl().Run(t.Context(), "get", "-n", ns, "statefulsingletons.apps.openshift.statefulsingleton.com", "app", "-o", "json")
		if !assert.NoError(c, err) || !assert.NoError(c, json.Unmarshal([]byte(raw), ss)) {
			return
		}
		assert.Equal(c, types.UID(ss.Status.ActivePodUID), p.UID, "pod %s is the active pod", p.Name)
		ready := meta.FindStatusCondition(ss.Status.Conditions, singletonv1.ConditionReady)
		if assert.NotNil(c, ready, "Ready condition") {
			assert.Equal(c, metav1.ConditionTrue, ready.Status, "Ready: %s", ready.Message)
		}
	})
}

// singletonEventNote waits for an Event of reason about the StatefulSingleton "app" and returns its note.
func singletonEventNote(t *testing.T, ns, reason string) string {
	t.Helper()
	var note string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		events, err := framework.Clientset.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{})
		if !assert.NoError(c, err) {
			return
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "StatefulSingleton" && e.InvolvedObject.Name == "app" && e.Reason == reason {
				note = e.Message
				return
			}
		}
		c.Errorf("no Event %s on StatefulSingleton app", reason)
	}, framework.Timeout, framework.Tick)
	return note
}
