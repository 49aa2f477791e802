//go:build integration

package controller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/shared/testsupport"
)

// TestRoleBindingPolicy applies the admission policies of deploy/rollout-operator.yaml and, as the
// operator's ServiceAccount (under its manifest RBAC), tries every RoleBinding write a compromised
// operator could use to escalate, with server-side dry-run: only its own grant, in a namespace with a
// PhasedRollout, is admitted. The same writes by another user are admitted (the policies match the
// operator's ServiceAccount only), except a RoleBinding carrying the operator's grant label
// (sts.plus/secret-access=rollout-operator) in a namespace without a PhasedRollout
// (config/policy/rolebinding_namespace.yaml says why).
func TestRoleBindingPolicy(t *testing.T) {
	sa := installManifestRBAC(t)
	asOperator := rest.CopyConfig(suite.Config)
	asOperator.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + sa.Namespace + ":" + sa.Name}
	operator, err := client.New(asOperator, client.Options{Scheme: suite.Scheme})
	require.NoError(t, err)

	withRollout := newFixture(t, 1, 0)
	withRollout.createRollout()
	without := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rollout-none-"}}
	require.NoError(t, suite.Client.Create(context.Background(), without))
	access := newRolloutSecretAccess(nil, nil, DefaultSecretReaderClusterRole,
		rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name})
	attempts, allowed := testsupport.CheckRoleBindingPolicy(t, operator, suite.Client, access, withRollout.ns, without.Name)
	assert.Positive(t, attempts)
	assert.Zero(t, allowed)
}
