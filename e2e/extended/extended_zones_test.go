//go:build e2e

package extended

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// localZones are the zones of the local cluster's kwok nodes (label topology.kubernetes.io/zone).
var localZones = []string{"zone-a", "zone-b", "zone-c"}

// TestExtendedZones runs an ExtendedStatefulSet over the local cluster's three zones: each zone's pods
// land on nodes of that zone, with KUBE_AZ and AZ_INDEX, and an image change upgrades the zones one at a
// time. The zone-by-zone checker counts the moments at which two zones are mid-upgrade (must be 0).
func TestExtendedZones(t *testing.T) {
	startExtendedOperator(t)
	ns := framework.NewNamespace(t)
	zc := watchZoneUpgrades(t, ns)
	const perZone = 2
	e := framework.NewESTS("web", perZone*int32(len(localZones)))
	e.Spec.AZ = &extendedv1alpha1.AvailabilityZones{Zones: localZones}
	createESTS(t, ns, e)
	waitESTSReady(t, ns, "web", 1)

	t.Run("3 zones × replicas pods land in their zones", func(t *testing.T) {
		nodeZone := map[string]string{}
		nodes, err := framework.Clientset.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		for _, n := range nodes.Items {
			nodeZone[n.Name] = n.Labels[corev1.LabelTopologyZone]
		}
		pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: extendedv1alpha1.NameLabel + "=web"})
		require.NoError(t, err)
		count := map[string]int{}
		misplaced := 0
		for _, p := range pods.Items {
			z := p.Labels[extendedv1alpha1.ZoneLabel]
			count[z]++
			if nodeZone[p.Spec.NodeName] != z {
				misplaced++
				t.Logf("pod %s of zone %q on node %s in zone %q", p.Name, z, p.Spec.NodeName, nodeZone[p.Spec.NodeName])
			}
			env := map[string]string{}
			for _, v := range p.Spec.Containers[0].Env {
				env[v.Name] = v.Value
			}
			assert.Equal(t, z, env["KUBE_AZ"], "pod %s", p.Name)
			assert.Equal(t, p.Labels[extendedv1alpha1.ZoneIndexLabel], env["AZ_INDEX"], "pod %s", p.Name)
		}
		t.Logf("zone placement: pods per zone %v, %d pods on a node outside their zone (must be 0)", count, misplaced)
		assert.Zero(t, misplaced)
		for _, z := range localZones {
			assert.Equal(t, perZone, count[z], "pods in %s", z)
		}
		got, err := fetchESTS(t.Context(), ns, "web")
		require.NoError(t, err)
		assert.Equal(t, int32(3), got.Status.ZoneCount)
	})

	t.Run("an image change upgrades zone by zone", func(t *testing.T) {
		zc.arm()
		start := time.Now()
		updateESTS(t, ns, "web", func(e *extendedv1alpha1.ExtendedStatefulSet) {
			e.Spec.Template.Spec.Template.Spec.Containers[0].Image = framework.PauseImage + "-v2"
		})
		waitESTSReady(t, ns, "web", 2)
		took := time.Since(start)
		violations, maxBusy, order := zc.result()
		t.Logf("3-zone upgrade (%d pods per zone, 1 canary each): %s; zones started upgrading in order %v", perZone, took.Round(time.Millisecond), order)
		t.Logf("zone-by-zone checker: %d moments with two zones mid-upgrade (must be 0); at most %d zone(s) mid-upgrade at once", violations, maxBusy)
		assert.Zero(t, violations, "moments with two zones mid-upgrade")
		assert.Equal(t, localZones, order, "zones upgrade in spec.az.zones order")
		got, err := fetchESTS(t.Context(), ns, "web")
		require.NoError(t, err)
		for _, zs := range got.Status.Zones {
			assert.Equal(t, map[string]bool{"2": true}, zs.Versions, "zone %s", zs.Name)
		}
	})
}

// TestExtendedZonesVolumes runs a zoned ExtendedStatefulSet with volumeClaimTemplates (one pod per zone):
// an image change moves each zone's volume to the zone's new version, zone by zone, never mounted by two
// live pods; removing a zone (policy Retain, the default) deletes its StatefulSet and keeps its claim.
func TestExtendedZonesVolumes(t *testing.T) {
	startExtendedOperator(t)
	ns := framework.NewNamespace(t)
	zc := watchZoneUpgrades(t, ns)
	cc := watchClaims(t, ns)
	e := framework.NewESTS("web", int32(len(localZones)))
	e.Spec.AZ = &extendedv1alpha1.AvailabilityZones{Zones: localZones}
	withClaims(e)
	createESTS(t, ns, e)
	waitESTSReady(t, ns, "web", 1)
	volume := func(claim string) string {
		pvc, err := framework.Clientset.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), claim, metav1.GetOptions{})
		if err != nil || pvc.Status.Phase != corev1.ClaimBound {
			return ""
		}
		return pvc.Spec.VolumeName
	}
	before := map[int]string{}
	for i := range localZones {
		before[i+1] = volume(fmt.Sprintf("data-web-z%d-v1-0", i+1))
		require.NotEmpty(t, before[i+1], "zone %d bound", i+1)
	}

	zc.arm()
	start := time.Now()
	updateESTS(t, ns, "web", func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.Template.Spec.Template.Spec.Containers[0].Image = framework.PauseImage + "-v2"
	})
	waitESTSReady(t, ns, "web", 2)
	took := time.Since(start)
	for i := range localZones {
		assert.Equal(t, before[i+1], volume(fmt.Sprintf("data-web-z%d-v2-0", i+1)), "zone %d keeps its volume", i+1)
	}
	violations, maxBusy, order := zc.result()
	doubles, events := cc.counts()
	t.Logf("3-zone upgrade with a volume handover per zone (1 pod per zone): %s; zone order %v", took.Round(time.Millisecond), order)
	t.Logf("zone-by-zone checker: %d moments with two zones mid-upgrade (must be 0), at most %d at once; claim checker: %d pod events, %d with a claim used by two live pods (must be 0)",
		violations, maxBusy, events, doubles)
	assert.Zero(t, violations)
	assert.Zero(t, doubles)
	assert.Equal(t, localZones, order)

	t.Run("removing a zone keeps its claim", func(t *testing.T) {
		updateESTS(t, ns, "web", func(e *extendedv1alpha1.ExtendedStatefulSet) {
			e.Spec.AZ.Zones = localZones[:2]
			e.Spec.Template.Spec.Replicas = ptr.To[int32](2)
		})
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			sts, err := framework.FetchStatefulSet(t.Context(), ns, "web-z3-v2")
			assert.NoError(c, err)
			assert.Nil(c, sts, "zone-c's StatefulSet deleted")
		}, framework.Timeout, framework.Tick, "zone-c removed")
		testsupport.NeverWithin(t, 3*time.Second, framework.Tick, func() bool { return volume("data-web-z3-v2-0") != before[3] },
			"zone-c's claim stays bound to its volume")
		waitESTS(t, ns, "web", func(c *assert.CollectT, e *extendedv1alpha1.ExtendedStatefulSet) {
			assert.Equal(c, int32(2), e.Status.ZoneCount)
			assert.Equal(c, metav1.ConditionTrue, estsCondition(e, extendedv1alpha1.ConditionReady))
		}, "2 zones Ready")
		t.Logf("zone removal: zone-c's StatefulSet deleted, its claim data-web-z3-v2-0 kept on %s", before[3])
	})
}

// zoneUpgradeChecker is the zone-by-zone invariant checker of one namespace. It watches the
// StatefulSets and the pods and counts the watch events after which two zones are mid-upgrade at once. A
// zone is mid-upgrade while it has StatefulSets of two versions or one not in phase Done, or pods of two
// versions, or a pod not Ready (pods of a StatefulSet the operator deleted, or terminating, are on their way
// out and do not count: the zone's new version is then fully Ready). It also records the order in which zones started upgrading
// (a version above the first appearing).
type zoneUpgradeChecker struct {
	mu         sync.Mutex
	sts        map[string]*appsv1.StatefulSet
	pods       map[string]*corev1.Pod
	violations int
	maxBusy    int
	order      []string
	armed      bool
}

func watchZoneUpgrades(t *testing.T, ns string) *zoneUpgradeChecker {
	t.Helper()
	zc := &zoneUpgradeChecker{sts: map[string]*appsv1.StatefulSet{}, pods: map[string]*corev1.Pod{}}
	sw, err := framework.Clientset.AppsV1().StatefulSets(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	pw, err := framework.Clientset.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	t.Cleanup(sw.Stop)
	t.Cleanup(pw.Stop)
	go func() {
		for ev := range sw.ResultChan() {
			if s, ok := ev.Object.(*appsv1.StatefulSet); ok {
				zc.mu.Lock()
				if ev.Type == watch.Deleted {
					delete(zc.sts, s.Name)
				} else {
					zc.sts[s.Name] = s
					if s.Labels[extendedv1alpha1.VersionLabel] != "1" && !slices.Contains(zc.order, s.Labels[extendedv1alpha1.ZoneLabel]) {
						zc.order = append(zc.order, s.Labels[extendedv1alpha1.ZoneLabel])
					}
				}
				zc.check()
				zc.mu.Unlock()
			}
		}
	}()
	go func() {
		for ev := range pw.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				zc.mu.Lock()
				if ev.Type == watch.Deleted {
					delete(zc.pods, p.Name)
				} else {
					zc.pods[p.Name] = p
				}
				zc.check()
				zc.mu.Unlock()
			}
		}
	}()
	return zc
}

// check counts a violation when two zones are mid-upgrade now (zc.mu held).
func (zc *zoneUpgradeChecker) check() {
	busy := map[string]bool{}
	live := map[string]bool{} // zone/version of the StatefulSets that exist
	perZone := map[string]int{}
	for _, s := range zc.sts {
		z := s.Labels[extendedv1alpha1.ZoneLabel]
		if ptr.Deref(s.Spec.Replicas, 1) > 0 {
			// A version scaled to 0 (kept for a rollback while the post Job runs, or stopped after one)
			// counts like a deleted one: its pods are on their way out, and they are not counted below.
			live[z+"/"+s.Labels[extendedv1alpha1.VersionLabel]] = true
			perZone[z]++
		}
		// A version whose post upgrade Job runs has all its pods Ready: the zone replaces none.
		if p := s.Annotations[extendedv1alpha1.PhaseAnnotation]; p != extendedv1alpha1.PhaseDone && p != extendedv1alpha1.PhasePostJob {
			busy[z] = true
		}
	}
	for z, n := range perZone {
		if n > 1 {
			busy[z] = true
		}
	}
	podVersions := map[string]map[string]bool{}
	for _, p := range zc.pods {
		z, v := p.Labels[extendedv1alpha1.ZoneLabel], p.Labels[extendedv1alpha1.VersionLabel]
		if !p.DeletionTimestamp.IsZero() || !live[z+"/"+v] || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue // on its way out: its StatefulSet was deleted by the operator
		}
		if podVersions[z] == nil {
			podVersions[z] = map[string]bool{}
		}
		podVersions[z][v] = true
		if !zonePodReady(p) {
			busy[z] = true
		}
	}
	for z, vs := range podVersions {
		if len(vs) > 1 {
			busy[z] = true
		}
	}
	if !zc.armed {
		return
	}
	zc.maxBusy = max(zc.maxBusy, len(busy))
	if len(busy) > 1 {
		zc.violations++
		names := make([]string, 0, len(busy))
		for z := range busy {
			names = append(names, z)
		}
		sort.Strings(names)
		fmt.Printf("zone-by-zone violation: zones %s mid-upgrade at once\n", strings.Join(names, ", "))
	}
}

// arm starts counting (the zones start together when created: that is no upgrade).
func (zc *zoneUpgradeChecker) arm() {
	zc.mu.Lock()
	defer zc.mu.Unlock()
	zc.armed = true
}

func (zc *zoneUpgradeChecker) result() (violations, maxBusy int, order []string) {
	zc.mu.Lock()
	defer zc.mu.Unlock()
	return zc.violations, zc.maxBusy, append([]string(nil), zc.order...)
}

// zonePodReady reports whether the pod's Ready condition is True.
func zonePodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
