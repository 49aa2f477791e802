//go:build integration

package controller

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

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

// installManifestRBAC creates the operator's ServiceAccount, its generated ClusterRole bound to it,
// and the unbound secret-reader ClusterRole, named as deploy/rollout-operator.yaml names them, and
// the admission policies of deploy/rollout-operator.yaml, and waits until those are in force (once
// per run: they are cluster-scoped).
func installManifestRBAC(t *testing.T) *corev1.ServiceAccount {
	t.Helper()
	ctx := context.Background()
	load := func(path, name string) *rbacv1.ClusterRole {
		raw, err := os.ReadFile(filepath.Join("..", "..", "config", path))
		require.NoError(t, err)
		role := &rbacv1.ClusterRole{}
		require.NoError(t, yaml.Unmarshal(raw, role))
		role.Name = name
		return role
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rollout-operator-system"}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "rollout-operator-controller-manager", Namespace: ns.Name}}
	objs := []client.Object{
		ns, sa,
		load("rbac/role.yaml", "rollout-operator-manager-role"),
		load("secretreader/cluster_role.yaml", DefaultSecretReaderClusterRole),
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "rollout-operator-manager-rolebinding"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "rollout-operator-manager-role"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns.Name, Name: sa.Name}},
		},
	}
	for _, o := range objs {
		if err := suite.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err)
		}
	}
	policies := testsupport.InstallManifestPolicies(t, suite.Client, filepath.Join("..", "..", "..", "deploy", "rollout-operator.yaml"))
	// The API server loads policies asynchronously: probe with a write they refuse.
	asOperator := rest.CopyConfig(suite.Config)
	asOperator.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + sa.Namespace + ":" + sa.Name}
	operator, err := client.New(asOperator, client.Options{Scheme: suite.Scheme})
	require.NoError(t, err)
	probe := newRolloutSecretAccess(nil, nil, DefaultSecretReaderClusterRole,
		rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}).RoleBinding("kube-system")
	require.Eventually(t, func() bool {
		err := operator.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy")
	}, wait, tick, "the policies %v are in force", policies)
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
