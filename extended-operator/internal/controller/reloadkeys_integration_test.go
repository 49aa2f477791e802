//go:build integration

package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// TestReloadKeys checks spec.reloadKeys (ES-B1) end to end: a change of a key the workload reloads by
// itself (not listed) does not roll the pods, a change of a listed key does, an object not listed still
// counts whole, and an entry naming an object the template does not reference gets a Warning Event.
func TestReloadKeys(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "conf", Namespace: f.ns}, Data: map[string]string{"port": "80", "loglevel": "info"}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: f.ns}, Data: map[string][]byte{"password": []byte("x")}}
	require.NoError(t, suite.Client.Create(t.Context(), cm))
	require.NoError(t, suite.Client.Create(t.Context(), secret))
	ests := f.newESTS(3, "app:1")
	pod := &ests.Spec.Template.Spec.Template.Spec
	pod.Containers[0].EnvFrom = []corev1.EnvFromSource{
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}},
		{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}},
	}
	ests.Spec.ReloadKeys = []extendedv1alpha1.ReloadKeys{
		{Kind: "ConfigMap", Name: "conf", Keys: []string{"port"}}, // the app reloads loglevel by itself
		{Kind: "ConfigMap", Name: "not-referenced", Keys: []string{"a"}},
	}
	changes := watchTemplateChanges(t, f.ns)
	f.create(ests)
	f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.NotEmpty(c, sts.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation])
	}, "version 1 with a config hash")
	f.setStatus(1, 3)

	t.Run("an entry naming no reference is reported", func(t *testing.T) {
		require.Eventually(t, func() bool {
			return testsupport.Occurrences(testsupport.Events(t, suite.Client, f.ns, "ExtendedStatefulSet", f.name, extendedv1alpha1.ReasonReloadKeysUnused)) > 0
		}, wait, tick)
	})

	t.Run("a key the workload reloads does not roll", func(t *testing.T) {
		patchConfigMap(t, f.ns, "conf", func(cm *corev1.ConfigMap) { cm.Data["loglevel"] = "debug" })
		patchConfigMap(t, f.ns, "conf", func(cm *corev1.ConfigMap) { cm.Data["added"] = "1" })
		testsupport.NeverWithin(t, 3*time.Second, 50*time.Millisecond, func() bool { return changes.count("web-v1") > 0 }, "template changed")
	})

	t.Run("a listed key rolls", func(t *testing.T) {
		patchConfigMap(t, f.ns, "conf", func(cm *corev1.ConfigMap) { cm.Data["port"] = "8080" })
		require.Eventually(t, func() bool { return changes.count("web-v1") == 1 }, wait, tick)
	})

	t.Run("an object not listed counts whole", func(t *testing.T) {
		patchSecret(t, f.ns, "creds", func(s *corev1.Secret) { s.Data["password"] = []byte("y") })
		require.Eventually(t, func() bool { return changes.count("web-v1") == 2 }, wait, tick)
	})
}
