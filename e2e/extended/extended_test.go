//go:build e2e

package extended

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/e2e/framework"
	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// TestExtended runs extended-operator (as a local process, under its manifest's ServiceAccount) against
// the local cluster's kube-controller-manager (StatefulSet controller, garbage collector, PV binder) and
// kwok pods. Two invariant checkers run in every scenario: spurious restarts (config rolls or pod
// re-creations without a data change) and moments at which one PersistentVolumeClaim is used by two live
// pods. Both must be 0.
func TestExtended(t *testing.T) {
	op := startExtendedOperator(t)

	var (
		mu        sync.Mutex
		scenarios int
		spurious  int
		doubles   int
		latencies []time.Duration
		upgrades  []time.Duration
		handovers []time.Duration
	)
	// finish records one scenario's checker counts.
	// planned counts the pod restarts the scenario causes on purpose besides config rolls (an ordinal
	// stopped for a canary on its volume and started again when the canary failed).
	finish := func(t *testing.T, rc *restartChecker, cc *claimChecker, sts string, replicas, dataChanges, planned int) {
		t.Helper()
		s, forced := rc.spurious(sts, replicas, dataChanges, planned)
		d, events := cc.counts()
		t.Logf("invariant checkers: %s: %d config rolls for %d data changes, %d spurious restarts (%d pods force-deleted by the kwok simulator left out); %d pod events, %d with a claim used by two live pods",
			sts, rc.rollCount(sts), dataChanges, s, forced, events, d)
		if !assert.Zero(t, s, "spurious restarts") {
			t.Logf("pods of %s: %s; %d rolls", sts, strings.Join(rc.pods(sts), "; "), rc.rollCount(sts))
		}
		assert.Zero(t, d, "moments with a claim used by two live pods")
		mu.Lock()
		defer mu.Unlock()
		scenarios++
		spurious += s
		doubles += d
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		first := func(ds []time.Duration) string {
			if len(ds) == 0 {
				return "not measured"
			}
			return ds[0].Round(time.Millisecond).String()
		}
		t.Logf("SUMMARY extended-operator e2e: %d StatefulSets checked, spurious restarts %d, moments with a claim used by two live pods %d; "+
			"config change → template updated latency p50 %s p99 %s (%d samples, includes the 2s quiet period); 3-replica versioned upgrade "+
			"(template change → new version Ready, old deleted) %s without volumes, %s with an ordinal-by-ordinal volume handover",
			scenarios, spurious, doubles, extendedPercentile(latencies, 50).Round(time.Millisecond), extendedPercentile(latencies, 99).Round(time.Millisecond),
			len(latencies), first(upgrades), first(handovers))
	})

	// setup makes a namespace with ConfigMap "conf", Secret "creds" and an ExtendedStatefulSet "web" of
	// 3 pods referencing both (env and a volume), Ready at version 1.
	setup := func(t *testing.T, mutate func(*extendedv1alpha1.ExtendedStatefulSet)) (string, *restartChecker, *claimChecker) {
		t.Helper()
		ns := framework.NewNamespace(t)
		createConfAndCreds(t, ns, "1", "one")
		rc, cc := watchRestarts(t, ns), watchClaims(t, ns)
		e := framework.NewESTS("web", 3)
		pod := &e.Spec.Template.Spec.Template.Spec
		referenceConfAndCreds(pod)
		if mutate != nil {
			mutate(e)
		}
		createESTS(t, ns, e)
		waitESTSReady(t, ns, "web", 1)
		framework.WaitRolled(t, ns, "web-v1")
		return ns, rc, cc
	}
	// changeConfig changes the ConfigMap's data and returns how long until the checker saw roll n of
	// web-v1.
	changeConfig := func(t *testing.T, ns string, rc *restartChecker, value string, n int) time.Duration {
		t.Helper()
		cm, err := framework.Clientset.CoreV1().ConfigMaps(ns).Get(t.Context(), "conf", metav1.GetOptions{})
		require.NoError(t, err)
		cm.Data["level"] = value
		_, err = framework.Clientset.CoreV1().ConfigMaps(ns).Update(t.Context(), cm, metav1.UpdateOptions{})
		require.NoError(t, err)
		changed := time.Now()
		require.Eventually(t, func() bool { return !rc.rollTime("web-v1", n).IsZero() }, framework.Timeout, framework.Tick, "roll %d of web-v1", n)
		return rc.rollTime("web-v1", n).Sub(changed)
	}

	t.Run("ConfigMap data change rolls the pods once; a label-only change does not", func(t *testing.T) {
		ns, rc, cc := setup(t, nil)
		var mine []time.Duration
		for i := 1; i <= 5; i++ {
			mine = append(mine, changeConfig(t, ns, rc, fmt.Sprint(i+1), i))
			framework.WaitRolled(t, ns, "web-v1")
		}
		t.Logf("config change → template updated: %v", mine)
		mu.Lock()
		latencies = append(latencies, mine...)
		mu.Unlock()

		cm, err := framework.Clientset.CoreV1().ConfigMaps(ns).Get(t.Context(), "conf", metav1.GetOptions{})
		require.NoError(t, err)
		cm.Labels = map[string]string{"touched": "yes"}
		cm.Annotations = map[string]string{"touched": "yes"}
		_, err = framework.Clientset.CoreV1().ConfigMaps(ns).Update(t.Context(), cm, metav1.UpdateOptions{})
		require.NoError(t, err)
		testsupport.NeverWithin(t, 5*time.Second, 100*time.Millisecond, func() bool { return rc.rollCount("web-v1") > 5 }, "a label-only change rolled the pods")
		finish(t, rc, cc, "web-v1", 3, 5, 0)
	})

	t.Run("Secret data change rolls the pods once", func(t *testing.T) {
		ns, rc, cc := setup(t, nil)
		s, err := framework.Clientset.CoreV1().Secrets(ns).Get(t.Context(), "creds", metav1.GetOptions{})
		require.NoError(t, err)
		s.Data["password"] = []byte("two")
		_, err = framework.Clientset.CoreV1().Secrets(ns).Update(t.Context(), s, metav1.UpdateOptions{})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return rc.rollCount("web-v1") == 1 }, framework.Timeout, framework.Tick)
		framework.WaitRolled(t, ns, "web-v1")
		testsupport.NeverWithin(t, 4*time.Second, 100*time.Millisecond, func() bool { return rc.rollCount("web-v1") > 1 }, "a second roll")
		e, err := fetchESTS(t.Context(), ns, "web")
		require.NoError(t, err)
		assert.NotContains(t, e.Status.ConfigHash, "two")
		finish(t, rc, cc, "web-v1", 3, 1, 0)
	})

	t.Run("a change made while the operator is stopped rolls the pods after its restart", func(t *testing.T) {
		ns, rc, cc := setup(t, nil)
		op.Stop()
		cm, err := framework.Clientset.CoreV1().ConfigMaps(ns).Get(t.Context(), "conf", metav1.GetOptions{})
		require.NoError(t, err)
		cm.Data["level"] = "while-down"
		_, err = framework.Clientset.CoreV1().ConfigMaps(ns).Update(t.Context(), cm, metav1.UpdateOptions{})
		require.NoError(t, err)
		testsupport.NeverWithin(t, 3*time.Second, 100*time.Millisecond, func() bool { return rc.rollCount("web-v1") > 0 }, "a roll without the operator")
		op.Start()
		require.Eventually(t, func() bool { return rc.rollCount("web-v1") == 1 }, framework.Timeout, framework.Tick, "the roll after the restart")
		framework.WaitRolled(t, ns, "web-v1")
		testsupport.NeverWithin(t, 4*time.Second, 100*time.Millisecond, func() bool { return rc.rollCount("web-v1") > 1 }, "a second roll")
		finish(t, rc, cc, "web-v1", 3, 1, 0)
	})

	t.Run("an image change makes version 2 with a canary, then deletes version 1", func(t *testing.T) {
		ns, rc, cc := setup(t, nil)
		start := time.Now()
		updateESTS(t, ns, "web", func(e *extendedv1alpha1.ExtendedStatefulSet) {
			e.Spec.Template.Spec.Template.Spec.Containers[0].Image = framework.PauseImage + "-v2"
		})
		sawCanary := false
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			sts, err := framework.FetchStatefulSet(t.Context(), ns, "web-v2")
			if !assert.NoError(c, err) || !assert.NotNil(c, sts) {
				return
			}
			if ptr.Deref(sts.Spec.Replicas, 0) == 1 && sts.Annotations[extendedv1alpha1.PhaseAnnotation] == extendedv1alpha1.PhaseCanary {
				sawCanary = true
			}
			assert.True(c, sawCanary, "version 2 starts with one canary")
		}, framework.Timeout, 20*time.Millisecond, "canary of version 2")
		waitESTSReady(t, ns, "web", 2)
		took := time.Since(start)
		v1, err := framework.FetchStatefulSet(t.Context(), ns, "web-v1")
		require.NoError(t, err)
		assert.Nil(t, v1, "version 1 deleted")
		t.Logf("3-replica versioned upgrade: %s", took.Round(time.Millisecond))
		mu.Lock()
		upgrades = append(upgrades, took)
		mu.Unlock()
		finish(t, rc, cc, "web-v1", 3, 0, 0)
		finish(t, rc, cc, "web-v2", 3, 0, 0)
	})

	t.Run("with volumeClaimTemplates a config change rolls in place and an image change moves each ordinal's volume to version 2", func(t *testing.T) {
		ns, rc, cc := setup(t, withClaims)
		// volumes returns, per ordinal, the PersistentVolume its claim of the given StatefulSet is bound to.
		volumes := func(sts string) map[int]string {
			out := map[int]string{}
			for i := range 3 {
				pvc, err := framework.Clientset.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), fmt.Sprintf("data-%s-%d", sts, i), metav1.GetOptions{})
				if err == nil && pvc.Status.Phase == corev1.ClaimBound {
					out[i] = pvc.Spec.VolumeName
				}
			}
			return out
		}
		before := volumes("web-v1")
		require.Len(t, before, 3)
		changeConfig(t, ns, rc, "with-claims", 1)
		framework.WaitRolled(t, ns, "web-v1")
		assert.Equal(t, before, volumes("web-v1"), "a config roll keeps every claim")

		start := time.Now()
		updateESTS(t, ns, "web", func(e *extendedv1alpha1.ExtendedStatefulSet) {
			e.Spec.Template.Spec.Template.Spec.Containers[0].Image = framework.PauseImage + "-v2"
		})
		waitESTSReady(t, ns, "web", 2)
		took := time.Since(start)
		assert.Equal(t, before, volumes("web-v2"), "every ordinal of version 2 runs on the volume it had in version 1")
		for _, name := range before {
			pv, err := framework.Clientset.CoreV1().PersistentVolumes().Get(t.Context(), name, metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, corev1.PersistentVolumeReclaimDelete, pv.Spec.PersistentVolumeReclaimPolicy, "reclaim policy given back on %s", name)
			assert.Empty(t, pv.Labels["fissile.cloudfoundry.org/handover-to"], "handover finished on %s", name)
		}
		t.Logf("3-replica versioned upgrade with an ordinal-by-ordinal volume handover: %s", took.Round(time.Millisecond))
		mu.Lock()
		handovers = append(handovers, took)
		mu.Unlock()
		finish(t, rc, cc, "web-v1", 3, 1, 0)
		finish(t, rc, cc, "web-v2", 3, 0, 0)
	})

	t.Run("with volumeClaimTemplates a canary that never becomes Ready hands its volume back to version 1", func(t *testing.T) {
		ns, rc, cc := setup(t, func(e *extendedv1alpha1.ExtendedStatefulSet) {
			withClaims(e)
			e.Spec.UpdateStrategy.CanaryWatchTime = &metav1.Duration{Duration: 3 * time.Second}
		})
		volume := func(claim string) string {
			pvc, err := framework.Clientset.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), claim, metav1.GetOptions{})
			if err != nil || pvc.Status.Phase != corev1.ClaimBound {
				return ""
			}
			return pvc.Spec.VolumeName
		}
		before := volume("data-web-v1-0")
		require.NotEmpty(t, before)
		updateESTS(t, ns, "web", func(e *extendedv1alpha1.ExtendedStatefulSet) {
			e.Spec.Template.Spec.Template.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "e2e.statefulops.dev/never"}}
		})
		require.Eventually(t, func() bool { return volume("data-web-v2-0") == before }, framework.Timeout, framework.Tick, "ordinal 0's volume moved to the canary")
		waitESTS(t, ns, "web", func(c *assert.CollectT, e *extendedv1alpha1.ExtendedStatefulSet) {
			assert.Equal(c, metav1.ConditionTrue, estsCondition(e, extendedv1alpha1.ConditionStale))
		}, "version 2 stale")
		require.Eventually(t, func() bool { return volume("data-web-v1-0") == before }, framework.Timeout, framework.Tick, "ordinal 0's volume back on version 1")
		framework.WaitRolled(t, ns, "web-v1")
		v1, err := framework.FetchStatefulSet(t.Context(), ns, "web-v1")
		require.NoError(t, err)
		assert.Nil(t, v1.Spec.Ordinals, "version 1 runs all its ordinals again")
		assert.Equal(t, int32(3), v1.Status.ReadyReplicas)
		v2, err := framework.FetchStatefulSet(t.Context(), ns, "web-v2")
		require.NoError(t, err)
		assert.Equal(t, int32(0), ptr.Deref(v2.Spec.Replicas, 1))
		// web-v1-0 was stopped for the canary and started again: one planned restart, not spurious.
		finish(t, rc, cc, "web-v1", 3, 0, 1)
	})

	t.Run("a canary that never becomes Ready marks version 2 stale; version 1 keeps serving", func(t *testing.T) {
		ns, rc, cc := setup(t, func(e *extendedv1alpha1.ExtendedStatefulSet) {
			e.Spec.UpdateStrategy.CanaryWatchTime = &metav1.Duration{Duration: 3 * time.Second}
			e.Spec.UpdateStrategy.RetryCount = 1
		})
		v1Pods := podUIDs(t, ns, "web-v1")
		updateESTS(t, ns, "web", func(e *extendedv1alpha1.ExtendedStatefulSet) {
			// A readiness gate nobody sets: the canary runs but never becomes Ready.
			e.Spec.Template.Spec.Template.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "e2e.statefulops.dev/never"}}
		})
		waitESTS(t, ns, "web", func(c *assert.CollectT, e *extendedv1alpha1.ExtendedStatefulSet) {
			assert.Equal(c, metav1.ConditionTrue, estsCondition(e, extendedv1alpha1.ConditionStale))
			assert.Equal(c, int32(1), e.Status.CurrentVersion)
			assert.Equal(c, int32(1), e.Status.CanaryRetries)
		}, "version 2 stale after one retry")
		v2, err := framework.FetchStatefulSet(t.Context(), ns, "web-v2")
		require.NoError(t, err)
		require.NotNil(t, v2)
		assert.Equal(t, "true", v2.Annotations[extendedv1alpha1.StaleAnnotation])
		assert.Equal(t, int32(0), ptr.Deref(v2.Spec.Replicas, 1))
		framework.WaitRolled(t, ns, "web-v1")
		assert.Equal(t, v1Pods, podUIDs(t, ns, "web-v1"), "version 1's pods kept running")
		events, err := framework.Clientset.EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		var reasons []string
		for _, ev := range events.Items {
			reasons = append(reasons, ev.Reason)
		}
		assert.Contains(t, reasons, extendedv1alpha1.EventVersionStale)
		assert.Contains(t, reasons, extendedv1alpha1.EventCanaryRetry)
		finish(t, rc, cc, "web-v1", 3, 0, 0)
	})

	t.Run("kubectl scale outside the limits is refused", func(t *testing.T) {
		ns, rc, cc := setup(t, func(e *extendedv1alpha1.ExtendedStatefulSet) {
			e.Spec.Scaling = &extendedv1alpha1.Scaling{Min: ptr.To[int32](3), Max: ptr.To[int32](7), OddOnly: true}
		})
		for replicas, want := range map[int]string{
			4: "must be odd because spec.scaling.oddOnly is true",
			9: "must be between spec.scaling.min (3) and spec.scaling.max (7)",
			1: "must be between spec.scaling.min (3) and spec.scaling.max (7)",
		} {
			out, err := framework.Kubectl().Run(t.Context(), "scale", "-n", ns, "extendedstatefulset/web", fmt.Sprintf("--replicas=%d", replicas))
			require.Error(t, err, "kubectl scale --replicas=%d: %s", replicas, out)
			assert.Contains(t, err.Error(), want)
		}
		_, err := framework.Kubectl().Run(t.Context(), "scale", "-n", ns, "ests/web", "--replicas=5")
		require.NoError(t, err)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			sts, err := framework.FetchStatefulSet(t.Context(), ns, "web-v1")
			if assert.NoError(c, err) && assert.NotNil(c, sts) {
				assert.Equal(c, int32(5), sts.Status.ReadyReplicas)
			}
		}, framework.Timeout, framework.Tick, "scaled to 5")
		// An edit of the child StatefulSet is put back.
		_, err = framework.Kubectl().Run(t.Context(), "scale", "-n", ns, "statefulset/web-v1", "--replicas=2")
		require.NoError(t, err)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			sts, err := framework.FetchStatefulSet(t.Context(), ns, "web-v1")
			if assert.NoError(c, err) && assert.NotNil(c, sts) {
				assert.Equal(c, int32(5), ptr.Deref(sts.Spec.Replicas, 0))
				assert.Equal(c, int32(5), sts.Status.ReadyReplicas)
			}
		}, framework.Timeout, framework.Tick, "child replicas put back")
		// The test's own edit to 2 replicas lets the StatefulSet controller remove ordinals 2-4 before the
		// operator puts the count back (CI saw it do so within 0.4 s); their re-creations are the test's
		// doing. A restart of ordinal 0 or 1 still counts as spurious.
		finish(t, rc, cc, "web-v1", 5, 0, rc.reran("web-v1", "web-v1-2", "web-v1-3", "web-v1-4"))
	})

	for _, propagation := range []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground} {
		t.Run("deleting the ExtendedStatefulSet ("+string(propagation)+") keeps the user's ConfigMap and Secret", func(t *testing.T) {
			ns, rc, cc := setup(t, nil)
			web := &extendedv1alpha1.ExtendedStatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}
			require.NoError(t, framework.Client.Delete(t.Context(), web, client.PropagationPolicy(propagation)))
			require.Eventually(t, func() bool {
				_, err := fetchESTS(t.Context(), ns, "web")
				return apierrors.IsNotFound(err)
			}, framework.Timeout, framework.Tick, "ExtendedStatefulSet gone")
			require.Eventually(t, func() bool {
				sts, err := framework.FetchStatefulSet(t.Context(), ns, "web-v1")
				return err == nil && sts == nil
			}, framework.Timeout, framework.Tick, "its StatefulSet garbage-collected")
			// Give the garbage collector time to do what it would do to dependents.
			testsupport.NeverWithin(t, 5*time.Second, 200*time.Millisecond, func() bool {
				_, errCM := framework.Clientset.CoreV1().ConfigMaps(ns).Get(t.Context(), "conf", metav1.GetOptions{})
				_, errS := framework.Clientset.CoreV1().Secrets(ns).Get(t.Context(), "creds", metav1.GetOptions{})
				return errCM != nil || errS != nil
			}, "a user ConfigMap or Secret was deleted")
			cm, err := framework.Clientset.CoreV1().ConfigMaps(ns).Get(t.Context(), "conf", metav1.GetOptions{})
			require.NoError(t, err)
			assert.Empty(t, cm.OwnerReferences)
			assert.Empty(t, cm.Finalizers)
			finish(t, rc, cc, "web-v1", 3, 0, 0)
		})
	}
}

// withClaims gives the template a ReadWriteOnce volumeClaimTemplate "data" of the cluster's default
// StorageClass (the local cluster's provisioner makes one volume per claim, on its pod's node).
func withClaims(e *extendedv1alpha1.ExtendedStatefulSet) {
	e.Spec.Template.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}}
	e.Spec.Template.Spec.Template.Spec.Containers[0].VolumeMounts = append(e.Spec.Template.Spec.Template.Spec.Containers[0].VolumeMounts,
		corev1.VolumeMount{Name: "data", MountPath: "/data"})
}

// podUIDs returns the UIDs of the StatefulSet's pods by name.
func podUIDs(t *testing.T, ns, sts string) map[string]string {
	t.Helper()
	pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	out := map[string]string{}
	for _, p := range pods.Items {
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.Kind == "StatefulSet" && ref.Name == sts {
			out[p.Name] = string(p.UID)
		}
	}
	return out
}
