//go:build e2e && bench

package singleton

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/statefulops/statefulops/e2e/benchfmt"
	"github.com/statefulops/statefulops/e2e/framework"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// TestBenchResourcesSingleton is TestBenchResources for the singleton install: singleton-operator and
// the webhook-server, both as local processes (the operator under its manifest's ServiceAccount, the
// webhook on loopback with the pod webhook of deploy/singleton-operator.yaml pointed at it), measured
// the same way and recorded under the same figure names:
//
//   - API writes per minute at rest with framework.ResCRs StatefulSingletons settled, each selecting the pod of
//     its own one-replica StatefulSet of pause pods on kwok (SchedulingGate mode: admitted gated by the
//     webhook, released by the operator, then scheduled and Ready through the readiness gate), Lease
//     renewals aside. Baseline: kube-controller-manager's writes for those StatefulSets, per 100.
//   - resident memory with framework.ResUnrelatedPods unrelated pods (and as many unrelated ConfigMaps+Secrets),
//     half of them in the singletons' namespace, beside the same processes before they existed. The
//     unrelated pods match no StatefulSingleton: the webhook is called for those of the singletons'
//     namespace (it is labelled) and lets them pass unchanged.
//
// It asserts behaviour only: every singleton settled, no two released pods of a singleton at once
// (watchReleased), the unrelated pods admitted unchanged, every object created and deleted again, both
// processes still running. The figures are published by `make bench`, never asserted.
func TestBenchResourcesSingleton(t *testing.T) {
	start := time.Now()
	// As TestBenchSingletonHandover: the manifest first, then the webhook pointed at the local process
	// (its in-cluster pods parked before the operator's, whose name label they share).
	require.NoError(t, framework.InstallManifestOnce("singleton-operator"))
	startBenchLocalWebhook(t)
	framework.StartLocalOperator(t, "singleton-operator")
	op := &framework.ResOperator{Family: "singleton", Name: "singleton-operator"}
	op.PID, op.MetricsPort = framework.ResProcess(t, op.Name)
	webhook := &framework.ResOperator{Family: "webhook-server", Name: "webhook-server", WritesNote: resWebhookWritesNote}
	webhook.PID, webhook.MetricsPort = framework.ResProcessIn(t, filepath.Join(filepath.Dir(framework.Kubeconfig), resWebhookStateDir), webhook.Name)
	ops := []*framework.ResOperator{op, webhook}

	// One token for both: bound to the operator's and the webhook-server's metrics-reader Roles.
	token := framework.ResMetricsToken(t, ops)
	fast := framework.ResFastClient(t)

	ns := framework.NewNamespace(t)
	op.Namespace, webhook.Namespace = ns, ns
	watchReleased(t, ns)
	// Removed while the operator still runs: their finalizers need it (registered after
	// framework.StartLocalOperator, so this cleanup runs before it stops the process).
	t.Cleanup(func() { resDeleteSingletons(t, ns) })
	require.NoError(t, resSingletonWorkloads(t, fast, ns), "creating the workloads")
	resWaitSingletonsSettled(t, ns)
	t.Logf("%d StatefulSingletons settled after %s", framework.ResCRs, time.Since(start).Round(time.Second))

	windows, rssEmpty := framework.ResMinuteAtRest(t, ops, token)

	// The unrelated objects: half in namespaces of their own, half beside the StatefulSingletons.
	unrelatedNS := []string{framework.NewNamespace(t), framework.NewNamespace(t)}
	t.Cleanup(func() { framework.ResDeleteUnrelated(t, unrelatedNS, []string{ns}) })
	created := time.Now()
	counts := framework.ResCreateUnrelated(t, fast, unrelatedNS, []string{ns})
	t.Logf("created %d unrelated pods, %d ConfigMaps, %d Secrets in %s (load: %s)", counts[0], counts[1], counts[2],
		time.Since(created).Round(time.Second), framework.ResLoad())
	resCheckUnrelatedUnheld(t, ns)
	framework.ResWaitRSSSteady(t, ops)
	rssFull := <-framework.ResSampleRSSDuring(t, ops, framework.ResRSSSamples*time.Second, time.Second)

	for _, o := range ops {
		require.True(t, framework.ResAlive(o.PID), "%s is still running", o.Name)
		note := fmt.Sprintf("VmRSS of the local %s process (/proc/<pid>/status). With: %d samples 1 s apart, once RSS "+
			"stayed within 2%% for 5 s after %d unrelated pods (pause container, scheduling gate, so neither the scheduler "+
			"nor kwok touch them; 9 in 10 controlled by an owner object of their namespace as a ReplicaSet's pods are, "+
			"every 10th an orphan; no StatefulSingleton selects them), %d ConfigMaps and %d Secrets (200 bytes of data each) "+
			"were created, half in 2 namespaces of their own and half in the namespace of the %d StatefulSingletons "+
			"(label bench=unrelated; that namespace is labelled for the pod webhook, so the webhook-server admitted each of "+
			"its unrelated pods, unchanged). Baseline: the same process, same cluster, before they existed, with the %d "+
			"StatefulSingletons settled (SchedulingGate mode, each with a one-replica StatefulSet of pause pods; %d samples "+
			"5 s apart during the minute at rest). %s Load during the run: %s.",
			o.Name, framework.ResRSSSamples, framework.ResUnrelatedPods, framework.ResUnrelatedConfig, framework.ResUnrelatedConfig, framework.ResCRs, framework.ResCRs,
			len(rssEmpty[o.Name]), resSingletonCaches[o.Name], framework.ResLoad())
		framework.RecordFigure(t, benchfmt.Figure{
			Operator: o.Family, Name: "resident memory with 10k unrelated pods (and 10k unrelated ConfigMaps+Secrets)",
			Unit: "MiB", Where: "kwok",
			Samples: rssFull[o.Name], Baseline: "same process, cluster without the unrelated objects",
			BaselineSamples: rssEmpty[o.Name], Targets: []benchfmt.Target{benchfmt.AtMost("ratio", 1.2)},
			Note: note,
		})
	}
	framework.ResRecordWrites(t, ops, windows)
	t.Logf("TestBenchResourcesSingleton took %s", time.Since(start).Round(time.Second))
}

// resWebhookStateDir is the state directory (under the cluster's) of startBenchLocalWebhook's process.
const resWebhookStateDir = "webhook-bench"

// resSingletonCaches says, per process, what its caches hold: the reason behind its memory figure.
var resSingletonCaches = map[string]string{
	"singleton-operator": "What it caches: pods labelled apps.statefulsingleton.com/managed=true (the manager's cache, " +
		"CacheOptions); per StatefulSingleton selector, the pods of that selector without the managed label (one cache " +
		"per namespace and selector, filtered by the API server, shared by equal selectors); per namespace holding a " +
		"StatefulSingleton, ReplicaSet metadata and StatefulSets (internal/controller/caches.go). The unrelated pods " +
		"match no selector, so no cache holds them, beside the singletons or elsewhere.",
	"webhook-server": "What it caches: StatefulSingletons only (the pod webhook lists those of the pod's namespace " +
		"from the cache); run with --webhook-cert-path, so its certificate rotator and the rotator's Secret cache are off.",
}

// resWebhookWritesNote completes the webhook-server's writes-at-rest note: what the local process
// does not run, and what the in-cluster replicas write at rest instead.
const resWebhookWritesNote = " The local webhook-server runs without leader election (every replica serves) and with " +
	"--webhook-cert-path, so its certificate rotator (open-policy-agent/cert-controller) is off here. In the cluster each " +
	"replica's rotator checks the certificate every 12 h (writes the Secret only when it is due for renewal, 90 days before " +
	"expiry) and, on every event and resync of its Secret or of the MutatingWebhookConfiguration, PUTs the configuration's " +
	"caBundle even when it is unchanged (a no-op update, still a write request): a few writes per resync period per " +
	"replica, not per minute."

// resSingletonGVR names StatefulSingletons for the dynamic client.
var resSingletonGVR = singletonv1.GroupVersion.WithResource("statefulsingletons")

// resSingletons is a dynamic client of the StatefulSingletons of ns.
func resSingletons(ns string) dynamic.ResourceInterface {
	return dynamic.NewForConfigOrDie(framework.RESTConfig).Resource(resSingletonGVR).Namespace(ns)
}

// resSingletonWorkloads creates framework.ResCRs StatefulSingletons (SchedulingGate mode, selector app=db-NNN),
// waits until the operator labelled the namespace for the webhook and the webhook holds the pods of
// every one of them (a dry-run pod creation runs the webhook and persists nothing), then creates their
// one-replica StatefulSets.
func resSingletonWorkloads(t *testing.T, c kubernetes.Interface, ns string) error {
	t.Helper()
	ctx := t.Context()
	name := func(i int) string { return fmt.Sprintf("db-%03d", i) }
	if err := framework.ResParallel(framework.ResCRs, func(i int) error {
		_, err := resSingletons(ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": singletonv1.GroupVersion.String(), "kind": "StatefulSingleton",
			"metadata": map[string]any{"name": name(i)},
			"spec": map[string]any{"holdMode": string(singletonv1.HoldModeSchedulingGate),
				"selector": map[string]any{"matchLabels": map[string]any{"app": name(i)}}},
		}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	require.Eventually(t, func() bool {
		got, err := framework.Clientset.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return err == nil && got.Labels[singletonv1.LabelNamespaceEnabled] == "true"
	}, framework.Timeout, framework.Tick, "the operator labels the namespace")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, framework.ResParallel(framework.ResCRs, func(i int) error {
			pod := framework.TestPod(name(i) + "-probe")
			pod.Labels["app"] = name(i) // the singleton's selector, not the probe's own name
			probe, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				return err
			}
			if probe.Labels[singletonv1.LabelSingleton] != name(i) {
				return fmt.Errorf("a pod of %s is not yet admitted held", name(i))
			}
			return nil
		}))
	}, framework.Timeout, framework.Tick, "the webhook holds the pods of every StatefulSingleton")
	return framework.ResParallel(framework.ResCRs, func(i int) error {
		_, err := c.AppsV1().StatefulSets(ns).Create(ctx, framework.ResStatefulSet(name(i)), metav1.CreateOptions{})
		return err
	})
}

// resWaitSingletonsSettled waits until every StatefulSingleton of ns is Running with its released pod
// Ready.
func resWaitSingletonsSettled(t *testing.T, ns string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list, err := resSingletons(ns).List(t.Context(), metav1.ListOptions{})
		require.NoError(c, err)
		pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: singletonv1.LabelManaged + "=true"})
		require.NoError(c, err)
		ready := map[string]bool{}
		for i := range pods.Items {
			p := &pods.Items[i]
			ready[p.Name] = p.Annotations[singletonv1.AnnotationEpoch] != "" && framework.PodCondition(p, corev1.PodReady) == corev1.ConditionTrue
		}
		settled := 0
		for _, u := range list.Items {
			phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
			active, _, _ := unstructured.NestedString(u.Object, "status", "activePod")
			if phase == "Running" && ready[active] {
				settled++
			}
		}
		assert.Equal(c, framework.ResCRs, settled, "StatefulSingletons Running with their pod released and Ready")
	}, 5*time.Minute, time.Second, "the %d StatefulSingletons settle", framework.ResCRs)
}

// resCheckUnrelatedUnheld checks that the webhook let the unrelated pods of the singletons' namespace
// pass unchanged: none carries the managed label.
func resCheckUnrelatedUnheld(t *testing.T, ns string) {
	t.Helper()
	pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: framework.ResLabel + "=" + framework.ResLabelValue})
	require.NoError(t, err)
	require.Equal(t, framework.ResUnrelatedPods/2, len(pods.Items), "half of the unrelated pods beside the StatefulSingletons")
	for i := range pods.Items {
		require.NotContains(t, pods.Items[i].Labels, singletonv1.LabelManaged, "unrelated pod %s admitted unchanged", pods.Items[i].Name)
	}
}

// resDeleteSingletons deletes the StatefulSingletons of ns and waits until their finalizers let them go.
func resDeleteSingletons(t *testing.T, ns string) {
	ctx := context.WithoutCancel(t.Context())
	if err := resSingletons(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Logf("deleting the StatefulSingletons of %s: %v", ns, err)
	}
	assert.Eventually(t, func() bool {
		list, err := resSingletons(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0
	}, framework.Timeout, framework.Tick, "the StatefulSingletons are gone")
}
