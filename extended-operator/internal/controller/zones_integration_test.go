//go:build integration

package controller

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/shared/testsupport"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// zoned returns the fixture's ExtendedStatefulSet spread over zones.
func (f *fixture) zoned(replicas int32, image string, zones ...string) *extendedv1alpha1.ExtendedStatefulSet {
	ests := f.newESTS(replicas, image)
	ests.Spec.AZ = &extendedv1alpha1.AvailabilityZones{Zones: zones}
	return ests
}

// zsts returns the StatefulSet of a zone's version, nil when it does not exist.
func (f *fixture) zsts(zoneIndex, version int) *appsv1.StatefulSet {
	sts := &appsv1.StatefulSet{}
	err := suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: zoneSTSName(f.name, zoneIndex, version)}, sts)
	if apierrors.IsNotFound(err) {
		return nil
	}
	require.NoError(f.t, err)
	return sts
}

func zoneSTSName(name string, zoneIndex, version int) string {
	return name + "-z" + strconv.Itoa(zoneIndex) + "-v" + strconv.Itoa(version)
}

// waitZSTS waits until the zone's version exists and cond holds for it.
func (f *fixture) waitZSTS(zoneIndex, version int, cond func(c *assert.CollectT, sts *appsv1.StatefulSet), msg string) *appsv1.StatefulSet {
	f.t.Helper()
	var got *appsv1.StatefulSet
	require.EventuallyWithT(f.t, func(c *assert.CollectT) {
		sts := f.zsts(zoneIndex, version)
		if !assert.NotNil(c, sts, "StatefulSet %s", zoneSTSName(f.name, zoneIndex, version)) {
			return
		}
		cond(c, sts)
		got = sts
	}, wait, tick, msg)
	return got
}

// setZStatus plays the StatefulSet controller for a zone's version: all pods exist, ready of them Ready.
func (f *fixture) setZStatus(zoneIndex, version int, ready int32) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sts := f.zsts(zoneIndex, version)
		require.NotNil(f.t, sts)
		n := ptr.Deref(sts.Spec.Replicas, 1)
		sts.Status = appsv1.StatefulSetStatus{
			ObservedGeneration: sts.Generation, Replicas: n, ReadyReplicas: min(ready, n), AvailableReplicas: min(ready, n),
			CurrentReplicas: n, UpdatedReplicas: n, CurrentRevision: "r1", UpdateRevision: "r1",
		}
		return suite.Client.Status().Update(f.t.Context(), sts)
	}))
}

// TestZoneStatefulSets checks one StatefulSet per zone: names, replicas spread over the zones (a total),
// required node affinity, zone labels (selector and pods), KUBE_AZ and AZ_INDEX in every container, and
// the per-zone status. ES-10: the pods also carry quarks' names of the same facts (labels
// quarks.cloudfoundry.org/az-name and az-index, 0-based as quarks; BOSH_AZ and CF_OPERATOR_AZ). KUBE_AZ
// and AZ_INDEX replace the template's own variables of those names; the quarks aliases BOSH_AZ and
// CF_OPERATOR_AZ are added only where the template does not set them (a user's value is kept).
func TestZoneStatefulSets(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	ests := f.zoned(4, "app:1", "a", "b", "c")
	pod := &ests.Spec.Template.Spec.Template.Spec
	pod.InitContainers = []corev1.Container{{Name: "init", Image: "init:1", Env: []corev1.EnvVar{{Name: "AZ_INDEX", Value: "user"}, {Name: "BOSH_AZ", Value: "user"}}}}
	pod.Containers = append(pod.Containers, corev1.Container{Name: "side", Image: "side:1", Env: []corev1.EnvVar{{Name: "CF_OPERATOR_AZ", Value: "user-cf"}}})
	// A template affinity of its own: the zone is added to each of its terms.
	pod.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"ssd"}}}}},
	}}}
	f.create(ests)
	assert.Equal(t, extendedv1alpha1.DefaultZoneNodeLabel, f.get().Spec.AZ.NodeLabel, "schema default")
	assert.Equal(t, extendedv1alpha1.RetainZoneRemovalPolicy, f.get().Spec.AZ.ZoneRemovalPolicy, "schema default")

	wantReplicas := []int32{2, 1, 1}
	for i, name := range []string{"a", "b", "c"} {
		idx := strconv.Itoa(i + 1)
		sts := f.waitZSTS(i+1, 1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "zone "+name)
		assert.Equal(t, wantReplicas[i], ptr.Deref(sts.Spec.Replicas, 0), "zone %s replicas", name)
		wantLabels := map[string]string{"app": "web", extendedv1alpha1.NameLabel: "web", extendedv1alpha1.VersionLabel: "1",
			extendedv1alpha1.ZoneLabel: name, extendedv1alpha1.ZoneIndexLabel: idx}
		assert.Equal(t, wantLabels, sts.Spec.Selector.MatchLabels)
		quarks := map[string]string{"quarks.cloudfoundry.org/az-name": name, "quarks.cloudfoundry.org/az-index": strconv.Itoa(i)}
		assert.Equal(t, mergeMaps(wantLabels, quarks), sts.Spec.Template.Labels)
		assert.Subset(t, sts.Labels, quarks)
		terms := sts.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		require.Len(t, terms, 1)
		assert.Equal(t, []corev1.NodeSelectorRequirement{
			{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"ssd"}},
			{Key: extendedv1alpha1.DefaultZoneNodeLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{name}},
		}, terms[0].MatchExpressions)
		// Ours replace the template's AZ_INDEX; the template's BOSH_AZ (init) and CF_OPERATOR_AZ (side) stay.
		wantEnv := map[string][]corev1.EnvVar{
			"init": {{Name: "BOSH_AZ", Value: "user"}, {Name: "KUBE_AZ", Value: name}, {Name: "AZ_INDEX", Value: idx},
				{Name: "CF_OPERATOR_AZ", Value: name}},
			"main": {{Name: "KUBE_AZ", Value: name}, {Name: "AZ_INDEX", Value: idx},
				{Name: "BOSH_AZ", Value: name}, {Name: "CF_OPERATOR_AZ", Value: name}},
			"side": {{Name: "CF_OPERATOR_AZ", Value: "user-cf"}, {Name: "KUBE_AZ", Value: name}, {Name: "AZ_INDEX", Value: idx},
				{Name: "BOSH_AZ", Value: name}},
		}
		cs := append(sts.Spec.Template.Spec.InitContainers, sts.Spec.Template.Spec.Containers...)
		require.Len(t, cs, len(wantEnv))
		for _, c := range cs {
			assert.Equal(t, wantEnv[c.Name], c.Env, "container %s of zone %s", c.Name, name)
		}
		f.setZStatus(i+1, 1, wantReplicas[i])
	}
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
	st := f.get().Status
	assert.Equal(t, int32(3), st.ZoneCount)
	assert.Equal(t, int32(4), st.ReadyReplicas)
	assert.Equal(t, int32(1), st.CurrentVersion)
	require.Len(t, st.Zones, 3)
	assert.Equal(t, extendedv1alpha1.ZoneStatus{Name: "b", Index: 2, Replicas: 1, ReadyReplicas: 1, CurrentVersion: 1, UpdateVersion: 1,
		Versions: map[string]bool{"1": true}}, st.Zones[1])

	t.Run("scaling spreads the total", func(t *testing.T) {
		f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) { e.Spec.Template.Spec.Replicas = ptr.To[int32](5) })
		for i, want := range []int32{2, 2, 1} {
			f.waitZSTS(i+1, 1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
				assert.Equal(c, want, ptr.Deref(sts.Spec.Replicas, 0))
			}, "scaled")
		}
		assert.Nil(t, f.zsts(1, 2), "scaling is not a new version")
	})
}

// TestZoneRefusals checks the schema's refusals of bad zone lists at apply time.
func TestZoneRefusals(t *testing.T) {
	f := newFixture(t)
	for name, zones := range map[string][]string{
		"duplicate": {"a", "b", "a"},
		"empty":     {"a", ""},
		"bad chars": {"a b"},
	} {
		t.Run(name, func(t *testing.T) {
			ests := f.zoned(3, "app:1", zones...)
			err := suite.Client.Create(t.Context(), ests)
			require.Error(t, err)
			assert.True(t, apierrors.IsInvalid(err), "%v", err)
			t.Log(err)
		})
	}
	ests := f.zoned(3, "app:1", "a")
	ests.Spec.AZ.NodeLabel = "failure-domain.beta.kubernetes.io/zone"
	require.NoError(t, suite.Client.Create(t.Context(), ests), "the legacy node label is accepted")
}

// zoneUpgradeChecker watches a namespace's StatefulSets and counts the moments when two zones are
// mid-upgrade at once (a zone is mid-upgrade while it has more than one version, or a version not Done).
type zoneUpgradeChecker struct {
	mu         sync.Mutex
	sts        map[string]*appsv1.StatefulSet
	violations int
	maxBusy    int
}

func watchZoneUpgrades(t *testing.T, ns string) *zoneUpgradeChecker {
	t.Helper()
	w, err := suite.Client.Watch(t.Context(), &appsv1.StatefulSetList{}, client.InNamespace(ns))
	require.NoError(t, err)
	zc := &zoneUpgradeChecker{sts: map[string]*appsv1.StatefulSet{}}
	go func() {
		for ev := range w.ResultChan() {
			sts, ok := ev.Object.(*appsv1.StatefulSet)
			if !ok {
				continue
			}
			zc.mu.Lock()
			if ev.Type == watch.Deleted {
				delete(zc.sts, sts.Name)
			} else {
				zc.sts[sts.Name] = sts
			}
			perZone := map[string]int{}
			notDone := map[string]bool{}
			for _, s := range zc.sts {
				z := s.Labels[extendedv1alpha1.ZoneLabel]
				if ptr.Deref(s.Spec.Replicas, 1) > 0 {
					// A version kept without pods for a rollback (post Job running) replaces no pod.
					perZone[z]++
				}
				// A version whose post Job runs has all its pods Ready: the zone replaces none.
				if p := s.Annotations[extendedv1alpha1.PhaseAnnotation]; p != extendedv1alpha1.PhaseDone && p != extendedv1alpha1.PhasePostJob {
					notDone[z] = true
				}
			}
			busy := 0
			for z, n := range perZone {
				if n > 1 || notDone[z] {
					busy++
				}
			}
			zc.maxBusy = max(zc.maxBusy, busy)
			if busy > 1 {
				zc.violations++
			}
			zc.mu.Unlock()
		}
	}()
	t.Cleanup(w.Stop)
	return zc
}

func (zc *zoneUpgradeChecker) result() (violations, maxBusy int) {
	zc.mu.Lock()
	defer zc.mu.Unlock()
	return zc.violations, zc.maxBusy
}

// TestZoneByZoneUpgrade checks that an image change upgrades the zones one at a time in spec order, each
// with its canaries, and that a configuration change rolls them one at a time too.
func TestZoneByZoneUpgrade(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	checker := watchZoneUpgrades(t, f.ns)
	f.create(f.zoned(6, "app:1", "a", "b", "c"))
	for z := 1; z <= 3; z++ {
		f.waitZSTS(z, 1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "zone version 1")
		f.setZStatus(z, 1, 2)
	}
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")

	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.Template.Spec.Template.Spec.Containers[0].Image = "app:2"
	})
	for z := 1; z <= 3; z++ {
		f.waitZSTS(z, 2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, extendedv1alpha1.PhaseCanary, sts.Annotations[extendedv1alpha1.PhaseAnnotation])
			assert.Equal(c, int32(1), ptr.Deref(sts.Spec.Replicas, 0), "one canary")
		}, "canary of zone "+strconv.Itoa(z))
		for later := z + 1; later <= 3; later++ {
			assert.Nil(t, f.zsts(later, 2), "zone %d waits while zone %d upgrades", later, z)
		}
		if z < 3 {
			f.waitCondition(extendedv1alpha1.ConditionProgressing, metav1.ConditionTrue, extendedv1alpha1.ReasonCanaryRollout)
		}
		f.setZStatus(z, 2, 1)
		f.waitZSTS(z, 2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, int32(2), ptr.Deref(sts.Spec.Replicas, 0))
		}, "the remaining pods")
		testsupport.NeverWithin(t, 300*time.Millisecond, tick, func() bool { return z < 3 && f.zsts(z+1, 2) != nil },
			"the next zone starts only once this one is rolled out")
		f.setZStatus(z, 2, 2)
		require.Eventually(t, func() bool { return f.zsts(z, 1) == nil }, wait, tick, "zone %d version 1 deleted", z)
	}
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
	st := f.get().Status
	assert.Equal(t, int32(2), st.CurrentVersion)
	for _, zs := range st.Zones {
		assert.Equal(t, map[string]bool{"2": true}, zs.Versions, "zone %s", zs.Name)
	}
	violations, maxBusy := checker.result()
	t.Logf("zone-by-zone checker: %d moments with two zones mid-upgrade (must be 0); at most %d zone(s) busy at once", violations, maxBusy)
	assert.Zero(t, violations)
	assert.Equal(t, 1, maxBusy)

	t.Run("a configuration change rolls zone by zone", func(t *testing.T) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "conf", Namespace: f.ns}, Data: map[string]string{"k": "1"}}
		require.NoError(t, suite.Client.Create(t.Context(), cm))
		f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
			e.Spec.Template.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}}}
		})
		// The template changed: version 3, zone by zone, as above but quickly.
		for z := 1; z <= 3; z++ {
			f.waitZSTS(z, 3, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "version 3")
			f.setZStatus(z, 3, 1)
			f.waitZSTS(z, 3, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
				assert.Equal(c, int32(2), ptr.Deref(sts.Spec.Replicas, 0))
			}, "rollout")
			f.setZStatus(z, 3, 2)
			require.Eventually(t, func() bool { return f.zsts(z, 2) == nil }, wait, tick, "zone %d version 2 deleted", z)
		}
		f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
		before := f.zsts(1, 3).Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation]
		patchConfigMap(t, f.ns, "conf", func(cm *corev1.ConfigMap) { cm.Data["k"] = "2" })
		f.waitZSTS(1, 3, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.NotEqual(c, before, sts.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation])
		}, "zone 1 rolls")
		// Zone 1's StatefulSet has not observed its new template: it is rolling, zone 2 waits.
		testsupport.NeverWithin(t, 1500*time.Millisecond, tick, func() bool {
			return f.zsts(2, 3).Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation] != before
		}, "zone 2 waits for zone 1's roll")
		for z := 1; z <= 3; z++ {
			f.waitZSTS(z, 3, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
				assert.NotEqual(c, before, sts.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation])
			}, "zone rolls")
			f.setZStatus(z, 3, 2)
		}
		f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
		violations, _ := checker.result()
		t.Logf("zone-by-zone checker after the config roll: %d violations (must be 0)", violations)
		assert.Zero(t, violations)
	})
}

// TestZoneRemovalKeepsVolumes checks that removing a zone deletes its StatefulSets and keeps its claims
// (the default policy, even against a template retention policy of Delete), and that the Delete policy
// deletes them.
func TestZoneRemovalKeepsVolumes(t *testing.T) {
	startOperator(t, nil)
	for _, policy := range []extendedv1alpha1.ZoneRemovalPolicy{extendedv1alpha1.RetainZoneRemovalPolicy, extendedv1alpha1.DeleteZoneRemovalPolicy} {
		t.Run(string(policy), func(t *testing.T) {
			f := newFixture(t)
			ests := f.zoned(2, "app:1", "a", "b")
			ests.Spec.AZ.ZoneRemovalPolicy = policy
			ests.Spec.Template.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: appsv1.DeletePersistentVolumeClaimRetentionPolicyType, WhenScaled: appsv1.RetainPersistentVolumeClaimRetentionPolicyType}
			ests.Spec.Template.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
			}}
			f.create(ests)
			var claims []string
			for z := 1; z <= 2; z++ {
				sts := f.waitZSTS(z, 1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "zone version 1")
				// The claim the StatefulSet controller would make: labelled with the selector.
				pvc := sts.Spec.VolumeClaimTemplates[0].DeepCopy()
				pvc.Name = "data-" + sts.Name + "-0"
				pvc.Namespace = f.ns
				pvc.Labels = sts.Spec.Selector.MatchLabels
				require.NoError(t, suite.Client.Create(t.Context(), pvc))
				claims = append(claims, pvc.Name)
				f.setZStatus(z, 1, 1)
			}
			f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")

			f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) { e.Spec.AZ.Zones = []string{"a"} })
			// Zone a takes over the whole total first; zone b goes once zone a's pods are all Ready.
			f.waitZSTS(1, 1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
				assert.Equal(c, int32(2), ptr.Deref(sts.Spec.Replicas, 0), "zone a runs the whole total")
			}, "zone a scaled")
			require.NotNil(t, f.zsts(2, 1), "zone b serves until zone a is Ready")
			f.setZStatus(1, 1, 2)
			require.Eventually(t, func() bool { return f.zsts(2, 1) == nil }, wait, tick, "zone b's StatefulSet deleted")
			claimGone := func(name string) bool {
				pvc := &corev1.PersistentVolumeClaim{}
				err := suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, pvc)
				return apierrors.IsNotFound(err) || !pvc.DeletionTimestamp.IsZero()
			}
			if policy == extendedv1alpha1.RetainZoneRemovalPolicy {
				testsupport.NeverWithin(t, time.Second, tick, func() bool { return claimGone(claims[1]) }, "zone b's claim kept")
			} else {
				require.Eventually(t, func() bool { return claimGone(claims[1]) }, wait, tick, "zone b's claim deleted")
			}
			assert.False(t, claimGone(claims[0]), "zone a's claim is untouched")
			assert.Equal(t, int32(1), f.get().Status.ZoneCount)
			if policy == extendedv1alpha1.RetainZoneRemovalPolicy {
				// Another zone at index 2 must not get zone b's claims (their volumes are in zone b).
				f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) { e.Spec.AZ.Zones = []string{"a", "d"} })
				f.waitZSTS(2, 2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
					assert.Equal(c, "d", sts.Labels[extendedv1alpha1.ZoneLabel])
				}, "zone d at index 2 starts above zone b's kept claims")
				f.setZStatus(1, 1, 1)
				f.setZStatus(2, 2, 1)
				f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
				// Zone b back at index 2: its StatefulSet takes the number of its kept claims, so it adopts them.
				f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) { e.Spec.AZ.Zones = []string{"a", "b"} })
				f.waitZSTS(2, 1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
					assert.Equal(c, "b", sts.Labels[extendedv1alpha1.ZoneLabel])
				}, "zone b back on its kept claims ("+claims[1]+")")
				assert.False(t, claimGone(claims[1]))
			}
		})
	}
}

// TestZoneStaleStopsLaterZones checks that a zone whose canary fails is marked stale, keeps serving its
// previous version, and that the zones after it do not start the upgrade.
func TestZoneStaleStopsLaterZones(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	ests := f.zoned(3, "app:1", "a", "b", "c")
	ests.Spec.UpdateStrategy.CanaryWatchTime = &metav1.Duration{Duration: time.Second}
	f.create(ests)
	for z := 1; z <= 3; z++ {
		f.waitZSTS(z, 1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "zone version 1")
		f.setZStatus(z, 1, 1)
	}
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.Template.Spec.Template.Spec.Containers[0].Image = "broken-in-b"
	})
	f.waitZSTS(1, 2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "zone a canary")
	f.setZStatus(1, 2, 1)
	require.Eventually(t, func() bool { return f.zsts(1, 1) == nil }, wait, tick, "zone a upgraded")
	f.waitZSTS(2, 2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "zone b canary")
	f.setZStatus(2, 2, 0) // never Ready
	f.waitZSTS(2, 2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, "true", sts.Annotations[extendedv1alpha1.StaleAnnotation])
	}, "zone b's version 2 stale")
	f.waitCondition(extendedv1alpha1.ConditionStale, metav1.ConditionTrue, extendedv1alpha1.ReasonCanaryFailed)
	require.NotNil(t, f.zsts(2, 1), "zone b's version 1 keeps serving")
	testsupport.NeverWithin(t, 1500*time.Millisecond, tick, func() bool { return f.zsts(3, 2) != nil },
		"zone c does not start after zone b failed")
	st := f.get().Status
	assert.Equal(t, int32(1), st.CurrentVersion, "the lowest version serving")
	assert.Equal(t, int32(2), st.Zones[0].CurrentVersion)
	assert.Equal(t, int32(1), st.Zones[1].CurrentVersion)
	assert.Equal(t, int32(2), st.Zones[1].UpdateVersion)
	assert.Contains(t, meta.FindStatusCondition(st.Conditions, extendedv1alpha1.ConditionStale).Message, `zone "b"`)
}

// TestZoneRestartSafety runs a zone-by-zone upgrade while a quarter of the operator's writes fail and
// the operator is restarted mid-way: every zone ends on the new version, none made twice.
func TestZoneRestartSafety(t *testing.T) {
	var injected atomic.Int64
	funcs := faultyWrites(&injected)
	op := startOperator(t, funcs)
	f := newFixture(t)
	checker := watchZoneUpgrades(t, f.ns)
	f.create(f.zoned(3, "app:1", "a", "b", "c"))
	for z := 1; z <= 3; z++ {
		f.waitZSTS(z, 1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "zone version 1")
		f.setZStatus(z, 1, 1)
	}
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.Template.Spec.Template.Spec.Containers[0].Image = "app:2"
	})
	for z := 1; z <= 3; z++ {
		f.waitZSTS(z, 2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "zone canary")
		if z == 2 {
			op.stop()
			startOperator(t, funcs)
		}
		f.setZStatus(z, 2, 1)
		require.Eventually(t, func() bool { return f.zsts(z, 1) == nil }, wait, tick, "zone %d upgraded", z)
	}
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
	var list appsv1.StatefulSetList
	require.NoError(t, suite.Client.List(t.Context(), &list, client.InNamespace(f.ns)))
	assert.Len(t, list.Items, 3, "one StatefulSet per zone, none made twice")
	violations, _ := checker.result()
	t.Logf("injected %d API errors; zone-by-zone checker: %d violations (must be 0)", injected.Load(), violations)
	assert.Positive(t, injected.Load())
	assert.Zero(t, violations)
}
