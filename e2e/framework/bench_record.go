//go:build e2e && bench

package framework

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/statefulops/statefulops/e2e/benchfmt"
)

// The TestBench* tests are `make bench`: each measures figures of one operator beside a baseline
// measured in the same run, logs them and appends them to benchfmt.FiguresFile(), from which
// e2e/cmd/benchreport writes BENCHMARKS.md. They assert behaviour only, never a timing: a missed
// target is a figure to publish, not a failure.

// RecordFigure logs f as one "bench:" line and appends it to the figures of this run.
func RecordFigure(t *testing.T, f benchfmt.Figure) {
	t.Helper()
	require.NotEmpty(t, f.Samples, "figure %s/%s has no samples", f.Operator, f.Name)
	line := fmt.Sprintf("bench: %s: %s [%s]: n=%d p50=%.4g p95=%.4g p99=%.4g %s", f.Operator, f.Name, f.Where,
		len(f.Samples), f.Stat("p50"), f.Stat("p95"), f.Stat("p99"), f.Unit)
	if f.Baseline != "" {
		line += fmt.Sprintf("; baseline %s: n=%d p50=%.4g p99=%.4g; ratio %.3g", f.Baseline, len(f.BaselineSamples),
			benchfmt.Percentile(f.BaselineSamples, 50), benchfmt.Percentile(f.BaselineSamples, 99), f.Stat("ratio"))
	}
	var verdicts []string
	for _, target := range f.Targets {
		met, v := f.Met(target)
		verdicts = append(verdicts, fmt.Sprintf("%s=%.4g %s", target.Stat, v, map[bool]string{true: "met", false: "MISSED"}[met]))
	}
	if len(verdicts) > 0 {
		line += "; targets: " + strings.Join(verdicts, ", ")
	}
	t.Log(line)
	require.NoError(t, benchfmt.Append(benchfmt.FiguresFile(), f))
}

// LeaseBenchMillis converts a duration to milliseconds.
func LeaseBenchMillis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
