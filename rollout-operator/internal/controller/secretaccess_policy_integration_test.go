//go:build integration

package controller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestRoleBindingPolicy applies the admission policies of deploy/rollout-operator.yaml and, as the
// operator's ServiceAccount (under its manifest RBAC), tries every RoleBinding write a compromised
// operator could use to escalate, with server-side dry-run: only its own grant, in a namespace with a
// PhasedRollout, is admitted. The same writes by another user are admitted (the policies match the
// operator's ServiceAccount only), except a RoleBinding carrying the operator's grant label
// (sts.plus/secret-access=rollout-operator) in a namespace without a PhasedRollout
// (config/policy/rolebinding_namespace.yaml says why).
func TestRoleBindingPolicy(t *testing.T) {
	ctx := context.Background()
	sa := installManifestRBAC(t)
	asOperator := rest.CopyConfig(suite.Config)
	asOperator.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + sa.Namespace + ":" + sa.Name}
	operator, err := client.New(asOperator, client.Options{Scheme: suite.Scheme})
	require.NoError(t, err)

	withRollout := newFixture(t, 1, 0)
	withRollout.createRollout()
	without := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rollout-none-"}}
	require.NoError(t, suite.Client.Create(ctx, without))
	own := newRolloutSecretAccess(nil, nil, DefaultSecretReaderClusterRole,
		rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}).RoleBinding
	dryRun := client.DryRunAll

	require.NoError(t, operator.Create(ctx, own(withRollout.ns), dryRun),
		"the operator's own grant in a namespace with a PhasedRollout is admitted")

	// Someone else's RoleBinding of the operator's name, to update and delete.
	theirs := own(withRollout.ns)
	theirs.Name, theirs.Labels = "someone-elses", nil
	theirs.Subjects = []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "someone"}}
	require.NoError(t, suite.Client.Create(ctx, theirs))

	type attempt struct {
		name  string
		write func(c client.Client) error
		// admittedForOthers is false for the writes the label-selected policy refuses to everyone: a
		// RoleBinding with the operator's grant label where no PhasedRollout is.
		admittedForOthers bool
	}
	mutated := func(ns string, m func(*rbacv1.RoleBinding)) func(client.Client) error {
		return func(c client.Client) error {
			rb := own(ns)
			m(rb)
			return c.Create(ctx, rb, dryRun)
		}
	}
	attempts := []attempt{
		{"its grant in kube-system", mutated("kube-system", func(*rbacv1.RoleBinding) {}), false},
		{"its grant in kube-node-lease", mutated("kube-node-lease", func(*rbacv1.RoleBinding) {}), false},
		{"its role bound to another subject", mutated(withRollout.ns, func(rb *rbacv1.RoleBinding) {
			rb.Subjects = []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: "default"}}
		}), true},
		{"its role bound to itself and another subject", mutated(withRollout.ns, func(rb *rbacv1.RoleBinding) {
			rb.Subjects = append(rb.Subjects, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"})
		}), true},
		{"another role (cluster-admin)", mutated(withRollout.ns, func(rb *rbacv1.RoleBinding) { rb.RoleRef.Name = "cluster-admin" }), true},
		{"another RoleBinding name", mutated(withRollout.ns, func(rb *rbacv1.RoleBinding) { rb.Name = "other" }), true},
		{"without the operator's labels", mutated(withRollout.ns, func(rb *rbacv1.RoleBinding) { rb.Labels = nil }), true},
		{"its grant in a namespace without a PhasedRollout", mutated(without.Name, func(*rbacv1.RoleBinding) {}), false},
		{"update of someone else's RoleBinding", func(c client.Client) error {
			rb := &rbacv1.RoleBinding{}
			require.NoError(t, suite.Client.Get(ctx, client.ObjectKeyFromObject(theirs), rb))
			rb.Subjects = append(rb.Subjects, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"})
			return c.Update(ctx, rb, dryRun)
		}, true},
		{"delete of someone else's RoleBinding", func(c client.Client) error {
			return c.Delete(ctx, theirs.DeepCopy(), client.DryRunAll)
		}, true},
	}
	allowed := 0
	for _, a := range attempts {
		err := a.write(operator)
		if err == nil {
			allowed++
			t.Errorf("as the operator, %s: admitted", a.name)
			continue
		}
		assert.True(t, apierrors.IsForbidden(err) || apierrors.IsInvalid(err), "as the operator, %s: %v", a.name, err)
		t.Logf("as the operator, %s: refused: %v", a.name, err)
	}
	t.Logf("RoleBinding escalation attempts as %s: %d, allowed: %d", asOperator.Impersonate.UserName, len(attempts), allowed)

	for _, a := range attempts {
		err := a.write(suite.Client)
		if a.admittedForOthers {
			assert.NoError(t, err, "another user's %s is not affected", a.name)
		} else {
			assert.Error(t, err, "another user's %s carries the operator's grant label", a.name)
		}
	}
	for _, ns := range []string{without.Name, "kube-system", "kube-node-lease"} {
		unlabelled := own(ns)
		delete(unlabelled.Labels, grantLabel)
		assert.NoError(t, suite.Client.Create(ctx, unlabelled, dryRun),
			"another user's RoleBinding without the grant label, in %s (no PhasedRollout), is not affected", ns)
	}
}
