package controller

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultHashKeySecret is the Secret (namespace/name) that holds the config hash's key: in the
// operator's own namespace, which the manifest grants it Secret creation in.
const DefaultHashKeySecret = "extended-operator-system/extended-operator-config-hash-key"

// hashKeyField is the Secret's data key holding the key; hashKeyBytes its length.
const (
	hashKeyField = "key"
	hashKeyBytes = 32
)

// loadOrCreateHashKey returns the config hash's key from the Secret ref ("namespace/name"), creating
// the Secret with a random key when it does not exist. The key lives only there: whoever can read an
// ExtendedStatefulSet's pods sees the hash annotation, but without the key cannot test guesses of a
// Secret's value against it. Every replica of the operator reads the same Secret, so they agree on
// every hash; if two create it at once, the loser reads the winner's key.
func loadOrCreateHashKey(ctx context.Context, reader client.Reader, writer client.Client, ref string) ([]byte, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" {
		return nil, fmt.Errorf("config hash key Secret %q: want namespace/name", ref)
	}
	for range 2 {
		s := &corev1.Secret{}
		err := reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s)
		switch {
		case err == nil:
			key := s.Data[hashKeyField]
			if len(key) < hashKeyBytes {
				return nil, fmt.Errorf("config hash key Secret %s: data %q holds %d bytes, want at least %d (delete the Secret to have a new key made; pods roll once)",
					ref, hashKeyField, len(key), hashKeyBytes)
			}
			return key, nil
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading the config hash key Secret %s: %w", ref, err)
		}
		key := make([]byte, hashKeyBytes)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		err = writer.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app.kubernetes.io/managed-by": "extended-operator"}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{hashKeyField: key},
		})
		if err == nil {
			return key, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating the config hash key Secret %s: %w", ref, err)
		}
	}
	return nil, fmt.Errorf("config hash key Secret %s: created and deleted concurrently; retry", ref)
}
