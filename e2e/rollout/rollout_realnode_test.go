//go:build e2e

package rollout

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
	"github.com/statefulops/statefulops/e2e/operators"
	"github.com/statefulops/statefulops/e2e/realnode"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// TestRolloutOnTheRealNode: rollout-operator installed from deploy/rollout-operator.yaml runs as a real
// pod on the real node, under the manifest's RBAC, and gates a 3-replica StatefulSet of the e2e test
// app (real containers on the real node) with checks against a real Prometheus (Debian's) that scrapes
// the app's own /metrics (the pods' IPs, kept current in a file_sd targets file as pods roll).
// Prometheus listens on loopback; the operator reaches it through the test's recording
// proxy bound to the host's address on the real node's bridge, which feeds the invariant checker.
//
// Two rollouts of the same StatefulSet: the first passes (3→2→1→0, the last pod verified, partition
// back to replicas); the second revision makes the app report testapp_value 5, so the first pod rolled
// to it fails its checks: Failed after maxTries, the partition stays, the other pods keep the old
// revision.
func TestRolloutOnTheRealNode(t *testing.T) {
	if !framework.NeedRealNode(t) {
		return
	}
	root, err := localcluster.RepoRoot()
	require.NoError(t, err)
	require.NoError(t, operators.Install(t.Context(), framework.Kubectl(), []string{filepath.Join(root, "deploy", "rollout-operator.yaml")}),
		"kubectl apply -f deploy/rollout-operator.yaml")
	_, err = framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", "rollout-operator-system",
		"deployment/rollout-operator-controller-manager", "--timeout=180s")
	require.NoError(t, err)
	opPods, err := framework.Clientset.CoreV1().Pods("rollout-operator-system").List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=rollout-operator"})
	require.NoError(t, err)
	require.NotEmpty(t, opPods.Items)
	require.Equal(t, realnode.NodeName, opPods.Items[0].Spec.NodeName, "the operator runs on the real node")

	ns := framework.NewNamespace(t)
	prom := startPrometheusWith(t, testAppScrapeConfig(t, ns))
	proxy := newRecordingProxyOn(t, prom.url, net.JoinHostPort(bridgeAddress(t), "0"))
	proxyURL, err := url.Parse(proxy.url)
	require.NoError(t, err)
	t.Logf("Prometheus %s, reached by the operator pod through the recording proxy %s", prom.url, proxyURL.Host)

	createRolloutTestApp(t, ns, "web", 3)
	// The scrape works before anything depends on it: under the default semantic (data = failed) a
	// query about pods Prometheus never saw would pass, which the guard in the query also prevents.
	require.Eventually(t, func() bool { return promSeries(t, prom.url, fmt.Sprintf(`testapp_up{namespace=%q}`, ns)) == 3 },
		framework.Timeout, framework.Tick, "Prometheus scrapes the 3 pods of the test app")

	// Credentials from a Secret: the operator holds no Secret permission of its own; it reads this one
	// through the RoleBinding it creates in this namespace (the proxy sees the bearer token).
	_, err = framework.Clientset.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "prom-auth"},
		StringData: map[string]string{"token": "real-node-token"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	pw := watchPartition(t, ns, "web")
	// Fails when the rolled pod reports a non-zero testapp_value, or when Prometheus has no series of it.
	expr := `testapp_value{namespace="{{namespace}}",pod="{{pod}}"} > 0 or absent(testapp_up{namespace="{{namespace}}",pod="{{pod}}"})`
	createPhasedRolloutSpec(t, ns, "pr", map[string]any{
		"targetRef": "web",
		"check": map[string]any{
			"initialDelaySeconds": int64(2), "periodSeconds": int64(1), "successThreshold": int64(2), "maxTries": int64(4),
			"query": map[string]any{"expr": expr, "url": proxyURL.Host, "secretRef": "prom-auth"}, // no scheme: http (seed example style)
		},
	})
	waitRolloutPhase(t, ns, "pr", "Updated")
	waitPartitionValue(t, ns, "web", 3)

	// 1. A rollout that passes.
	start := time.Now()
	framework.BumpTemplate(t, ns, "web", "2")
	waitRolloutPhase(t, ns, "pr", "Updated")
	waitPartitionValue(t, ns, "web", 3)
	framework.WaitStatefulSetReady(t, ns, "web", 3)
	t.Logf("passing rollout of 3 real pods: Updated %s after the template change", time.Since(start).Round(time.Millisecond))
	require.Eventually(t, func() bool { return len(pw.values()) >= 5 }, framework.Timeout, framework.Tick, "the watch saw the last change")
	assert.Equal(t, []int32{3, 2, 1, 0, 3}, pw.values())
	goodRev := stsUpdateRevisionOf(t, ns, "web")

	// 2. A revision whose app reports a bad value: the first pod rolled to it fails its checks.
	bad := filepath.Join(realnode.RecordDir(framework.RealNode.StateDir), ns+"-bad.value")
	require.NoError(t, os.WriteFile(bad, []byte("5\n"), 0o644))
	t.Cleanup(func() { _ = os.Remove(bad) })
	patch := fmt.Sprintf(`[{"op":"add","path":"/spec/template/spec/containers/0/env/-","value":{"name":"TESTAPP_VALUE_FILE","value":"/records/%s-bad.value"}}]`, ns)
	_, err = framework.Clientset.AppsV1().StatefulSets(ns).Patch(t.Context(), "web", types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
	waitRolloutPhase(t, ns, "pr", "Failed")
	assert.Equal(t, int32(2), stsPartition(t, ns, "web"), "the rollout stops at the first pod of the bad revision")
	testsupport.NeverWithin(t, 5*time.Second, framework.Tick, func() bool { return stsPartition(t, ns, "web") != 2 }, "Failed holds the partition")
	for _, pod := range []string{"web-0", "web-1"} {
		p, err := framework.Clientset.CoreV1().Pods(ns).Get(t.Context(), pod, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, goodRev, p.Labels[appsv1.ControllerRevisionHashLabelKey], "%s keeps the good revision", pod)
	}
	pr, err := getPhasedRollout(t, ns, "pr")
	require.NoError(t, err)
	t.Logf("Failed: %s; last query result: %s", pr.Status.Message, pr.Status.LastQueryResult)

	rb, err := framework.Clientset.RbacV1().RoleBindings(ns).Get(t.Context(), "rollout-operator-secret-reader", metav1.GetOptions{})
	require.NoError(t, err, "the operator bound the secret reader in this namespace")
	t.Logf("RoleBinding %s/%s → ClusterRole %s for %v", ns, rb.Name, rb.RoleRef.Name, rb.Subjects)
	for _, r := range proxy.snapshot() {
		if strings.Contains(r.query, ns) {
			require.Equal(t, "Bearer real-node-token", r.auth, "every query carries the Secret's token")
		}
	}

	inv := checkAdvances(pw, proxy, ns, 2)
	t.Logf("SUMMARY rollout-operator real node: partition history %v: %d advances, %d unchecked; %d queries, %d passed; step overhead p50 %s p99 %s",
		pw.values(), inv.advances, inv.unchecked, inv.queries, inv.passes,
		rolloutPercentile(inv.overheads, 50).Round(time.Millisecond), rolloutPercentile(inv.overheads, 99).Round(time.Millisecond))
	assert.Zero(t, inv.unchecked, "partition advances without 2 passing checks")
	assert.Equal(t, 4, inv.advances, "3 advances in the passing rollout, 1 in the failing one")
}

// createRolloutTestApp runs the test app on the real node as a StatefulSet and waits until all its
// replicas are Ready.
func createRolloutTestApp(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	pod := framework.TestAppPod(name)
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            &replicas,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template:            corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec},
		},
	}
	_, err := framework.Clientset.AppsV1().StatefulSets(ns).Create(t.Context(), sts, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", ns, "statefulset/"+name, "--timeout=120s")
	require.NoError(t, err)
}

// testAppScrapeConfig scrapes the pods of namespace ns through a file_sd targets file the test keeps
// up to date from a watch of the pods (Debian's Prometheus is built without Kubernetes service
// discovery), each target labelled with its namespace and pod; pod IPs change as pods roll.
func testAppScrapeConfig(t *testing.T, ns string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "targets.json")
	require.NoError(t, os.WriteFile(file, []byte("[]"), 0o644))
	w, err := framework.Clientset.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	go func() {
		type group struct {
			Targets []string          `json:"targets"`
			Labels  map[string]string `json:"labels"`
		}
		ips := map[string]string{}
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if ev.Type == watch.Deleted || pod.Status.PodIP == "" || !pod.DeletionTimestamp.IsZero() {
				delete(ips, pod.Name)
			} else {
				ips[pod.Name] = pod.Status.PodIP
			}
			groups := []group{}
			for name, ip := range ips {
				groups = append(groups, group{Targets: []string{net.JoinHostPort(ip, "8080")}, Labels: map[string]string{"namespace": ns, "pod": name}})
			}
			raw, _ := json.Marshal(groups)
			tmp := file + ".tmp"
			if os.WriteFile(tmp, raw, 0o644) == nil {
				_ = os.Rename(tmp, file)
			}
		}
	}()
	return fmt.Sprintf(`  - job_name: testapp
    file_sd_configs:
      - files: [%q]
        refresh_interval: 1s
`, file)
}

// bridgeAddress returns the host's IPv4 address on the real node's pod bridge: pods reach the host there.
func bridgeAddress(t *testing.T) string {
	t.Helper()
	iface, err := net.InterfaceByName(realnode.BridgeName)
	require.NoError(t, err)
	addrs, err := iface.Addrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if ipnet, ok := a.(*net.IPNet); ok && ipnet.IP.To4() != nil {
			return ipnet.IP.String()
		}
	}
	t.Fatalf("no IPv4 address on %s", realnode.BridgeName)
	return ""
}

// promSeries returns the number of series an instant query returns (-1 on error).
func promSeries(t *testing.T, promURL, query string) int {
	t.Helper()
	resp, err := http.Get(promURL + "/api/v1/query?query=" + url.QueryEscape(query))
	if err != nil {
		return -1
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	var parsed struct {
		Data struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &parsed) != nil {
		return -1
	}
	return len(parsed.Data.Result)
}
