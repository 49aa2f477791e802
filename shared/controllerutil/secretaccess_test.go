package controllerutil

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
)

func TestSubjectOf(t *testing.T) {
	s, err := SubjectOf("system:serviceaccount:rollout-operator-system:rollout-operator-controller-manager")
	require.NoError(t, err)
	assert.Equal(t, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "rollout-operator-system", Name: "rollout-operator-controller-manager"}, s)

	// Anything else (a local run with a user's kubeconfig) is bound as a user.
	for _, user := range []string{"kubernetes-admin", "system:serviceaccount:only-namespace", "system:serviceaccount::x"} {
		s, err = SubjectOf(user)
		require.NoError(t, err)
		assert.Equal(t, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}, s)
	}
	_, err = SubjectOf("")
	assert.Error(t, err)
}
