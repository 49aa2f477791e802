package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot/plotter"

	"github.com/statefulops/statefulops/e2e/benchfmt"
)

func TestNum(t *testing.T) {
	assert.Equal(t, "981.4 ms", num(981.4, "ms"))
	assert.Equal(t, "2135 ms", num(2135, "ms"))
	assert.Equal(t, "16380 ms", num(16380.2, "ms"), "no exponent")
	assert.Equal(t, "123457 pods", num(123456.7, "pods"))
	assert.Equal(t, "0.638×", num(0.6381, "×"))
	assert.Equal(t, "—", num(math.NaN(), "ms"))
}

func TestWritePlotsDrawsEachDistributionAndDropsAnEarlierRunsPictures(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "docs", "bench"), 0o755))
	stale := filepath.Join(root, "docs", "bench", "from-an-earlier-run.svg")
	require.NoError(t, os.WriteFile(stale, []byte("<svg/>"), 0o644))
	figures := []benchfmt.Figure{
		{Operator: "cluster", Name: "replacement (pod lost -> created)", Unit: "ms", Samples: []float64{3, 1, 2, 5, 4, 9},
			Baseline: "StatefulSet", BaselineSamples: []float64{1, 1, 2, 2, 3}},
		{Operator: "cluster", Name: "scale-up 0->500", Unit: "pods/s", Samples: []float64{61.8}},
		{Operator: "lease", Name: "failover", Unit: "ms", Samples: []float64{10, 11, 12, 13, 14}},
	}
	links, err := writePlots(root, "docs/bench", figures)
	require.NoError(t, err)
	require.Equal(t, []plotLink{
		{title: "cluster: replacement (pod lost -> created)", path: "docs/bench/cluster-replacement-pod-lost-created.svg"},
		{title: "lease: failover", path: "docs/bench/lease-failover.svg"},
	}, links, "one picture per figure with a distribution; a single reading gets none")
	assert.NoFileExists(t, stale)
	svg, err := os.ReadFile(filepath.Join(root, links[0].path))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(svg), "<?xml"), "an SVG document")
	assert.Contains(t, string(svg), "baseline: StatefulSet (n=5)", "the baseline is in the legend")
	assert.Contains(t, string(svg), "cluster (n=6)")
	assert.Contains(t, plotsList(links), "- [lease: failover](docs/bench/lease-failover.svg)\n")
}

func TestCumulativeRisesFromZeroToOne(t *testing.T) {
	xys := cumulative([]float64{3, 1, 2, 2})
	assert.Equal(t, plotter.XYs{{X: 1, Y: 0}, {X: 1, Y: 0.25}, {X: 2, Y: 0.5}, {X: 2, Y: 0.75}, {X: 3, Y: 1}}, xys)
}
