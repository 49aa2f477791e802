//go:build integration

package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestHashKeySecret: the key is made once, random and 32 bytes, and every later operator reads the
// same one; a Secret without a usable key is an error that says what to do, never a weak key.
func TestHashKeySecret(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "hashkey-"}}
	require.NoError(t, suite.Client.Create(t.Context(), ns))
	ref := ns.Name + "/key"

	first, err := loadOrCreateHashKey(t.Context(), suite.Client, suite.Client, ref)
	require.NoError(t, err)
	assert.Len(t, first, hashKeyBytes)
	again, err := loadOrCreateHashKey(t.Context(), suite.Client, suite.Client, ref)
	require.NoError(t, err)
	assert.Equal(t, first, again, "a restarted operator hashes with the same key")

	other, err := loadOrCreateHashKey(t.Context(), suite.Client, suite.Client, ns.Name+"/other")
	require.NoError(t, err)
	assert.NotEqual(t, first, other, "keys are random")

	require.NoError(t, suite.Client.Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "short"},
		Data:       map[string][]byte{hashKeyField: []byte("guessable")},
	}))
	_, err = loadOrCreateHashKey(t.Context(), suite.Client, suite.Client, ns.Name+"/short")
	require.ErrorContains(t, err, "delete the Secret")

	_, err = loadOrCreateHashKey(t.Context(), suite.Client, suite.Client, "no-slash")
	require.ErrorContains(t, err, "want namespace/name")
}
