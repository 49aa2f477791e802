//go:build integration

package manager

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// `kubectl apply --server-side -f deploy/ha/<operator>.yaml` over an installed deploy/<operator>.yaml:
// the API server accepts every object of the HA manifest (the PodDisruptionBudget, the Deployment's
// anti-affinity), and the operator's Deployment ends with two replicas and its PodDisruptionBudget
// selecting the Deployment's pods. Applying the plain manifest again sets one replica back.
func TestHAManifestAppliesOverTheManifest(t *testing.T) {
	cfg, _ := startEnvtest(t)
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	apply := func(t *testing.T, path string) {
		t.Helper()
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		for key, obj := range decodeObjects(t, raw) {
			require.NoError(t, c.Patch(t.Context(), obj, client.Apply, client.FieldOwner("kubectl"), client.ForceOwnership), "applying %s of %s", key, path)
		}
	}
	for _, op := range operators {
		t.Run(op, func(t *testing.T) {
			ns, name := op+"-system", op+"-controller-manager"
			plain, ha := filepath.Join("..", "..", "deploy", op+".yaml"), filepath.Join("..", "..", "deploy", "ha", op+".yaml")
			// Namespaces first: decodeObjects' map has no order.
			require.NoError(t, client.IgnoreAlreadyExists(c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})))
			apply(t, plain)
			apply(t, ha)
			deployment := &appsv1.Deployment{}
			require.NoError(t, c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, deployment))
			require.NotNil(t, deployment.Spec.Replicas)
			assert.EqualValues(t, 2, *deployment.Spec.Replicas)
			require.NotNil(t, deployment.Spec.Template.Spec.Affinity)
			require.NotNil(t, deployment.Spec.Template.Spec.Affinity.PodAntiAffinity)
			pdb := &policyv1.PodDisruptionBudget{}
			require.NoError(t, c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, pdb))
			selector, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			require.NoError(t, err)
			assert.True(t, selector.Matches(labels.Set(deployment.Spec.Template.Labels)), "the PDB selects the operator's pods")

			apply(t, plain)
			require.NoError(t, c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, deployment))
			assert.EqualValues(t, 1, *deployment.Spec.Replicas, "the plain manifest sets one replica back")
			assert.Nil(t, deployment.Spec.Template.Spec.Affinity, "and removes the anti-affinity it applied")
			require.NoError(t, c.Get(t.Context(), client.ObjectKeyFromObject(pdb), pdb), "the PodDisruptionBudget stays until deleted")
		})
	}
}
