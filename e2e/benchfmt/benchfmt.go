// Package benchfmt is the record format shared by `make bench`, `make chaos` and the report that
// turns their records into BENCHMARKS.md: one JSON object per line, appended by the tests as they
// measure and read back by e2e/cmd/benchreport.
package benchfmt

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// Figure is one measured quantity of `make bench`: the samples of the statefulops operator beside
// the samples of a baseline measured in the same run on the same local cluster.
type Figure struct {
	// Operator is the family the figure belongs to: singleton, webhook, lease, rollout, cluster, extended.
	Operator string `json:"operator"`
	// Name says what was measured, e.g. "controller-attributable handover (old pod gone -> release written)".
	Name string `json:"name"`
	// Unit of the samples: ms, s, pods/s, MiB, writes/min, count.
	Unit string `json:"unit"`
	// Where says where it was measured: "kwok" or "real node".
	Where string `json:"where"`
	// Samples are the operator's measurements, one per trial.
	Samples []float64 `json:"samples"`
	// Baseline names what the operator is compared with (e.g. "Deployment strategy: Recreate"); empty
	// when the figure has no baseline (then BaselineSamples is empty too and Note says why).
	Baseline string `json:"baseline,omitempty"`
	// BaselineSamples are the baseline's measurements, taken in the same run.
	BaselineSamples []float64 `json:"baselineSamples,omitempty"`
	// Targets are the goals the figure is judged against.
	Targets []Target `json:"targets,omitempty"`
	// Note explains the figure: how samples were taken, and, for a missed target, why.
	Note string `json:"note,omitempty"`
}

// Target is one goal of a figure: Stat of the samples must be at most Max, or at least Min.
type Target struct {
	// Stat is p50, p95, p99, max, ratio (the operator's p50 over the baseline's p50) or ratio99 (the
	// same for p99).
	Stat string `json:"stat"`
	// Max, when set, is the highest acceptable value.
	Max *float64 `json:"max,omitempty"`
	// Min, when set, is the lowest acceptable value.
	Min *float64 `json:"min,omitempty"`
}

// AtMost is a target that Stat must not exceed v.
func AtMost(stat string, v float64) Target { return Target{Stat: stat, Max: &v} }

// AtLeast is a target that Stat must reach at least v.
func AtLeast(stat string, v float64) Target { return Target{Stat: stat, Min: &v} }

// Met reports whether the figure meets the target, and the value it was judged on.
func (f Figure) Met(t Target) (bool, float64) {
	v := f.Stat(t.Stat)
	if math.IsNaN(v) {
		return false, v
	}
	return (t.Max == nil || v <= *t.Max) && (t.Min == nil || v >= *t.Min), v
}

// Stat returns p50, p95, p99 or max of the samples, ratio (samples p50 / baseline p50) or ratio99
// (samples p99 / baseline p99); NaN
// when it cannot be computed.
func (f Figure) Stat(stat string) float64 {
	switch stat {
	case "ratio":
		b := Percentile(f.BaselineSamples, 50)
		if b == 0 || math.IsNaN(b) {
			return math.NaN()
		}
		return Percentile(f.Samples, 50) / b
	case "ratio99":
		b := Percentile(f.BaselineSamples, 99)
		if b == 0 || math.IsNaN(b) {
			return math.NaN()
		}
		return Percentile(f.Samples, 99) / b
	case "max":
		return Percentile(f.Samples, 100)
	case "p50":
		return Percentile(f.Samples, 50)
	case "p95":
		return Percentile(f.Samples, 95)
	case "p99":
		return Percentile(f.Samples, 99)
	}
	return math.NaN()
}

// Percentile is the nearest-rank p-th percentile of samples; NaN for no samples.
func Percentile(samples []float64, p float64) float64 {
	if len(samples) == 0 {
		return math.NaN()
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// ChaosRun is the result of one `make chaos` campaign for one operator.
type ChaosRun struct {
	// Operator is the family of the campaign.
	Operator string `json:"operator"`
	// Campaign names what the campaign does, e.g. "handovers under operator kills and force deletes".
	Campaign string `json:"campaign"`
	// Seed replays the campaign (CHAOS_SEED).
	Seed int64 `json:"seed"`
	// Scale is the CHAOS_SCALE the campaign ran at.
	Scale float64 `json:"scale"`
	// Operations counts the operations exercised (handovers, failovers, steps, scale events, changes).
	Operations int `json:"operations"`
	// Faults counts the faults injected, and FaultsByKind names them.
	Faults       int            `json:"faults"`
	FaultsByKind map[string]int `json:"faultsByKind,omitempty"`
	// Invariant names what the checker counts, and Violations how often it was broken.
	Invariant  string `json:"invariant"`
	Violations int    `json:"violations"`
	// Seconds is how long the campaign ran.
	Seconds float64 `json:"seconds"`
}

// Summary is the one line a campaign prints: "N operations, K faults injected, 0 violations".
func (r ChaosRun) Summary() string {
	return fmt.Sprintf("chaos: %s: %d operations, %d faults injected, %d violations (%s; seed %d, scale %g, %.0fs)",
		r.Operator, r.Operations, r.Faults, r.Violations, r.Invariant, r.Seed, r.Scale, r.Seconds)
}

var appendMu sync.Mutex

// Append writes v as one JSON line at the end of path, creating the file and its directory.
func Append(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	appendMu.Lock()
	defer appendMu.Unlock()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	return errors.Join(err, f.Close())
}

// Read decodes every line of path into a T; a missing file is no records.
func Read[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out = append(out, v)
	}
	return out, sc.Err()
}

// Dir is where the records of this run go: $BENCH_OUT, else $HOME/.cache/statefulops/bench.
func Dir() string {
	if d := os.Getenv("BENCH_OUT"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "statefulops", "bench")
}

// FiguresFile and ChaosFile are the record files in Dir.
func FiguresFile() string { return filepath.Join(Dir(), "figures.jsonl") }

// ChaosFile is the file of ChaosRun records in Dir.
func ChaosFile() string { return filepath.Join(Dir(), "chaos.jsonl") }
