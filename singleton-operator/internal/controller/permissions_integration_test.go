//go:build integration

package controller

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
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

// TestShippedPermissionsScopeTheWebhookServerAndCertificatesByName impersonates the webhook-server's
// and the operator's ServiceAccounts under deploy/singleton-operator.yaml's RBAC: each reads and writes
// only its own webhook configuration and certificate Secrets, by name (a list or watch only with the
// metadata.name field selector, as their caches make them); another admission webhook or Secret is
// refused.
func TestShippedPermissionsScopeTheWebhookServerAndCertificatesByName(t *testing.T) {
	ctx := t.Context()
	const operatorNamespace = "singleton-operator-system"
	suite.ApplyManifest(t, filepath.Join("..", "..", "..", "deploy", "singleton-operator.yaml"),
		"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Secret")
	webhookServer := suite.As(t, "system:serviceaccount:"+operatorNamespace+":singleton-operator-webhook-server",
		testsupport.ServiceAccountGroups(operatorNamespace)...)
	operator := suite.As(t, "system:serviceaccount:"+operatorNamespace+":singleton-operator-controller-manager",
		testsupport.ServiceAccountGroups(operatorNamespace)...)

	// Configurations without rules: they never intercept a request of the test's API server.
	webhooks := func(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
		return &admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{
				Name:                    "pods.test.statefulops.dev",
				ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://example.invalid/mutate")},
				SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
				AdmissionReviewVersions: []string{"v1"},
				FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			}},
		}
	}
	own, other := webhooks("singleton-operator-mutating-webhook-configuration"), webhooks("another-admission-webhook")
	for _, w := range []client.Object{own, other} {
		if err := suite.Client.Create(ctx, w); err != nil && !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err)
		}
	}
	kubeSystemSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bootstrap-token-abcdef"}}
	neighbour := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "not-a-certificate"}}
	for _, s := range []client.Object{kubeSystemSecret, neighbour} {
		if err := suite.Client.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err)
		}
	}
	byName := func(name string) client.ListOption {
		return client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", name)}
	}
	caBundle := func(c client.Client, w *admissionregistrationv1.MutatingWebhookConfiguration) error {
		got := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := suite.Client.Get(ctx, client.ObjectKeyFromObject(w), got); err != nil {
			return err
		}
		got.Webhooks[0].ClientConfig.CABundle = []byte("-----BEGIN CERTIFICATE-----")
		return c.Update(ctx, got, client.DryRunAll)
	}
	getSecret := func(c client.Client, key client.ObjectKey) error { return c.Get(ctx, key, &corev1.Secret{}) }
	listSecrets := func(c client.Client, opts ...client.ListOption) error {
		return c.List(ctx, &corev1.SecretList{}, append(opts, client.InNamespace(operatorNamespace))...)
	}
	webhookCert := client.ObjectKey{Namespace: operatorNamespace, Name: "singleton-operator-webhook-server-cert"}
	grantCert := client.ObjectKey{Namespace: operatorNamespace, Name: "singleton-operator-grant-cert"}

	allowed := map[string]error{
		"webhook-server: get its configuration":    webhookServer.Get(ctx, client.ObjectKeyFromObject(own), &admissionregistrationv1.MutatingWebhookConfiguration{}),
		"webhook-server: list its configuration":   webhookServer.List(ctx, &admissionregistrationv1.MutatingWebhookConfigurationList{}, byName(own.Name)),
		"webhook-server: keep its caBundle":        caBundle(webhookServer, own),
		"webhook-server: read its certificate":     getSecret(webhookServer, webhookCert),
		"webhook-server: list its certificate":     listSecrets(webhookServer, byName(webhookCert.Name)),
		"webhook-server: read the grant CA":        getSecret(webhookServer, grantCert),
		"singleton-operator: read its certificate": getSecret(operator, grantCert),
		"singleton-operator: list its certificate": listSecrets(operator, byName(grantCert.Name)),
	}
	for name, err := range allowed {
		assert.NoError(t, err, name)
	}
	escalations := map[string]error{
		"webhook-server: rewrite another admission webhook":        caBundle(webhookServer, other),
		"webhook-server: read another admission webhook":           webhookServer.Get(ctx, client.ObjectKeyFromObject(other), &admissionregistrationv1.MutatingWebhookConfiguration{}),
		"webhook-server: list every admission webhook":             webhookServer.List(ctx, &admissionregistrationv1.MutatingWebhookConfigurationList{}),
		"webhook-server: read a kube-system Secret":                getSecret(webhookServer, client.ObjectKeyFromObject(kubeSystemSecret)),
		"webhook-server: read another Secret of its namespace":     getSecret(webhookServer, client.ObjectKeyFromObject(neighbour)),
		"webhook-server: list the Secrets of its namespace":        listSecrets(webhookServer),
		"singleton-operator: read a kube-system Secret":            getSecret(operator, client.ObjectKeyFromObject(kubeSystemSecret)),
		"singleton-operator: read another Secret of its namespace": getSecret(operator, client.ObjectKeyFromObject(neighbour)),
		"singleton-operator: list the Secrets of its namespace":    listSecrets(operator),
		"singleton-operator: rewrite an admission webhook":         caBundle(operator, own),
	}
	refused := 0
	for name, err := range escalations {
		if assert.Error(t, err, name) {
			assert.True(t, apierrors.IsForbidden(err), "%s: %v", name, err)
			refused++
		}
	}
	t.Logf("webhook-server and certificate escalation attempts: %d, allowed: %d", len(escalations), len(escalations)-refused)
}
