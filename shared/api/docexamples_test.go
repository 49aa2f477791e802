//go:build integration

package api_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/statefulops/statefulops/shared/api/crdvalidation"
)

// Every manifest of the samples, README.md and docs/*.md (except blocks marked refused or fragment)
// is accepted by the CRDs: the rules that refuse bad input refuse none of the documented examples. The
// in-process validator (shared/api/crdvalidation) accepts each one too and stores the same spec, with
// the same defaults (its other half, the bad inputs, is TestCRDValidatorAgreesWithAPIServer).
func TestDocAndSampleManifestsAreAccepted(t *testing.T) {
	examples, err := crdvalidation.Examples("")
	require.NoError(t, err)
	require.NotEmpty(t, examples)
	namespaces := map[string]string{}
	for _, ex := range examples {
		ns, ok := namespaces[ex.Name]
		if !ok {
			ns = fmt.Sprintf("example-%d", len(namespaces)+1)
			namespaces[ex.Name] = ns
		}
		obj := decode(t, ex.Doc)
		obj.SetNamespace(ns)
		ensureNamespace(t, ns)
		require.NoError(t, k8sClient.Create(t.Context(), obj), "%s: %s %s", ex.Name, obj.GetKind(), obj.GetName())

		v, err := crdvalidation.ForKind(ex.Kind)
		require.NoError(t, err)
		stored, errs, err := v.ValidateYAML(t.Context(), []byte(ex.Doc))
		require.NoError(t, err)
		require.Empty(t, errs, "%s: the in-process validator refuses a documented example", ex.Name)
		require.Equal(t, toYAML(t, obj.Object["spec"]), toYAML(t, stored["spec"]), "%s: the validator's defaults differ from the API server's", ex.Name)
	}
	t.Logf("applied %d custom resources from %d samples and doc blocks", len(examples), len(namespaces))
}

func toYAML(t *testing.T, v any) string {
	t.Helper()
	data, err := yaml.Marshal(v)
	require.NoError(t, err)
	return string(data)
}
