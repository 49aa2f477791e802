//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	"github.com/statefulops/statefulops/shared/seedexamples"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// TestStatefulCluster runs cluster-operator (a local process under its manifest's RBAC) against the
// local cluster's kwok nodes. Every scenario has an invariant checker that records every pod name ever
// created (reuses must be 0) and the live pods (creations beyond replicas + allowed surge must be 0);
// the last line is the SUMMARY with the replacement latency after a node is lost.
func TestStatefulCluster(t *testing.T) {
	op := startClusterOperator(t)

	t.Run("scale-0-5-2-5", func(t *testing.T) {
		ns := framework.NewNamespace(t)
		c := watchIdentities(t, ns, "scale", 0)
		createStatefulCluster(t, ns, framework.NewStatefulCluster("scale", 0))
		waitStatefulClusterReady(t, ns, "scale", 0, framework.Timeout)
		c.setBound(5)
		patchStatefulCluster(t, ns, "scale", `{"spec":{"replicas":5}}`)
		waitStatefulClusterReady(t, ns, "scale", 5, framework.Timeout)
		patchStatefulCluster(t, ns, "scale", `{"spec":{"replicas":2}}`)
		waitStatefulClusterReady(t, ns, "scale", 2, framework.Timeout)
		c.setBound(2)
		assert.Equal(t, []string{"scale-0", "scale-1"}, sortedNames(livePods(t, ns, "scale")), "the newest identities went first")
		c.setBound(5)
		patchStatefulCluster(t, ns, "scale", `{"spec":{"replicas":5}}`)
		sc := waitStatefulClusterReady(t, ns, "scale", 5, framework.Timeout)
		assert.Equal(t, []string{"scale-0", "scale-1", "scale-5", "scale-6", "scale-7"}, sortedNames(livePods(t, ns, "scale")))
		assert.EqualValues(t, 8, sc.Status.NextIdentity)
	})

	t.Run("node-not-ready", func(t *testing.T) {
		ns := framework.NewNamespace(t)
		const replicas, tolerance = 6, 5
		c := watchIdentities(t, ns, "lost", replicas)
		sc := framework.NewStatefulCluster("lost", replicas)
		sc.Spec.NodeLossToleranceSeconds = ptr.To[int32](tolerance)
		sc.Spec.Template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.ScheduleAnyway,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "lost"}},
		}}
		createStatefulCluster(t, ns, sc)
		waitStatefulClusterReady(t, ns, "lost", replicas, framework.Timeout)
		for round, i := range []int{2, 1} {
			node := localcluster.NodeName(i)
			var victims []string
			for name, p := range livePods(t, ns, "lost") {
				if p.Spec.NodeName == node {
					victims = append(victims, name)
				}
			}
			t.Cleanup(func() {
				assert.NoError(t, localcluster.SetNodeReady(context.Background(), framework.Clientset, node, true))
			})
			start := time.Now()
			require.NoError(t, localcluster.SetNodeReady(t.Context(), framework.Clientset, node, false))
			// Latency runs from the node's Ready condition turning (its lastTransitionTime, one-second
			// resolution), the moment nodeLossToleranceSeconds is measured from.
			notReady := time.Now()
			if n, err := framework.Clientset.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{}); err == nil {
				for _, cond := range n.Status.Conditions {
					if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue {
						notReady = cond.LastTransitionTime.Time
					}
				}
			}
			t.Logf("round %d: node %s NotReady after %s, %d pods on it: %v", round+1, node, time.Since(start).Round(time.Millisecond), len(victims), victims)
			require.EventuallyWithT(t, func(col *assert.CollectT) {
				names, _ := c.createdAfter(start)
				assert.GreaterOrEqual(col, len(names), len(victims), "replacements created")
			}, framework.Timeout, framework.Tick)
			waitStatefulClusterReady(t, ns, "lost", replicas, framework.Timeout)
			names, times := c.createdAfter(start)
			for k, at := range times {
				lat := at.Sub(notReady)
				clusterSummary.mu.Lock()
				clusterSummary.latencies = append(clusterSummary.latencies, lat)
				clusterSummary.beyondTolerance = append(clusterSummary.beyondTolerance, lat-tolerance*time.Second)
				clusterSummary.mu.Unlock()
				t.Logf("round %d: replacement %s created %s after the node went NotReady (tolerance %ds)", round+1, names[k], lat.Round(time.Millisecond), tolerance)
			}
			// The old pods are still there, Terminating (nobody force-deletes them) and not counted.
			for _, v := range victims {
				p, err := framework.FetchPod(t, ns, v)
				if err == nil {
					assert.NotNil(t, p.DeletionTimestamp, "pod %s on the lost node is Terminating", v)
				}
			}
			got := getStatefulCluster(t, ns, "lost")
			require.NotNil(t, got)
			for _, v := range victims {
				found := false
				for _, rec := range got.Status.Identities {
					found = found || (rec.Name == v && rec.Reason == clusterv1alpha1.RetiredNodeLost)
				}
				assert.True(t, found, "ledger records %s as NodeLost", v)
			}
			require.NoError(t, localcluster.SetNodeReady(t.Context(), framework.Clientset, node, true))
			for _, v := range victims {
				require.Eventually(t, func() bool { return framework.PodGone(t, ns, v) }, framework.Timeout, framework.Tick, "old pod %s removed once its node is back", v)
			}
		}
	})

	t.Run("zone-spread", func(t *testing.T) {
		ns := framework.NewNamespace(t)
		const replicas = 6
		watchIdentities(t, ns, "zones", replicas)
		sc := framework.NewStatefulCluster("zones", replicas)
		sc.Spec.ZoneSpread = &clusterv1alpha1.ZoneSpread{TopologyKey: corev1.LabelTopologyZone}
		sc.Spec.NodeLossToleranceSeconds = ptr.To[int32](5)
		createStatefulCluster(t, ns, sc)
		waitStatefulClusterReady(t, ns, "zones", replicas, framework.Timeout)
		zoneOfNode := map[string]string{}
		nodes, err := framework.Clientset.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		for _, n := range nodes.Items {
			zoneOfNode[n.Name] = n.Labels[corev1.LabelTopologyZone]
		}
		perZone := map[string]int{}
		for _, p := range livePods(t, ns, "zones") {
			zone := p.Labels[clusterv1alpha1.ZoneLabel]
			perZone[zone]++
			assert.Equal(t, zone, zoneOfNode[p.Spec.NodeName], "pod %s runs in its zone", p.Name)
		}
		assert.Equal(t, map[string]int{"zone-a": 2, "zone-b": 2, "zone-c": 2}, perZone)
		// zone-c's only node is lost: its identities are replaced in the zones that still have capacity.
		node := localcluster.NodeName(2)
		t.Cleanup(func() {
			assert.NoError(t, localcluster.SetNodeReady(context.Background(), framework.Clientset, node, true))
		})
		require.NoError(t, localcluster.SetNodeReady(t.Context(), framework.Clientset, node, false))
		// Wait for the spread itself: the Ready status alone can still be the one from before the
		// node loss was noticed (it is only acted on after nodeLossToleranceSeconds).
		require.EventuallyWithT(t, func(col *assert.CollectT) {
			perZone = map[string]int{}
			for _, p := range livePods(t, ns, "zones") {
				perZone[p.Labels[clusterv1alpha1.ZoneLabel]]++
			}
			assert.Equal(col, map[string]int{"zone-a": 3, "zone-b": 3}, perZone)
		}, framework.Timeout, framework.Tick, "zone-c's identities replaced in zone-a and zone-b")
		waitStatefulClusterReady(t, ns, "zones", replicas, framework.Timeout)
		t.Logf("after losing zone-c's node: %v", perZone)
		require.NoError(t, localcluster.SetNodeReady(t.Context(), framework.Clientset, node, true))
	})

	t.Run("failed-pod", func(t *testing.T) {
		ns := framework.NewNamespace(t)
		c := watchIdentities(t, ns, "fail", 3)
		createStatefulCluster(t, ns, framework.NewStatefulCluster("fail", 3))
		waitStatefulClusterReady(t, ns, "fail", 3, framework.Timeout)
		// As a kubelet reports a pod it evicted or whose node rebooted: phase Failed.
		_, err := framework.Clientset.CoreV1().Pods(ns).Patch(t.Context(), "fail-1", types.MergePatchType,
			[]byte(`{"status":{"phase":"Failed","reason":"Evicted"}}`), metav1.PatchOptions{}, "status")
		require.NoError(t, err)
		waitStatefulClusterReady(t, ns, "fail", 3, framework.Timeout)
		require.Eventually(t, func() bool {
			_, ok := livePods(t, ns, "fail")["fail-3"]
			return ok
		}, framework.Timeout, framework.Tick, "fail-1 replaced by fail-3")
		names, _, _ := c.counts()
		assert.Equal(t, 4, names)
	})

	t.Run("rolling-update-surge", func(t *testing.T) {
		ns := framework.NewNamespace(t)
		c := watchIdentities(t, ns, "roll", 5)
		sc := framework.NewStatefulCluster("roll", 4)
		sc.Spec.UpdateStrategy.RollingUpdate = &clusterv1alpha1.RollingUpdateStatefulClusterStrategy{
			MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}
		createStatefulCluster(t, ns, sc)
		first := waitStatefulClusterReady(t, ns, "roll", 4, framework.Timeout)
		patchStatefulCluster(t, ns, "roll", `{"spec":{"template":{"metadata":{"annotations":{"version":"2"}}}}}`)
		after := waitStatefulClusterReady(t, ns, "roll", 4, 3*framework.Timeout)
		assert.NotEqual(t, first.Status.UpdateRevision, after.Status.UpdateRevision)
		assert.Equal(t, []string{"roll-4", "roll-5", "roll-6", "roll-7"}, sortedNames(livePods(t, ns, "roll")), "every updated pod is a new identity")
		t.Logf("rolling update with maxSurge 1: max live pods %d (bound 5)", c.maxLiveNow())
	})

	t.Run("rolling-update-default", func(t *testing.T) {
		ns := framework.NewNamespace(t)
		watchIdentities(t, ns, "rolld", 3)
		createStatefulCluster(t, ns, framework.NewStatefulCluster("rolld", 3))
		waitStatefulClusterReady(t, ns, "rolld", 3, framework.Timeout)
		patchStatefulCluster(t, ns, "rolld", `{"spec":{"template":{"metadata":{"annotations":{"version":"2"}}}}}`)
		waitStatefulClusterReady(t, ns, "rolld", 3, 3*framework.Timeout)
		assert.Equal(t, []string{"rolld-3", "rolld-4", "rolld-5"}, sortedNames(livePods(t, ns, "rolld")))
	})

	t.Run("on-delete", func(t *testing.T) {
		ns := framework.NewNamespace(t)
		watchIdentities(t, ns, "ondel", 3)
		sc := framework.NewStatefulCluster("ondel", 3)
		sc.Spec.UpdateStrategy = clusterv1alpha1.StatefulClusterUpdateStrategy{Type: clusterv1alpha1.OnDeleteStrategyType}
		createStatefulCluster(t, ns, sc)
		waitStatefulClusterReady(t, ns, "ondel", 3, framework.Timeout)
		patchStatefulCluster(t, ns, "ondel", `{"spec":{"template":{"metadata":{"annotations":{"version":"2"}}}}}`)
		testsupport.NeverWithin(t, 3*time.Second, framework.Tick, func() bool {
			return strings.Join(sortedNames(livePods(t, ns, "ondel")), ",") != "ondel-0,ondel-1,ondel-2"
		}, "OnDelete: a pod changed without being deleted")
		require.NoError(t, framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), "ondel-1", metav1.DeleteOptions{}))
		require.Eventually(t, func() bool {
			p, ok := livePods(t, ns, "ondel")["ondel-3"]
			got := getStatefulCluster(t, ns, "ondel")
			return ok && got != nil && p.Labels[clusterv1alpha1.RevisionLabel] == got.Status.UpdateRevision && p.Annotations["version"] == "2"
		}, framework.Timeout, framework.Tick, "ondel-1 replaced by ondel-3 of the update revision")
		assert.Equal(t, "", livePods(t, ns, "ondel")["ondel-0"].Annotations["version"], "untouched pods keep their revision")
	})

	t.Run("claim-retention", func(t *testing.T) {
		ns := framework.NewNamespace(t)
		watchIdentities(t, ns, "vols", 3)
		sc := framework.NewStatefulCluster("vols", 3)
		withDataClaim(sc)
		sc.Spec.PersistentVolumeClaimRetentionPolicy = &clusterv1alpha1.PersistentVolumeClaimRetentionPolicy{
			WhenScaled: clusterv1alpha1.DeleteClaimRetentionPolicy, WhenReplaced: clusterv1alpha1.RetainClaimRetentionPolicy}
		createStatefulCluster(t, ns, sc)
		waitStatefulClusterReady(t, ns, "vols", 3, framework.Timeout)
		for _, n := range []string{"vols-data-0", "vols-data-1", "vols-data-2"} {
			pvc, err := framework.Clientset.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), n, metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, corev1.ClaimBound, pvc.Status.Phase)
		}
		patchStatefulCluster(t, ns, "vols", `{"spec":{"replicas":2}}`)
		waitStatefulClusterReady(t, ns, "vols", 2, framework.Timeout)
		require.Eventually(t, func() bool {
			_, err := framework.Clientset.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "vols-data-2", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}, framework.Timeout, framework.Tick, "whenScaled=Delete: the scaled-down identity's claim is deleted")
		require.NoError(t, framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), "vols-0", metav1.DeleteOptions{}))
		waitStatefulClusterReady(t, ns, "vols", 2, framework.Timeout)
		require.Eventually(t, func() bool {
			pvc, err := framework.Clientset.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "vols-data-0", metav1.GetOptions{})
			got := getStatefulCluster(t, ns, "vols")
			return err == nil && pvc.Labels[clusterv1alpha1.RetiredLabel] == "true" && got != nil &&
				len(got.Status.RetiredClaims) == 1 && got.Status.RetiredClaims[0].Name == "vols-data-0"
		}, framework.Timeout, framework.Tick, "whenReplaced=Retain: the replaced identity's claim is kept, labelled and listed")
		_, err := framework.Clientset.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "vols-data-3", metav1.GetOptions{})
		assert.NoError(t, err, "the new identity has a claim of its own")
	})

	t.Run("claim-cannot-bind", func(t *testing.T) {
		// A claim of a StorageClass that does not exist never binds, whatever provisioner the cluster
		// has: its pod is kept and reported (Stalled, one Warning Event), not replaced every threshold
		// by a new identity with a new claim.
		ns := framework.NewNamespace(t)
		c := watchIdentities(t, ns, "nobind", 2)
		sc := framework.NewStatefulCluster("nobind", 2)
		withDataClaim(sc)
		sc.Spec.VolumeClaimTemplates[0].Spec.StorageClassName = ptr.To("no-such-class")
		sc.Spec.PendingThresholdSeconds = ptr.To[int32](3)
		createStatefulCluster(t, ns, sc)
		var stalled *metav1.Condition
		require.Eventually(t, func() bool {
			got := getStatefulCluster(t, ns, "nobind")
			if got == nil {
				return false
			}
			stalled = meta.FindStatusCondition(got.Status.Conditions, clusterv1alpha1.ConditionStalled)
			return stalled != nil && stalled.Status == metav1.ConditionTrue && stalled.Reason == clusterv1alpha1.ReasonClaimPending &&
				strings.Contains(stalled.Message, "nobind-data-0") && strings.Contains(stalled.Message, "nobind-data-1")
		}, framework.Timeout, 100*time.Millisecond, "Stalled=True ClaimPending naming both claims")
		t.Logf("Stalled: %s", stalled.Message)
		assert.Contains(t, stalled.Message, "no-such-class", "the PersistentVolume controller's reason")
		testsupport.NeverWithin(t, 10*time.Second, 200*time.Millisecond, func() bool { n, _, _ := c.counts(); return n > 2 },
			"a pod whose claim cannot bind was replaced")
		claims, err := framework.Clientset.CoreV1().PersistentVolumeClaims(ns).List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		assert.Len(t, claims.Items, 2, "no claim beyond the live identities'")
		evs, err := framework.Clientset.EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		warnings := 0
		for _, e := range evs.Items {
			if e.Regarding.Name == "nobind" && e.Reason == clusterv1alpha1.ReasonClaimPending && e.Type == corev1.EventTypeWarning {
				warnings++
				t.Logf("Event %s: %s", e.Reason, e.Note)
			}
		}
		assert.GreaterOrEqual(t, warnings, 1, "a Warning Event says why")
	})

	t.Run("operator-sigkilled-during-scale-up", func(t *testing.T) {
		ns := framework.NewNamespace(t)
		const replicas = 40
		c := watchIdentities(t, ns, "kill", replicas)
		createStatefulCluster(t, ns, framework.NewStatefulCluster("kill", 0))
		waitStatefulClusterReady(t, ns, "kill", 0, framework.Timeout)
		patchStatefulCluster(t, ns, "kill", fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
		require.Eventually(t, func() bool { n, _, _ := c.counts(); return n >= 3 }, framework.Timeout, 10*time.Millisecond)
		op.Kill()
		n, _, _ := c.counts()
		t.Logf("operator SIGKILLed with %d of %d pods created", n, replicas)
		op.Start()
		sc := waitStatefulClusterReady(t, ns, "kill", replicas, 2*framework.Timeout)
		names, _, _ := c.counts()
		t.Logf("after the restart: %d pod names created for %d replicas, nextIdentity %d", names, replicas, sc.Status.NextIdentity)
		assert.Equal(t, replicas, names, "no pod created twice or in excess")
	})

	t.Run("seed-example", func(t *testing.T) {
		ns := framework.NewNamespace(t)
		dir, err := seedexamples.Dir()
		require.NoError(t, err)
		examples, err := seedexamples.Load(dir)
		require.NoError(t, err)
		var yaml, name string
		for _, ex := range examples {
			if ex.Kind == "StatefulCluster" {
				yaml, name = ex.YAML, ex.Name
			}
		}
		require.NotEmpty(t, yaml, "seed 001's StatefulCluster example")
		c := watchIdentities(t, ns, name, 3)
		file := filepath.Join(t.TempDir(), "seed.yaml")
		require.NoError(t, os.WriteFile(file, []byte(yaml), 0o644))
		_, err = framework.Kubectl().Run(t.Context(), "apply", "-n", ns, "-f", file)
		require.NoError(t, err)
		waitStatefulClusterReady(t, ns, name, 3, framework.Timeout)
		assert.Equal(t, []string{name + "-0", name + "-1", name + "-2"}, sortedNames(livePods(t, ns, name)))
		c.setBound(4)
		out, err := framework.Kubectl().Run(t.Context(), "scale", "-n", ns, "statefulcluster/"+name, "--replicas=4")
		require.NoError(t, err, out)
		waitStatefulClusterReady(t, ns, name, 4, framework.Timeout)
	})

	clusterSummary.mu.Lock()
	defer clusterSummary.mu.Unlock()
	var names, reuses, over int
	for _, c := range clusterSummary.checkers {
		n, r, o := c.counts()
		names, reuses, over = names+n, reuses+r, over+o
	}
	lat, beyond := clusterSummary.latencies, clusterSummary.beyondTolerance
	t.Logf("SUMMARY cluster-operator e2e: %d StatefulClusters, %d pod names created, reuses %d, over-creations %d, "+
		"replacement latency p50/p99 %s/%s from the node's Ready=Unknown transition (%s/%s beyond the 5s tolerance; 1s timestamp resolution; %d samples)",
		len(clusterSummary.checkers), names, reuses, over,
		percentile(lat, 0.5).Round(time.Millisecond), percentile(lat, 0.99).Round(time.Millisecond),
		percentile(beyond, 0.5).Round(time.Millisecond), percentile(beyond, 0.99).Round(time.Millisecond), len(lat))
	assert.Zero(t, reuses)
	assert.Zero(t, over)
}

// TestStatefulClusterScale500 measures a 0→500 scale-up of a StatefulCluster beside a native
// StatefulSet with podManagementPolicy Parallel, on extra kwok nodes. Logged, not asserted.
func TestStatefulClusterScale500(t *testing.T) {
	const replicas = 500
	startClusterOperator(t)
	framework.ScaleNodes(t, 4)

	ns := framework.NewNamespace(t)
	watchIdentities(t, ns, "big", replicas)
	createStatefulCluster(t, ns, framework.NewStatefulCluster("big", 0))
	waitStatefulClusterReady(t, ns, "big", 0, framework.Timeout)
	start := time.Now()
	patchStatefulCluster(t, ns, "big", fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
	var scCreated time.Duration
	require.Eventually(t, func() bool {
		sc := getStatefulCluster(t, ns, "big")
		if scCreated == 0 && sc != nil && sc.Status.Replicas >= replicas {
			scCreated = time.Since(start)
		}
		return scCreated != 0
	}, 5*framework.Timeout, 100*time.Millisecond)
	waitStatefulClusterReady(t, ns, "big", replicas, 5*framework.Timeout)
	scReady := time.Since(start)

	ns2 := framework.NewNamespace(t)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "big"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "big"}},
			Template: framework.PodTemplate("big"), PodManagementPolicy: appsv1.ParallelPodManagement,
		},
	}
	_, err := framework.Clientset.AppsV1().StatefulSets(ns2).Create(t.Context(), sts, metav1.CreateOptions{})
	require.NoError(t, err)
	start = time.Now()
	_, err = framework.Clientset.AppsV1().StatefulSets(ns2).Patch(t.Context(), "big", types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas), metav1.PatchOptions{})
	require.NoError(t, err)
	var stsCreated time.Duration
	require.Eventually(t, func() bool {
		s, err := framework.Clientset.AppsV1().StatefulSets(ns2).Get(t.Context(), "big", metav1.GetOptions{})
		if err != nil {
			return false
		}
		if stsCreated == 0 && s.Status.Replicas >= replicas {
			stsCreated = time.Since(start)
		}
		return s.Status.ReadyReplicas == replicas
	}, 5*framework.Timeout, 100*time.Millisecond)
	stsReady := time.Since(start)
	rate := func(d time.Duration) float64 { return float64(replicas) / d.Seconds() }
	t.Logf("SCALE 0→%d on kwok: StatefulCluster %.1f pods/s created (%s), %.1f pods/s Ready (%s); "+
		"StatefulSet Parallel %.1f pods/s created (%s), %.1f pods/s Ready (%s)",
		replicas, rate(scCreated), scCreated.Round(time.Millisecond), rate(scReady), scReady.Round(time.Millisecond),
		rate(stsCreated), stsCreated.Round(time.Millisecond), rate(stsReady), stsReady.Round(time.Millisecond))
}
