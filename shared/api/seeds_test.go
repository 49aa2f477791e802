//go:build integration

package api_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/statefulops/statefulops/shared/seedexamples"
)

// Every example of the seed documents applies to the CRDs we serve, and reads back with its defaults.
func TestSeedExamplesApplyUnchanged(t *testing.T) {
	dir, err := seedexamples.Dir()
	require.NoError(t, err)
	examples, err := seedexamples.Load(dir)
	require.NoError(t, err)
	require.Len(t, examples, 10, "the seed documents hold ten installable examples")

	applied := 0
	for _, ex := range examples {
		t.Run(ex.Seed[:3]+"/"+ex.Kind+"/"+ex.Name, func(t *testing.T) {
			obj := mustApply(t, ex.YAML)
			got := readBack(t, obj)
			assert.Equal(t, ex.Name, got.GetName())
			applied++
		})
	}
	t.Logf("seed examples applied: %d of %d", applied, len(examples))
}
