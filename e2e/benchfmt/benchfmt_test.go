package benchfmt

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPercentileIsNearestRank(t *testing.T) {
	s := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	assert.Equal(t, 5.0, Percentile(s, 50))
	assert.Equal(t, 10.0, Percentile(s, 95))
	assert.Equal(t, 10.0, Percentile(s, 99))
	assert.Equal(t, 1.0, Percentile(s, 0))
	assert.True(t, math.IsNaN(Percentile(nil, 50)))
	assert.Equal(t, []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}, s, "the samples are not reordered")
}

func TestTargetsAndRatio(t *testing.T) {
	f := Figure{Samples: []float64{10, 20, 30}, BaselineSamples: []float64{100, 200, 300}}
	met, v := f.Met(AtMost("p99", 30))
	assert.True(t, met)
	assert.Equal(t, 30.0, v)
	met, _ = f.Met(AtMost("p99", 29))
	assert.False(t, met)
	met, v = f.Met(AtMost("ratio", 0.2))
	assert.True(t, met)
	assert.InDelta(t, 0.1, v, 1e-9)
	met, v = f.Met(AtMost("ratio99", 0.1))
	assert.True(t, met, "p99 over the baseline's p99")
	assert.InDelta(t, 0.1, v, 1e-9)
	met, _ = f.Met(AtLeast("p50", 25))
	assert.False(t, met)
	met, _ = Figure{Samples: []float64{1}}.Met(AtMost("ratio", 1))
	assert.False(t, met, "a ratio without a baseline is never met")
}

func TestAppendRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "r.jsonl")
	for i := range 3 {
		require.NoError(t, Append(path, ChaosRun{Operator: "lease", Operations: i}))
	}
	runs, err := Read[ChaosRun](path)
	require.NoError(t, err)
	require.Len(t, runs, 3)
	assert.Equal(t, 2, runs[2].Operations)
	assert.Contains(t, runs[0].Summary(), "chaos: lease: 0 operations, 0 faults injected, 0 violations")
	none, err := Read[Figure](filepath.Join(t.TempDir(), "missing"))
	require.NoError(t, err)
	assert.Empty(t, none)
}
