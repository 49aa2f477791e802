//go:build integration

package controller

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// TestSecretAccessUnderTheManifestRBAC runs the operator impersonating a ServiceAccount bound to the
// ClusterRole generated from its RBAC markers (config/rbac/role.yaml), with the manifest's
// secret-reader ClusterRole (config/secretreader) installed but bound nowhere and the manifest's
// admission policies (config/policy) in force: the operator reads the
// credentials Secret of a PhasedRollout through the RoleBinding it creates in that namespace only,
// cannot read Secrets elsewhere, and deletes the RoleBinding once no PhasedRollout there names a
// Secret.
func TestSecretAccessUnderTheManifestRBAC(t *testing.T) {
	ctx := context.Background()
	sa := installManifestRBAC(t)
	asOperator := rest.CopyConfig(suite.Config)
	asOperator.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + sa.Namespace + ":" + sa.Name}
	operatorClient, err := client.New(asOperator, client.Options{Scheme: suite.Scheme})
	require.NoError(t, err)

	checker := newFakeChecker(VerdictPass)
	startOperatorWith(t, asOperator, checker)
	f := newFixture(t, 2, 0)
	f.simulateStatefulSetController()
	other := newFixture(t, 1, 0) // a namespace without any PhasedRollout
	for _, ns := range []string{f.ns, other.ns} {
		require.NoError(t, suite.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "prom-secret", Namespace: ns},
			StringData: map[string]string{"token": "tok-" + ns},
		}))
	}
	secretOf := func(ns string) error {
		return operatorClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "prom-secret"}, &corev1.Secret{})
	}
	require.True(t, apierrors.IsForbidden(secretOf(f.ns)), "no Secret access before a PhasedRollout asks for it")

	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) {
		pr.Spec.Check.SuccessThreshold = 1
		pr.Spec.Check.Query.SecretRef = "prom-secret"
	})
	rb := &rbacv1.RoleBinding{}
	require.Eventually(t, func() bool {
		return suite.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: SecretReaderRoleBinding}, rb) == nil
	}, wait, tick, "the operator binds the secret reader in the PhasedRollout's namespace")
	assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: DefaultSecretReaderClusterRole}, rb.RoleRef)
	assert.Equal(t, []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}}, rb.Subjects,
		"the subject is the operator's own identity, from a SelfSubjectReview")

	f.waitPartition(2)
	f.newRevision("web-r2")
	f.waitRolledTo("web-r2")
	require.NotEmpty(t, checker.recorded())
	assert.Equal(t, "tok-"+f.ns, checker.recorded()[0].Token, "the Secret was read under the RoleBinding")
	assert.NoError(t, secretOf(f.ns))
	assert.True(t, apierrors.IsForbidden(secretOf(other.ns)), "no Secret access where no PhasedRollout names one")
	err = suite.Client.Get(ctx, client.ObjectKey{Namespace: other.ns, Name: SecretReaderRoleBinding}, &rbacv1.RoleBinding{})
	assert.True(t, apierrors.IsNotFound(err), "no RoleBinding in a namespace without PhasedRollouts")

	// Deleting the PhasedRollout revokes the access.
	require.NoError(t, suite.Client.Delete(ctx, f.rollout()))
	require.Eventually(t, func() bool {
		err := suite.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: SecretReaderRoleBinding}, &rbacv1.RoleBinding{})
		return apierrors.IsNotFound(err)
	}, wait, tick, "the RoleBinding is deleted once no PhasedRollout names a Secret")
	require.Eventually(t, func() bool { return apierrors.IsForbidden(secretOf(f.ns)) }, wait, tick, "Secret access revoked")
	require.Eventually(t, func() bool {
		err := suite.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "pr"}, &rolloutv1alpha1.PhasedRollout{})
		return apierrors.IsNotFound(err)
	}, wait, tick, "the operator removed its finalizer under its own RBAC")
}

// TestSecretAccessKeepsOthersRoleBindings: a RoleBinding of that name the operator did not create is
// left alone when no PhasedRollout needs it.
func TestSecretAccessKeepsOthersRoleBindings(t *testing.T) {
	ctx := context.Background()
	startOperator(t, newFakeChecker(VerdictPass))
	f := newFixture(t, 1, 0)
	mine := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: SecretReaderRoleBinding, Namespace: f.ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "someone"}},
	}
	require.NoError(t, suite.Client.Create(ctx, mine))
	f.createRollout() // no secretRef: the namespace needs no Secret access
	f.waitPhase(rolloutv1alpha1.PhaseUpdated)
	require.NoError(t, suite.Client.Get(ctx, client.ObjectKeyFromObject(mine), mine))
	assert.Empty(t, mine.Labels[managedByLabel])
}

// installManifestRBAC installs the operator's identity as deploy/rollout-operator.yaml ships it:
// its ServiceAccount, its generated ClusterRole bound to it, the unbound secret-reader ClusterRole
// and the admission policies, in force (testsupport.InstallOperatorIdentity).
func installManifestRBAC(t *testing.T) *corev1.ServiceAccount {
	t.Helper()
	sa, _ := testsupport.InstallOperatorIdentity(t, &suite, managedByValue, filepath.Join("..", "..", "config"),
		filepath.Join("..", "..", "..", "deploy", "rollout-operator.yaml"), func(c client.Client) error {
			probe := newRolloutSecretAccess(nil, nil, DefaultSecretReaderClusterRole,
				rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "rollout-operator-system", Name: "rollout-operator-controller-manager"}).RoleBinding("kube-system")
			return c.Create(context.Background(), probe, client.DryRunAll)
		})
	return sa
}

// TestSecretAccessLeftBehindIsRevokedAtStart: a RoleBinding the operator made in a namespace whose
// last PhasedRollout was deleted while the operator was down is deleted when the operator starts.
func TestSecretAccessLeftBehindIsRevokedAtStart(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rollout-stale-"}}
	require.NoError(t, suite.Client.Create(ctx, ns))
	stale := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: SecretReaderRoleBinding, Namespace: ns.Name, Labels: map[string]string{managedByLabel: managedByValue}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: DefaultSecretReaderClusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "someone"}},
	}
	require.NoError(t, suite.Client.Create(ctx, stale))
	startOperator(t, newFakeChecker(VerdictPass))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(suite.Client.Get(ctx, client.ObjectKeyFromObject(stale), &rbacv1.RoleBinding{}))
	}, wait, tick, "the stale RoleBinding is deleted at start")
}
