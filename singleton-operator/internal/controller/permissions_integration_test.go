//go:build integration

package controller

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/shared/testsupport"
)

// TestShippedPermissionsLetTheOperatorChangeOnlyItsNamespaceLabel impersonates the singleton-operator's
// ServiceAccount under deploy/singleton-operator.yaml's RBAC and namespace-writes policy (server-side
// dry-run): setting and removing apps.statefulsingleton.com/enabled passes; a Pod Security label, any
// other label, an annotation or another value of its own label is refused; the cluster admin's
// identical patches still pass (the policy binds only the operator).
func TestShippedPermissionsLetTheOperatorChangeOnlyItsNamespaceLabel(t *testing.T) {
	ctx := t.Context()
	const operatorNamespace = "singleton-operator-system"
	suite.ApplyManifest(t, filepath.Join("..", "..", "..", "deploy", "singleton-operator.yaml"),
		"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
	as := suite.As(t, "system:serviceaccount:"+operatorNamespace+":singleton-operator-controller-manager",
		testsupport.ServiceAccountGroups(operatorNamespace)...)

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "singleton-permissions-", Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "team": "db",
		"apps.statefulsingleton.com/enabled": "true",
	}}}
	require.NoError(t, suite.Client.Create(ctx, ns))
	patch := func(c client.Client, p string) error {
		return c.Patch(ctx, ns.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(p)), client.DryRunAll)
	}
	const relaxPodSecurity = `{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"privileged"}}}`
	// The API server enforces a policy a moment after it is created: wait for the first refusal.
	require.Eventually(t, func() bool {
		err := patch(as, relaxPodSecurity)
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err)
	}, testsupport.PolicyWait, 200*time.Millisecond, "the namespace-writes policy is never enforced")

	assert.NoError(t, patch(as, `{"metadata":{"labels":{"apps.statefulsingleton.com/enabled":null}}}`), "removing its label")
	plain := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "singleton-permissions-"}}
	require.NoError(t, suite.Client.Create(ctx, plain))
	assert.NoError(t, as.Patch(ctx, plain, client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"apps.statefulsingleton.com/enabled":"true"}}}`)), client.DryRunAll), "setting its label")

	escalations := map[string]string{
		"relax the namespace's Pod Security":      relaxPodSecurity,
		"drop the namespace's Pod Security label": `{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":null}}}`,
		"add a Pod Security exemption label":      `{"metadata":{"labels":{"pod-security.kubernetes.io/warn":"privileged"}}}`,
		"change another label":                    `{"metadata":{"labels":{"team":"attacker"}}}`,
		"add an annotation":                       `{"metadata":{"annotations":{"scheduler.alpha.kubernetes.io/node-selector":"evil=true"}}}`,
		"set its label to another value":          `{"metadata":{"labels":{"apps.statefulsingleton.com/enabled":"false"}}}`,
	}
	refused := 0
	for name, p := range escalations {
		err := patch(as, p)
		if assert.Error(t, err, "the operator must not be able to %s", name) {
			assert.True(t, apierrors.IsInvalid(err) || apierrors.IsForbidden(err), "%s: %v", name, err)
			refused++
		}
	}
	t.Logf("singleton-operator namespace escalation attempts: %d, allowed: %d", len(escalations), len(escalations)-refused)

	for name, p := range escalations {
		assert.NoError(t, patch(suite.Client, p), "another user's patch to %s must still be admitted", name)
	}
}
