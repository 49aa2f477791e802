//go:build integration

package api_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/statefulops/statefulops/shared/api/crdvalidation"
)

// badInputCorpus is crdvalidation's copy of every bad input's whole manifest, for the fuzz targets.
var badInputCorpus = filepath.Join("..", "..", crdvalidation.BadInputFile)

// The in-process validator (shared/api/crdvalidation) answers what the real API server answers: every
// bad input of docs/bad-input.md is refused by both, naming the same field (every documented example is
// accepted by both, with the same defaults: TestDocAndSampleManifestsAreAccepted). -update also
// rewrites the bad-input corpus the fuzz targets seed with.
func TestCRDValidatorAgreesWithAPIServer(t *testing.T) {
	var corpus []crdvalidation.Case
	for _, k := range badInputKinds {
		v, err := crdvalidation.ForKind(k.kind)
		require.NoError(t, err)
		for _, in := range k.cases() {
			if in.Before != "" {
				// A transition rule: the validator judges creates, without a stored object to compare.
				continue
			}
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
	// Found by the fuzz targets: metadata that does not decode into ObjectMeta is refused by both (the
	// API server's request decoder), not handed to an operator that could not decode it.
	for name, doc := range map[string]string{
		"metadata.labels not a map":   "apiVersion: app.anukkrit.me/v1\nkind: StatefulSetLock\nmetadata: {name: l, labels: db}\nspec: {statefulSetName: db, leaseName: db-lease, leaseDurationSeconds: 30}\n",
		"metadata.annotations a list": "apiVersion: app.anukkrit.me/v1\nkind: StatefulSetLock\nmetadata: {name: l, annotations: [a]}\nspec: {statefulSetName: db, leaseName: db-lease, leaseDurationSeconds: 30}\n",
	} {
		t.Run("refused/metadata/"+name, func(t *testing.T) {
			_, err := applyYAML(t, doc)
			require.Error(t, err, "the API server accepted it")
			v, verr := crdvalidation.ForKind("StatefulSetLock")
			require.NoError(t, verr)
			_, errs, yerr := v.ValidateYAML(t.Context(), []byte(doc))
			require.NoError(t, yerr)
			require.NotEmpty(t, errs, "the validator accepts what the API server refuses: %v", err)
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
