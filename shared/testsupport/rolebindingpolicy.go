package testsupport

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// CheckRoleBindingPolicy tries, with server-side dry-run, every RoleBinding write a compromised
// operator holding a per-namespace Secret grant (opsutil.SecretAccess) could use to escalate, as the
// operator (a client impersonating its ServiceAccount) and as another user (admin): the operator's
// own grant in withObjects (a namespace holding the operator's objects) is admitted; every other
// attempt is refused to the operator and admitted to the other user, except a RoleBinding with the
// operator's grant label where none of its objects is (the label-selected policy of
// config/policy/rolebinding_namespace.yaml refuses it to everyone). without is a namespace without the
// operator's objects. It logs and returns the number of attempts and of those admitted to the operator.
func CheckRoleBindingPolicy(t *testing.T, operator, admin client.Client, access *opsutil.SecretAccess, withObjects, without string) (attempts, allowed int) {
	t.Helper()
	ctx := context.Background()
	dryRun := client.DryRunAll
	require.NoError(t, operator.Create(ctx, access.RoleBinding(withObjects), dryRun),
		"the operator's own grant in a namespace with its objects is admitted")

	// Someone else's RoleBinding, to update and delete.
	theirs := access.RoleBinding(withObjects)
	theirs.Name, theirs.Labels = "someone-elses-"+access.Operator, nil
	theirs.Subjects = []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "someone"}}
	require.NoError(t, admin.Create(ctx, theirs))

	mutated := func(ns string, m func(*rbacv1.RoleBinding)) func(client.Client) error {
		return func(c client.Client) error {
			rb := access.RoleBinding(ns)
			m(rb)
			return c.Create(ctx, rb, dryRun)
		}
	}
	same := func(*rbacv1.RoleBinding) {}
	list := []struct {
		name  string
		write func(c client.Client) error
		// admittedForOthers is false for the writes the label-selected policy refuses to everyone.
		admittedForOthers bool
	}{
		{"its grant in kube-system", mutated("kube-system", same), false},
		{"its grant in kube-node-lease", mutated("kube-node-lease", same), false},
		{"its grant in kube-public", mutated("kube-public", same), false},
		{"its role bound to another subject", mutated(withObjects, func(rb *rbacv1.RoleBinding) {
			rb.Subjects = []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: "default"}}
		}), true},
		{"its role bound to itself and another subject", mutated(withObjects, func(rb *rbacv1.RoleBinding) {
			rb.Subjects = append(rb.Subjects, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"})
		}), true},
		{"another role (cluster-admin)", mutated(withObjects, func(rb *rbacv1.RoleBinding) { rb.RoleRef.Name = "cluster-admin" }), true},
		{"another RoleBinding name", mutated(withObjects, func(rb *rbacv1.RoleBinding) { rb.Name = "other" }), true},
		{"without the operator's labels", mutated(withObjects, func(rb *rbacv1.RoleBinding) { rb.Labels = nil }), true},
		{"its grant in a namespace without its objects", mutated(without, same), false},
		{"update of someone else's RoleBinding", func(c client.Client) error {
			rb := &rbacv1.RoleBinding{}
			require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(theirs), rb))
			rb.Subjects = append(rb.Subjects, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"})
			return c.Update(ctx, rb, dryRun)
		}, true},
		{"delete of someone else's RoleBinding", func(c client.Client) error {
			return c.Delete(ctx, theirs.DeepCopy(), client.DryRunAll)
		}, true},
	}
	for _, a := range list {
		err := a.write(operator)
		if err == nil {
			allowed++
			t.Errorf("as the operator, %s: admitted", a.name)
			continue
		}
		assert.True(t, apierrors.IsForbidden(err) || apierrors.IsInvalid(err), "as the operator, %s: %v", a.name, err)
		t.Logf("as the operator, %s: refused: %v", a.name, err)
	}
	t.Logf("RoleBinding escalation attempts as %s's ServiceAccount: %d, allowed: %d", access.Operator, len(list), allowed)

	for _, a := range list {
		err := a.write(admin)
		if a.admittedForOthers {
			assert.NoError(t, err, "another user's %s is not affected", a.name)
		} else {
			assert.Error(t, err, "another user's %s carries the operator's grant label", a.name)
		}
	}
	for _, ns := range []string{without, "kube-system", "kube-node-lease"} {
		unlabelled := access.RoleBinding(ns)
		delete(unlabelled.Labels, opsutil.SecretAccessLabel)
		assert.NoError(t, admin.Create(ctx, unlabelled, dryRun),
			"another user's RoleBinding without the grant label, in %s (none of the operator's objects), is not affected", ns)
	}
	return len(list), allowed
}
