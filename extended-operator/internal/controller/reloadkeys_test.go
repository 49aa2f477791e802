package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// TestReloadKeysHash checks spec.reloadKeys (ES-B1): a listed object counts only its listed keys, in
// data or binaryData; an object not listed counts whole; an entry naming no reference is reported; and
// without reloadKeys the hash is the one earlier versions computed (an operator upgrade must not roll
// every pod).
func TestReloadKeysHash(t *testing.T) {
	key := []byte("test-key")
	ests := &extendedv1alpha1.ExtendedStatefulSet{}
	ests.Namespace, ests.UID = "ns", types.UID("uid")
	ests.Spec.Template.Spec.Template.Spec = corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c", EnvFrom: []corev1.EnvFromSource{
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}},
		}}},
		Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}}},
	}
	hash := func(config string) configHash {
		t.Helper()
		h, err := computeConfigHash(t.Context(), parseConfig(config), key, ests)
		require.NoError(t, err)
		return h
	}

	// Pinned: the hash of this input computed by the code before reloadKeys existed (at ba9eae9).
	assert.Equal(t, "2b6738f44503cf78439c6eb1bfa836794c5167614e5d87bf6677e6d6013e554c", hash("c:a=1;c:b=1;s:p=1;s:q=1").hash,
		"without reloadKeys the hash must not change across operator versions")
	whole := hash("c:a=1;c:b=1;s:p=1;s:q=1").hash

	ests.Spec.ReloadKeys = []extendedv1alpha1.ReloadKeys{{Kind: "ConfigMap", Name: "cm", Keys: []string{"a"}}}
	base := hash("c:a=1;c:b=1;s:p=1;s:q=1")
	assert.Empty(t, base.unused)
	assert.NotEqual(t, whole, base.hash, "narrowing is a different input")
	assert.Equal(t, base.hash, hash("c:a=1;c:b=2;s:p=1;s:q=1").hash, "an unlisted key of a listed ConfigMap changed")
	assert.Equal(t, base.hash, hash("c:a=1;s:p=1;s:q=1").hash, "an unlisted key removed")
	assert.Equal(t, base.hash, hash("c:a=1;c:b=1;c:z=9;s:p=1;s:q=1").hash, "an unlisted key added")
	assert.NotEqual(t, base.hash, hash("c:a=2;c:b=1;s:p=1;s:q=1").hash, "the listed key changed")
	assert.NotEqual(t, base.hash, hash("c:b=1;s:p=1;s:q=1").hash, "the listed key removed")
	assert.NotEqual(t, base.hash, hash("b:a=1;c:b=1;s:p=1;s:q=1").hash, "the listed key moved to binaryData")
	assert.NotEqual(t, base.hash, hash("c:a=1;c:b=1;s:p=1;s:q=2").hash, "the Secret is not listed: every key counts")

	ests.Spec.ReloadKeys = append(ests.Spec.ReloadKeys,
		extendedv1alpha1.ReloadKeys{Kind: "Secret", Name: "s", Keys: []string{"p"}},
		extendedv1alpha1.ReloadKeys{Kind: "Secret", Name: "cm", Keys: []string{"a"}}, // a ConfigMap's name, as a Secret
		extendedv1alpha1.ReloadKeys{Kind: "ConfigMap", Name: "typo", Keys: []string{"a"}})
	narrowed := hash("c:a=1;c:b=1;s:p=1;s:q=1")
	assert.Equal(t, []string{"ConfigMap/typo", "Secret/cm"}, narrowed.unused)
	assert.Equal(t, narrowed.hash, hash("c:a=1;c:b=1;s:p=1;s:q=2").hash, "an unlisted key of a listed Secret changed")
	assert.NotEqual(t, narrowed.hash, hash("c:a=1;c:b=1;s:p=2;s:q=1").hash, "the Secret's listed key changed")
}
