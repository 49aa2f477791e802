//go:build integration

package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// TestScalingRefusals checks that the limits hold wherever the replica count is written: the object
// (CEL on the CRD) and the scale subresource (kubectl scale, autoscalers), which the API server
// validates against the same CEL rules; and that an edit of a child StatefulSet's replicas is put back.
func TestScalingRefusals(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	ests := f.newESTS(5, "app:1")
	ests.Spec.Scaling = &extendedv1alpha1.Scaling{Min: ptr.To[int32](3), Max: ptr.To[int32](13), OddOnly: true}
	f.create(ests)
	f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "version 1")
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, "app=web", f.get().Status.Selector) }, wait, tick)

	scaleTo := func(replicas int32) error {
		scale := &autoscalingv1.Scale{}
		if err := suite.Client.SubResource("scale").Get(t.Context(), f.get(), scale); err != nil {
			return err
		}
		scale.Spec.Replicas = replicas
		return suite.Client.SubResource("scale").Update(t.Context(), f.get(), client.WithSubResourceBody(scale))
	}
	apply := func(replicas int32) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			ests := f.get()
			ests.Spec.Template.Spec.Replicas = ptr.To(replicas)
			return suite.Client.Update(t.Context(), ests)
		})
	}
	cases := []struct {
		name     string
		write    func(int32) error
		replicas int32
		want     string // empty: accepted
	}{
		{"apply even with oddOnly", apply, 4, "must be odd because spec.scaling.oddOnly is true"},
		{"apply above max", apply, 15, "must be between spec.scaling.min (3) and spec.scaling.max (13)"},
		{"apply below min", apply, 1, "must be between spec.scaling.min (3) and spec.scaling.max (13)"},
		{"scale above max", scaleTo, 15, "must be between spec.scaling.min (3) and spec.scaling.max (13)"},
		{"scale below min", scaleTo, 2, "must be between spec.scaling.min (3) and spec.scaling.max (13)"},
		{"scale to even", scaleTo, 6, "must be odd because spec.scaling.oddOnly is true"},
		{"scale to 7", scaleTo, 7, ""},
		{"apply 9", apply, 9, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.write(tc.replicas)
			if tc.want == "" {
				require.NoError(t, err)
				f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
					assert.Equal(c, tc.replicas, ptr.Deref(sts.Spec.Replicas, 0))
				}, "StatefulSet follows the accepted count")
				return
			}
			require.Error(t, err)
			require.True(t, apierrors.IsInvalid(err), "want Invalid, got %v", err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}

	t.Run("child StatefulSet replicas put back", func(t *testing.T) {
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			sts := f.sts(1)
			sts.Spec.Replicas = ptr.To[int32](20)
			return suite.Client.Update(t.Context(), sts)
		}))
		f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, int32(9), ptr.Deref(sts.Spec.Replicas, 0))
		}, "replicas put back")
	})
}

// TestConfigHash checks the restart on configuration change: the hash changes on data changes only,
// a burst rolls once, it does not reveal Secret data, and the user's objects get no ownerReference.
func TestConfigHash(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "conf", Namespace: f.ns}, Data: map[string]string{"k": "1"}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: f.ns}, Data: map[string][]byte{"password": []byte("hunter2")}}
	require.NoError(t, suite.Client.Create(t.Context(), cm))
	require.NoError(t, suite.Client.Create(t.Context(), secret))
	ests := f.newESTS(3, "app:1")
	pod := &ests.Spec.Template.Spec.Template.Spec
	pod.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}}}
	pod.Volumes = []corev1.Volume{{Name: "creds", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}}}}}}}
	changes := watchTemplateChanges(t, f.ns)
	f.create(ests)
	first := f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.NotEmpty(c, sts.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation])
	}, "version 1 with a config hash")
	h0 := first.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation]
	f.setStatus(1, 3)

	t.Run("the hash does not reveal the data", func(t *testing.T) {
		for _, data := range []string{"hunter2", "password=hunter2", "k=1"} {
			sum := sha256.Sum256([]byte(data))
			assert.NotContains(t, h0, hex.EncodeToString(sum[:]))
		}
	})

	t.Run("label-only change does not roll", func(t *testing.T) {
		patchConfigMap(t, f.ns, "conf", func(cm *corev1.ConfigMap) { cm.Labels = map[string]string{"touched": "yes"} })
		patchSecret(t, f.ns, "creds", func(s *corev1.Secret) { s.Annotations = map[string]string{"touched": "yes"} })
		testsupport.NeverWithin(t, 2*time.Second, 50*time.Millisecond, func() bool { return changes.count("web-v1") > 0 }, "template changed")
	})

	t.Run("data change rolls once", func(t *testing.T) {
		patchConfigMap(t, f.ns, "conf", func(cm *corev1.ConfigMap) { cm.Data["k"] = "2" })
		require.Eventually(t, func() bool { return changes.count("web-v1") == 1 }, wait, tick)
		testsupport.NeverWithin(t, 1500*time.Millisecond, 50*time.Millisecond, func() bool { return changes.count("web-v1") > 1 }, "second roll")
	})

	t.Run("a burst rolls once", func(t *testing.T) {
		for i := range 5 {
			patchSecret(t, f.ns, "creds", func(s *corev1.Secret) { s.Data["password"] = []byte{byte('a' + i)} })
			time.Sleep(100 * time.Millisecond) // the test's edits, spread over the quiet period
		}
		require.Eventually(t, func() bool { return changes.count("web-v1") == 2 }, wait, tick)
		testsupport.NeverWithin(t, 1500*time.Millisecond, 50*time.Millisecond, func() bool { return changes.count("web-v1") > 2 }, "a third roll")
	})

	t.Run("no new version for a config change", func(t *testing.T) {
		assert.Nil(t, f.sts(2))
	})

	t.Run("no ownerReferences or finalizers on user objects", func(t *testing.T) {
		require.NoError(t, suite.Client.Delete(t.Context(), f.get()))
		got := &corev1.ConfigMap{}
		require.NoError(t, suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "conf"}, got))
		assert.Empty(t, got.OwnerReferences)
		assert.Empty(t, got.Finalizers)
		gotS := &corev1.Secret{}
		require.NoError(t, suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "creds"}, gotS))
		assert.Empty(t, gotS.OwnerReferences)
		assert.Empty(t, gotS.Finalizers)
	})
}

// TestMissingReference checks that a missing ConfigMap gives a condition and no pods, and that creating
// it lets the version start.
func TestMissingReference(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	ests := f.newESTS(1, "app:1")
	ests.Spec.Template.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{
		ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "later"}, Key: "x"}}}}
	f.create(ests)
	f.waitCondition(extendedv1alpha1.ConditionMissingReference, metav1.ConditionTrue, extendedv1alpha1.ReasonReferenceNotFound)
	assert.Nil(t, f.sts(1))
	require.NoError(t, suite.Client.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "later", Namespace: f.ns}, Data: map[string]string{"x": "1"}}))
	f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "version 1 after the ConfigMap exists")
	f.waitCondition(extendedv1alpha1.ConditionMissingReference, metav1.ConditionFalse, "")
}

// upgrade drives an upgrade of f from version `from` (serving 3 pods) to `from+1`: image change,
// canary Ready, the rest Ready, and checks the bookkeeping at each step.
func upgrade(t *testing.T, f *fixture, from int, image string) {
	t.Helper()
	to := from + 1
	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.Template.Spec.Template.Spec.Containers[0].Image = image
	})
	f.waitSTS(to, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, int32(1), ptr.Deref(sts.Spec.Replicas, 0), "one canary")
		assert.Equal(c, extendedv1alpha1.PhaseCanary, sts.Annotations[extendedv1alpha1.PhaseAnnotation])
	}, "canary of the new version")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st := f.get().Status
		assert.Equal(c, map[string]bool{itoa(from): true, itoa(to): false}, st.Versions)
		assert.Equal(c, int32(from), st.CurrentVersion)
		assert.Equal(c, int32(to), st.UpdateVersion)
	}, wait, tick, "status during the canary")
	f.setStatus(to, 1)
	f.waitSTS(to, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, int32(3), ptr.Deref(sts.Spec.Replicas, 0))
		assert.Equal(c, extendedv1alpha1.PhaseRollout, sts.Annotations[extendedv1alpha1.PhaseAnnotation])
	}, "the remaining pods")
	require.NotNil(t, f.sts(from), "the old version serves until the new one is rolled out")
	f.setStatus(to, 3)
	f.waitGone(from)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st := f.get().Status
		assert.Equal(c, map[string]bool{itoa(to): true}, st.Versions)
		assert.Equal(c, int32(to), st.CurrentVersion)
	}, wait, tick, "status after the upgrade")
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
}

// TestVersionBookkeeping checks versioned upgrades: names, canaries, status.versions, deletion of the
// lower version, and that scaling is not a new version.
func TestVersionBookkeeping(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	f.create(f.newESTS(3, "app:1"))
	v1 := f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "version 1")
	assert.Equal(t, "1", v1.Annotations[extendedv1alpha1.VersionAnnotation])
	assert.Equal(t, map[string]string{"app": "web", extendedv1alpha1.NameLabel: "web", extendedv1alpha1.VersionLabel: "1"}, v1.Spec.Selector.MatchLabels)
	assert.True(t, metav1.IsControlledBy(v1, f.get()))
	f.setStatus(1, 3)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")

	upgrade(t, f, 1, "app:2")
	upgrade(t, f, 2, "app:3")

	t.Run("scaling is not a new version", func(t *testing.T) {
		f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) { e.Spec.Template.Spec.Replicas = ptr.To[int32](5) })
		f.waitSTS(3, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, int32(5), ptr.Deref(sts.Spec.Replicas, 0))
		}, "scaled")
		assert.Nil(t, f.sts(4))
	})
}

// TestStaleMarking checks that a canary that never becomes Ready is restarted retryCount times, then its
// version is annotated stale and scaled to zero while the previous version keeps serving.
func TestStaleMarking(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	ests := f.newESTS(3, "app:1")
	ests.Spec.UpdateStrategy.CanaryWatchTime = &metav1.Duration{Duration: time.Second}
	ests.Spec.UpdateStrategy.RetryCount = 1
	f.create(ests)
	f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "version 1")
	f.setStatus(1, 3)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")

	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.Template.Spec.Template.Spec.Containers[0].Image = "broken"
	})
	v2 := f.waitSTS(2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "version 2")
	// The canary pod, never Ready (as the StatefulSet controller and a failing kubelet would leave it).
	canary := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-v2-0", Namespace: f.ns, Labels: v2.Spec.Template.Labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "broken"}}}}
	require.NoError(t, suite.Client.Create(t.Context(), canary))
	f.setStatus(2, 0)

	require.Eventually(t, func() bool {
		p := &corev1.Pod{}
		err := suite.Client.Get(t.Context(), client.ObjectKeyFromObject(canary), p)
		return apierrors.IsNotFound(err) || !p.DeletionTimestamp.IsZero()
	}, wait, tick, "the canary restarted once")
	f.waitSTS(2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, "1", sts.Annotations[extendedv1alpha1.CanaryRetriesAnnotation])
	}, "one retry recorded")
	f.waitSTS(2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, "true", sts.Annotations[extendedv1alpha1.StaleAnnotation])
		assert.Equal(c, int32(0), ptr.Deref(sts.Spec.Replicas, 1))
	}, "version 2 stale")
	f.waitCondition(extendedv1alpha1.ConditionStale, metav1.ConditionTrue, extendedv1alpha1.ReasonCanaryFailed)
	// kstatus: Failed, until the template changes.
	assert.Contains(t, f.waitStalled(extendedv1alpha1.ReasonCanaryFailed), "canaries not Ready")
	v1 := f.sts(1)
	require.NotNil(t, v1, "version 1 keeps serving")
	assert.Equal(t, int32(3), ptr.Deref(v1.Spec.Replicas, 0))
	assert.Equal(t, int32(1), f.get().Status.CurrentVersion)

	t.Run("a new template replaces the stale version", func(t *testing.T) {
		f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
			e.Spec.Template.Spec.Template.Spec.Containers[0].Image = "app:2"
		})
		f.waitSTS(3, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "version 3")
		f.waitGone(2)
		f.waitCondition(extendedv1alpha1.ConditionStale, metav1.ConditionFalse, "")
		f.waitCondition(extendedv1alpha1.ConditionStalled, metav1.ConditionFalse, "")
	})
}

// TestRestartSafety runs upgrades while a quarter of the operator's writes fail and the operator is
// restarted in the middle: the outcome is the same as without faults, with no version skipped or made
// twice.
func TestRestartSafety(t *testing.T) {
	var injected atomic.Int64
	funcs := faultyWrites(&injected)
	op := startOperator(t, funcs)
	f := newFixture(t)
	f.create(f.newESTS(3, "app:1"))
	f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "version 1")
	f.setStatus(1, 3)
	upgrade(t, f, 1, "app:2")

	// Restart in the middle of the next upgrade's canary phase.
	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.Template.Spec.Template.Spec.Containers[0].Image = "app:3"
	})
	f.waitSTS(3, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "version 3")
	op.stop()
	startOperator(t, funcs)
	f.setStatus(3, 1)
	f.waitSTS(3, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, int32(3), ptr.Deref(sts.Spec.Replicas, 0))
	}, "rollout after the restart")
	f.setStatus(3, 3)
	f.waitGone(2)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, map[string]bool{"3": true}, f.get().Status.Versions)
	}, wait, tick)
	assert.Nil(t, f.sts(4), "no version made twice")
	t.Logf("injected %d API errors", injected.Load())
	assert.Positive(t, injected.Load())
	var list appsv1.StatefulSetList
	require.NoError(t, suite.Client.List(t.Context(), &list, client.InNamespace(f.ns)))
	assert.Len(t, list.Items, 1)
}

// faultyWrites makes a quarter of the operator's writes fail with 503 (the fourth, the eighth, …),
// counting them in injected. Not at random: an upgrade may take only a dozen writes, and a run in
// which none failed by chance (0.75^12 ≈ 3 %) tested nothing.
func faultyWrites(injected *atomic.Int64) *interceptor.Funcs {
	var writes atomic.Int64
	fail := func() error {
		if writes.Add(1)%4 == 0 {
			injected.Add(1)
			return apierrors.NewServiceUnavailable("injected")
		}
		return nil
	}
	return &interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := fail(); err != nil {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := fail(); err != nil {
				return err
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := fail(); err != nil {
				return err
			}
			return c.Delete(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := fail(); err != nil {
				return err
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}
}

func patchConfigMap(t *testing.T, ns, name string, mutate func(*corev1.ConfigMap)) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm := &corev1.ConfigMap{}
		if err := suite.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
			return err
		}
		mutate(cm)
		return suite.Client.Update(t.Context(), cm)
	}))
}

func patchSecret(t *testing.T, ns, name string, mutate func(*corev1.Secret)) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := &corev1.Secret{}
		if err := suite.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
			return err
		}
		mutate(s)
		return suite.Client.Update(t.Context(), s)
	}))
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestUpdateNotReady checks that an upgrade waits for the serving version to be Ready, unless
// updateStrategy.updateNotReady says to go ahead (to replace a broken version).
func TestUpdateNotReady(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	f.create(f.newESTS(3, "app:1"))
	f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "version 1")
	f.setStatus(1, 2) // one pod of version 1 is not Ready
	f.setImage("app:2")
	f.waitCondition(extendedv1alpha1.ConditionProgressing, metav1.ConditionTrue, extendedv1alpha1.ReasonPodsNotReady)
	testsupport.NeverWithin(t, time.Second, 50*time.Millisecond, func() bool { return f.sts(2) != nil }, "upgrade started from a version not Ready")
	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) { e.Spec.UpdateStrategy.UpdateNotReady = true })
	f.waitSTS(2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, extendedv1alpha1.PhaseCanary, sts.Annotations[extendedv1alpha1.PhaseAnnotation])
	}, "upgrade with updateNotReady")
}
