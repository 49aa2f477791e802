//go:build integration

package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// gitOpsManager is the second field manager of the GitOps test: a tool such as Argo CD or Flux
// server-side applying its manifest, without force (a conflict would fail its sync).
const gitOpsManager = "argocd"

// gitOpsApply server-side applies the ExtendedStatefulSet as the GitOps tool.
func (f *fixture) gitOpsApply(ests *extendedv1alpha1.ExtendedStatefulSet) {
	f.t.Helper()
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ests)
	require.NoError(f.t, err)
	u := &unstructured.Unstructured{Object: content}
	u.SetGroupVersionKind(extendedv1alpha1.GroupVersion.WithKind("ExtendedStatefulSet"))
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	require.NoError(f.t, suite.Client.Apply(f.t.Context(), client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(gitOpsManager)),
		"the GitOps tool's apply")
}

// ES-B4: a GitOps tool server-side applies the ExtendedStatefulSet (its template never carries the
// config-hash annotation). The annotation sits on the StatefulSets the operator creates and owns (no
// GitOps tool applies them), so the tool's syncs neither conflict with it nor remove it, and no
// rollout loop follows: one template change per config change, none per sync. The operator takes
// none of the tool's fields of the ExtendedStatefulSet.
func TestGitOpsSyncKeepsTheConfigHash(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "conf", Namespace: f.ns}, Data: map[string]string{"k": "1"}}
	require.NoError(t, suite.Client.Create(t.Context(), cm))
	ests := f.newESTS(3, "app:1")
	ests.Spec.Template.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}}}
	changes := watchTemplateChanges(t, f.ns)
	f.gitOpsApply(ests)
	first := f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.NotEmpty(c, sts.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation])
	}, "version 1 with a config hash")
	f.setStatus(1, 3)
	hash := first.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation]

	sync := func(label string) {
		t.Helper()
		ests.Labels = map[string]string{"synced": label}
		f.gitOpsApply(ests)
		testsupport.NeverWithin(t, 1500*time.Millisecond, 50*time.Millisecond, func() bool {
			sts := f.sts(1)
			return sts == nil || sts.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation] != hash
		}, "the config hash changed or went after a sync")
	}
	sync("1")
	assert.Zero(t, changes.count("web-v1"), "a sync rolls nothing")

	patchConfigMap(t, f.ns, "conf", func(cm *corev1.ConfigMap) { cm.Data["k"] = "2" })
	require.Eventually(t, func() bool { return changes.count("web-v1") == 1 }, wait, tick)
	hash = f.sts(1).Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation]
	sync("2")
	assert.Equal(t, 1, changes.count("web-v1"), "one template change for one config change, none for the syncs")
	assert.Nil(t, f.sts(2), "no new version")

	for _, mf := range f.get().ManagedFields {
		if mf.Manager == gitOpsManager || mf.FieldsV1 == nil {
			continue
		}
		assert.NotContains(t, string(mf.FieldsV1.Raw), `"f:spec"`, "manager %s (%s) took none of the tool's spec", mf.Manager, mf.Operation)
		assert.False(t, strings.Contains(string(mf.FieldsV1.Raw), `"f:synced"`), "manager %s took the tool's label", mf.Manager)
	}
}
