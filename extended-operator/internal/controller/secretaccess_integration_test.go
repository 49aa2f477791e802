//go:build integration

package controller

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// installManifestIdentity installs the operator's identity as deploy/extended-operator.yaml ships it
// (its ServiceAccount, its generated ClusterRole bound to it, the unbound secret-reader ClusterRole,
// the admission policies, in force) and returns the ServiceAccount and a config impersonating it.
func installManifestIdentity(t *testing.T) (*corev1.ServiceAccount, *rest.Config) {
	t.Helper()
	self := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: operatorName + "-system", Name: operatorName + "-controller-manager"}
	return testsupport.InstallOperatorIdentity(t, &suite, operatorName, filepath.Join("..", "..", "config"),
		filepath.Join("..", "..", "..", "deploy", "extended-operator.yaml"), func(c client.Client) error {
			return c.Create(context.Background(), newSecretAccess(nil, nil, self, nil).RoleBinding("kube-system"), client.DryRunAll)
		})
}

// TestSecretChangeRestartsUnderTheManifestRBAC runs the operator as its manifest's ServiceAccount
// (generated ClusterRole, no Secret right of its own, the admission policies in force): it grants
// itself Secret reads in the namespace of an ExtendedStatefulSet that references a Secret, a change of
// that Secret's data still rolls the pods promptly (the per-namespace Secret informer), it cannot read
// Secrets of another namespace, and deleting the ExtendedStatefulSet revokes the grant.
func TestSecretChangeRestartsUnderTheManifestRBAC(t *testing.T) {
	ctx := context.Background()
	sa, asOperator := installManifestIdentity(t)
	operatorClient, err := client.New(asOperator, client.Options{Scheme: suite.Scheme})
	require.NoError(t, err)
	opts := Options{ConfigQuietPeriod: 500 * time.Millisecond, ConfigMaxDelay: 5 * time.Second, HashKey: []byte("0123456789abcdef0123456789abcdef")}
	suite.StartManagerAs(t, asOperator, opts.Setup, func(o *ctrl.Options) { CacheOptions(&o.Cache) })

	f := newFixture(t)
	other := newFixture(t)
	for _, ns := range []string{f.ns, other.ns} {
		require.NoError(t, suite.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns},
			Data: map[string][]byte{"password": []byte("hunter2")}}))
	}
	secretOf := func(ns string) error {
		return operatorClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "creds"}, &corev1.Secret{})
	}
	require.True(t, apierrors.IsForbidden(secretOf(f.ns)), "no Secret access before an ExtendedStatefulSet references one")

	ests := f.newESTS(3, "app:1")
	ests.Spec.Template.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{
		{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}}}
	changes := watchTemplateChanges(t, f.ns)
	f.create(ests)
	f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.NotEmpty(c, sts.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation])
	}, "version 1 with a config hash, the Secret read under the grant")
	f.setStatus(1, 3)
	rb := &rbacv1.RoleBinding{}
	require.NoError(t, suite.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: SecretReaderClusterRole}, rb))
	assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: SecretReaderClusterRole}, rb.RoleRef)
	assert.Equal(t, []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}}, rb.Subjects)
	assert.NoError(t, secretOf(f.ns))
	assert.True(t, apierrors.IsForbidden(secretOf(other.ns)), "no Secret access where no ExtendedStatefulSet references one")
	assert.True(t, apierrors.IsForbidden(secretOf("kube-system")), "no Secret access in kube-system")

	// Let the informer's initial events settle, then change the data: one roll, and how long it took.
	time.Sleep(time.Second)
	before := changes.count("web-v1")
	changed := time.Now()
	patchSecret(t, f.ns, "creds", func(s *corev1.Secret) { s.Data["password"] = []byte("hunter3") })
	require.Eventually(t, func() bool { return changes.count("web-v1") == before+1 }, wait, 10*time.Millisecond,
		"a Secret data change rolls the pods")
	t.Logf("Secret data change to pod template change: %v (quiet period %v)", time.Since(changed).Round(time.Millisecond), opts.ConfigQuietPeriod)

	require.NoError(t, suite.Client.Delete(ctx, f.get()))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(suite.Client.Get(ctx, client.ObjectKeyFromObject(rb), &rbacv1.RoleBinding{}))
	}, wait, tick, "the grant is revoked once no ExtendedStatefulSet references a Secret")
	require.Eventually(t, func() bool { return apierrors.IsForbidden(secretOf(f.ns)) }, wait, tick, "Secret access revoked")
}

// TestRoleBindingPolicy: as the operator's ServiceAccount, every RoleBinding write a compromised
// operator could use to escalate is refused by the admission policies of deploy/extended-operator.yaml,
// and the same writes by another user are not (testsupport.CheckRoleBindingPolicy).
func TestRoleBindingPolicy(t *testing.T) {
	sa, asOperator := installManifestIdentity(t)
	operatorClient, err := client.New(asOperator, client.Options{Scheme: suite.Scheme})
	require.NoError(t, err)
	withESTS := newFixture(t)
	withESTS.create(withESTS.newESTS(1, "app:1"))
	without := newFixture(t)
	access := newSecretAccess(nil, nil, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}, nil)
	attempts, allowed := testsupport.CheckRoleBindingPolicy(t, operatorClient, suite.Client, access, withESTS.ns, without.ns)
	assert.Positive(t, attempts)
	assert.Zero(t, allowed)
}
