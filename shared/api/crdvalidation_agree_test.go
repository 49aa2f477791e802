//go:build integration

package api_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/statefulops/statefulops/shared/api/crdvalidation"
)

// badInputCorpus is crdvalidation's copy of every bad input's whole manifest, for the fuzz targets.
var badInputCorpus = filepath.Join("..", "..", crdvalidation.BadInputFile)

// The in-process validator (shared/api/crdvalidation) answers what the real API server answers: every
// bad input of docs/bad-input.md is refused by both, naming the same field, and every documented example
// is accepted by both and stored with the same defaults. -update also rewrites the bad-input corpus.
func TestCRDValidatorAgreesWithAPIServer(t *testing.T) {
	var corpus []crdvalidation.Case
	for _, k := range badInputKinds {
		v, err := crdvalidation.ForKind(k.kind)
		require.NoError(t, err)
		for _, in := range k.cases() {
			corpus = append(corpus, crdvalidation.Case{Kind: k.kind, Name: in.Case, Doc: in.Doc})
			t.Run("refused/"+k.kind+"/"+in.Case, func(t *testing.T) {
				server := refusal(t, in) // the API server refuses it, naming in.Want
				_, errs, err := v.ValidateYAML(t.Context(), []byte(in.Doc))
				require.NoError(t, err)
				require.NotEmpty(t, errs, "the validator accepts what the API server refuses: %s", server)
				got := errs.ToAggregate().Error()
				require.Contains(t, got, in.Want[0], "the validator names another field than the API server (%s)", server)
			})
		}
	}
	examples, err := crdvalidation.Examples("")
	require.NoError(t, err)
	require.NotEmpty(t, examples)
	for i, ex := range examples {
		t.Run("accepted/"+ex.Kind+"/"+ex.Name, func(t *testing.T) {
			v, err := crdvalidation.ForKind(ex.Kind)
			require.NoError(t, err)
			stored, errs, err := v.ValidateYAML(t.Context(), []byte(ex.Doc))
			require.NoError(t, err)
			require.Empty(t, errs, "the validator refuses a documented example")
			obj := decode(t, ex.Doc)
			obj.SetNamespace("agree-" + strings.ToLower(ex.Kind) + "-" + itoa(i))
			ensureNamespace(t, obj.GetNamespace())
			require.NoError(t, k8sClient.Create(t.Context(), obj), "the API server refuses a documented example")
			t.Cleanup(func() { _ = k8sClient.Delete(t.Context(), obj) })
			// Same defaults: the spec the validator stores is the spec the API server stored.
			require.Equal(t, jsonOf(t, obj.Object["spec"]), jsonOf(t, stored["spec"]))
		})
	}
	data, err := json.MarshalIndent(corpus, "", "  ")
	require.NoError(t, err)
	data = append(data, '\n')
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(badInputCorpus), 0o755))
		require.NoError(t, os.WriteFile(badInputCorpus, data, 0o644))
		return
	}
	want, err := os.ReadFile(badInputCorpus)
	require.NoError(t, err, "run the test with -update to write %s", badInputCorpus)
	require.Equal(t, string(want), string(data), "%s is stale: run `cd shared && go test -tags integration ./api/ -run TestCRDValidatorAgreesWithAPIServer -update`", badInputCorpus)
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	data, err := yaml.Marshal(v)
	require.NoError(t, err)
	return string(data)
}

func itoa(i int) string {
	data, _ := json.Marshal(i)
	return string(data)
}
