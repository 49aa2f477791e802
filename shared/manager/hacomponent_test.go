package manager

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// operators are the binaries with a deploy/<operator>.yaml and a deploy/ha/<operator>.yaml.
var operators = []string{"singleton-operator", "cluster-operator", "lease-operator", "rollout-operator", "extended-operator"}

// deploy/ha/<operator>.yaml (shared/config/ha, rendered by `make manifests`, kept fresh by `make verify`)
// is deploy/<operator>.yaml with the manager Deployment at two replicas and preferred anti-affinity on
// kubernetes.io/hostname between its pods, plus a PodDisruptionBudget (maxUnavailable 1) selecting
// exactly those pods, in their namespace. Every other object, the CRDs and the RBAC included, is
// identical, and so is the rest of the Deployment.
func TestHAManifestIsTheManifestWithTwoReplicasAPDBAndAntiAffinity(t *testing.T) {
	for _, op := range operators {
		t.Run(op, func(t *testing.T) {
			plain := readManifest(t, filepath.Join("..", "..", "deploy", op+".yaml"))
			ha := readManifest(t, filepath.Join("..", "..", "deploy", "ha", op+".yaml"))
			ns, deployName := op+"-system", op+"-controller-manager"
			deployKey := "Deployment/" + ns + "/" + deployName
			pdbKey := "PodDisruptionBudget/" + ns + "/" + deployName

			for key, want := range plain {
				got, ok := ha[key]
				if !assert.True(t, ok, "deploy/ha/%s.yaml keeps %s", op, key) || key == deployKey {
					continue
				}
				assert.True(t, equality.Semantic.DeepEqual(want.Object, got.Object), "%s is unchanged", key)
			}
			for key := range ha {
				if _, ok := plain[key]; !ok {
					assert.Equal(t, pdbKey, key, "the component adds only the manager's PodDisruptionBudget")
				}
			}

			require.Contains(t, ha, deployKey)
			deployment := ha[deployKey]
			assert.EqualValues(t, 2, number(t, deployment, "spec", "replicas"))
			podLabels, _, err := unstructured.NestedStringMap(deployment.Object, "spec", "template", "metadata", "labels")
			require.NoError(t, err)
			selector, _, err := unstructured.NestedStringMap(deployment.Object, "spec", "selector", "matchLabels")
			require.NoError(t, err)
			require.NotEmpty(t, selector)

			terms, _, err := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "affinity",
				"podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution")
			require.NoError(t, err)
			require.Len(t, terms, 1, "one preferred anti-affinity term")
			term := terms[0].(map[string]any)
			assert.Equal(t, "kubernetes.io/hostname", str(t, &unstructured.Unstructured{Object: term}, "podAffinityTerm", "topologyKey"))
			termSelector, _, err := unstructured.NestedStringMap(term, "podAffinityTerm", "labelSelector", "matchLabels")
			require.NoError(t, err)
			assert.Equal(t, selector, termSelector, "the anti-affinity keeps the manager's own pods apart")
			_, required, err := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "affinity",
				"podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
			require.NoError(t, err)
			assert.False(t, required, "preferred only: a one-node cluster still runs both replicas")

			// The rest of the Deployment is deploy/<operator>.yaml's.
			stripped := deployment.DeepCopy()
			unstructured.RemoveNestedField(stripped.Object, "spec", "replicas")
			unstructured.RemoveNestedField(stripped.Object, "spec", "template", "spec", "affinity")
			original := plain[deployKey].DeepCopy()
			unstructured.RemoveNestedField(original.Object, "spec", "replicas")
			assert.True(t, equality.Semantic.DeepEqual(original.Object, stripped.Object), "only replicas and affinity differ")

			require.Contains(t, ha, pdbKey)
			pdb := ha[pdbKey]
			assert.Equal(t, "policy/v1", pdb.GetAPIVersion())
			assert.EqualValues(t, 1, number(t, pdb, "spec", "maxUnavailable"))
			_, hasMin, err := unstructured.NestedFieldNoCopy(pdb.Object, "spec", "minAvailable")
			require.NoError(t, err)
			assert.False(t, hasMin, "minAvailable 1 would wedge a drain once scaled back to one replica")
			pdbSelector, _, err := unstructured.NestedStringMap(pdb.Object, "spec", "selector", "matchLabels")
			require.NoError(t, err)
			assert.Equal(t, selector, pdbSelector, "the PDB selects the manager's pods")
			for k, v := range pdbSelector {
				assert.Equal(t, v, podLabels[k], "the manager's pods carry the PDB's label %s", k)
			}
			// The PDB selects no other pod of the manifest (the webhook-server has its own PDB).
			for key, obj := range ha {
				if obj.GetKind() != "Deployment" || key == deployKey {
					continue
				}
				other, _, err := unstructured.NestedStringMap(obj.Object, "spec", "template", "metadata", "labels")
				require.NoError(t, err)
				assert.False(t, matches(pdbSelector, other), "the PDB does not select the pods of %s", key)
			}
			assert.Equal(t, deployment.GetLabels(), pdb.GetLabels(), "the PDB carries the operator's labels")
		})
	}
}

func readManifest(t *testing.T, path string) map[string]*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	return decodeObjects(t, raw)
}

// number reads a number of a decoded manifest (JSON numbers decode as float64).
func number(t *testing.T, u *unstructured.Unstructured, fields ...string) float64 {
	t.Helper()
	v, found, err := unstructured.NestedFieldNoCopy(u.Object, fields...)
	require.NoError(t, err)
	require.True(t, found, "%s %s has %v", u.GetKind(), u.GetName(), fields)
	f, ok := v.(float64)
	require.True(t, ok, "%v is a number, not %T", fields, v)
	return f
}

func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
