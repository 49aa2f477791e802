//go:build e2e

package rollout

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/e2e/framework"
	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// TestRestartThroughPhasedRollout (issue 22, ES-B2) runs the extended-operator and the
// rollout-operator of deploy/ together, each as a local process under its manifest's ServiceAccount,
// with checks against a real Prometheus. An ExtendedStatefulSet with updateStrategy {type: InPlace,
// restartVia: PhasedRollout} keeps one StatefulSet "web", which a PhasedRollout rolls. A
// configuration change (the referenced ConfigMap's data) then takes the path of an image change: the
// partition moves 3→2→1→0 one pod per passed check (the checker of TestRollout counts 0 unchecked
// advances), a failing check holds it, and the ExtendedStatefulSet is Ready once every pod runs the
// new configuration. The image change after it goes the same way.
//
// Each operator alone is covered elsewhere: the envtests TestRestartViaPhasedRollout (the
// extended-operator following a PhasedRollout the test plays) and the PhasedRollout tests of this
// package.
func TestRestartThroughPhasedRollout(t *testing.T) {
	framework.StartLocalOperator(t, "extended-operator")
	startRolloutOperator(t)
	exp := newMetricsExporter(t)
	prom := startPrometheusFor(t, exp.srv.Listener.Addr().String())
	proxy := newRecordingProxy(t, prom.url)

	ns := framework.NewNamespace(t)
	for i := range 3 {
		exp.setErrors(ns, fmt.Sprintf("web-%d", i), 0)
	}
	require.NoError(t, framework.Client.Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-config"}, Data: map[string]string{"mode": "a"}}))
	e := framework.NewESTS("web", 3)
	e.Namespace = ns
	e.Spec.UpdateStrategy.Type = extendedv1alpha1.InPlaceUpdateStrategy
	e.Spec.UpdateStrategy.RestartVia = extendedv1alpha1.RestartViaPhasedRollout
	e.Spec.UpdateStrategy.ConfigChangeQuietPeriod = &metav1.Duration{}
	e.Spec.Template.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web-config"}}}}
	require.NoError(t, framework.Client.Create(t.Context(), e))
	framework.WaitStatefulSetReady(t, ns, "web", 3)
	assert.Equal(t, int32(3), stsPartition(t, ns, "web"), "created held: nothing rolls before the PhasedRollout manages it")
	pw := watchPartition(t, ns, "web")
	createPhasedRollout(t, ns, "pr", "web", proxy.url, 1, 0, nil)
	waitRolloutPhase(t, ns, "pr", "Updated")
	waitESTSReady(t, ns, "web")

	// A configuration change whose second pod fails its check: web-2 rolls, web-1 rolls and is held.
	exp.setErrors(ns, "web-1", 7)
	configHash := func() string {
		sts, err := framework.FetchStatefulSet(t.Context(), ns, "web")
		require.NoError(t, err)
		return sts.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation]
	}
	before := configHash()
	framework.RetryOnConflict(t, func() error {
		cm := &corev1.ConfigMap{}
		if err := framework.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web-config"}, cm); err != nil {
			return err
		}
		cm.Data["mode"] = "b"
		return framework.Client.Update(t.Context(), cm)
	})
	require.Eventually(t, func() bool { return configHash() != before }, framework.Timeout, framework.Tick, "the new config hash written")
	waitPartitionValue(t, ns, "web", 1)
	testsupport.NeverWithin(t, 3*time.Second, 100*time.Millisecond, func() bool { return stsPartition(t, ns, "web") != 1 },
		"the partition moved past a failing check")
	ready := esReady(t, ns, "web")
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Contains(t, ready.Message, "rolled by PhasedRollout pr")

	exp.setErrors(ns, "web-1", 0)
	waitRolloutPhase(t, ns, "pr", "Updated")
	waitPartitionValue(t, ns, "web", 3)
	waitESTSReady(t, ns, "web")
	require.Eventually(t, func() bool { return len(pw.values()) >= 5 }, framework.Timeout, framework.Tick, "the watch saw the last change")
	assert.Equal(t, []int32{3, 2, 1, 0, 3}, pw.values(), "the configuration restart, stepped by the PhasedRollout")
	pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	for _, p := range pods.Items {
		assert.Equal(t, configHash(), p.Annotations[extendedv1alpha1.ConfigHashAnnotation], "pod %s runs the new configuration", p.Name)
	}
	inv := checkAdvances(pw, proxy, ns, 1)
	t.Logf("configuration restart: partition history %v, %d advances, %d unchecked", pw.values(), inv.advances, inv.unchecked)
	assert.Zero(t, inv.unchecked, "partition advances without a passing check")
	assert.Equal(t, 3, inv.advances)

	// An image (template) change: the same path, version 2.
	pw = watchPartition(t, ns, "web")
	framework.RetryOnConflict(t, func() error {
		cur := &extendedv1alpha1.ExtendedStatefulSet{}
		if err := framework.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web"}, cur); err != nil {
			return err
		}
		cur.Spec.Template.Spec.Template.Annotations = map[string]string{"e2e/bump": "2"}
		return framework.Client.Update(t.Context(), cur)
	})
	require.Eventually(t, func() bool { return stsPartition(t, ns, "web") < 3 }, framework.Timeout, framework.Tick, "the template change rolling")
	waitRolloutPhase(t, ns, "pr", "Updated")
	waitPartitionValue(t, ns, "web", 3)
	waitESTSReady(t, ns, "web")
	cur := &extendedv1alpha1.ExtendedStatefulSet{}
	require.NoError(t, framework.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web"}, cur))
	assert.Equal(t, int32(2), cur.Status.CurrentVersion)
	inv = checkAdvances(pw, proxy, ns, 1)
	t.Logf("template change: partition history %v, %d advances, %d unchecked", pw.values(), inv.advances, inv.unchecked)
	assert.Zero(t, inv.unchecked, "partition advances without a passing check")
	sts, err := framework.FetchStatefulSet(t.Context(), ns, "web")
	require.NoError(t, err)
	assert.Equal(t, "2", sts.Spec.Template.Annotations["e2e/bump"])
	assert.Equal(t, appsv1.RollingUpdateStatefulSetStrategyType, sts.Spec.UpdateStrategy.Type)
}

// esReady is the ExtendedStatefulSet's Ready condition (empty when it has none).
func esReady(t *testing.T, ns, name string) metav1.Condition {
	t.Helper()
	e := &extendedv1alpha1.ExtendedStatefulSet{}
	require.NoError(t, framework.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, e))
	if c := meta.FindStatusCondition(e.Status.Conditions, extendedv1alpha1.ConditionReady); c != nil && c.ObservedGeneration == e.Generation {
		return *c
	}
	return metav1.Condition{}
}

// waitESTSReady waits until the ExtendedStatefulSet is Ready for its generation.
func waitESTSReady(t *testing.T, ns, name string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r := esReady(t, ns, name)
		assert.Equal(c, metav1.ConditionTrue, r.Status, "Ready: %s %s", r.Reason, r.Message)
	}, framework.Timeout, framework.Tick, "ExtendedStatefulSet %s Ready", name)
}
