// Command benchreport writes the figures recorded by `make bench` and `make chaos` into
// BENCHMARKS.md, between the markers <!-- bench:begin -->/<!-- bench:end --> and
// <!-- chaos:begin -->/<!-- chaos:end -->, with the machine they were measured on. Everything outside
// the markers (the analysis, the misses and their reasons) is left as written.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/statefulops/statefulops/e2e/benchfmt"
)

func main() {
	file := flag.String("file", "BENCHMARKS.md", "the markdown file to update")
	section := flag.String("section", "bench", "which records to write: bench (figures) or chaos (campaigns)")
	command := flag.String("command", "make bench", "the command that produced the records, as printed in the report")
	plots := flag.String("plots", "docs/bench", "where the bench section's SVG pictures go, relative to the markdown file's directory")
	flag.Parse()
	if err := run(*file, *section, *command, *plots); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

func run(file, section, command, plotsDir string) error {
	var body string
	switch section {
	case "bench":
		figures, err := benchfmt.Read[benchfmt.Figure](benchfmt.FiguresFile())
		if err != nil {
			return err
		}
		if len(figures) == 0 {
			return fmt.Errorf("no figures in %s", benchfmt.FiguresFile())
		}
		links, err := writePlots(filepath.Dir(file), plotsDir, figures)
		if err != nil {
			return err
		}
		body = figuresTable(figures) + plotsList(links)
	case "chaos":
		runs, err := benchfmt.Read[benchfmt.ChaosRun](benchfmt.ChaosFile())
		if err != nil {
			return err
		}
		if len(runs) == 0 {
			return fmt.Errorf("no campaigns in %s", benchfmt.ChaosFile())
		}
		body = chaosTable(runs)
	default:
		return fmt.Errorf("unknown section %q", section)
	}
	text := fmt.Sprintf("Measured %s at %s with `%s`.\n\n%s\n%s", time.Now().UTC().Format("2006-01-02 15:04 MST"), commit(), command, machine(), body)
	return replaceSection(file, section, text)
}

// replaceSection puts text between the section's markers in file, appending the markers when absent.
func replaceSection(file, section, text string) error {
	old, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	begin, end := "<!-- "+section+":begin -->", "<!-- "+section+":end -->"
	block := begin + "\n" + text + end
	i, j := bytes.Index(old, []byte(begin)), bytes.Index(old, []byte(end))
	var out []byte
	if i < 0 || j < i {
		out = append(bytes.TrimRight(old, "\n"), []byte("\n\n"+block+"\n")...)
	} else {
		out = append(append(append([]byte{}, old[:i]...), block...), old[j+len(end):]...)
	}
	return os.WriteFile(file, out, 0o644)
}

// commit names the checked-out commit the figures were measured at, marked when the tree had
// uncommitted changes (then the commit alone does not reproduce them). The report's own outputs
// (BENCHMARKS.md, the SVGs in docs/bench) do not count: the plots are written before this line.
func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "an unknown commit"
	}
	c := "commit " + strings.TrimSpace(string(out))
	if dirty, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--",
		":(top)", ":(top,exclude)BENCHMARKS.md", ":(top,exclude)docs/bench").Output(); err == nil && len(bytes.TrimSpace(dirty)) > 0 {
		c += " (with uncommitted changes)"
	}
	return c
}

// machine describes where the figures were measured: cores, CPU model, memory, kernel, Go, load.
func machine() string {
	model, mem := "unknown", "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "MemTotal:") {
				var kb float64
				fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(l, "MemTotal:")), "%f", &kb)
				mem = fmt.Sprintf("%.1f GiB", kb/1024/1024)
			}
		}
	}
	kernel, _ := exec.Command("uname", "-sr").Output()
	load, _ := os.ReadFile("/proc/loadavg")
	return fmt.Sprintf("Machine: %d cores (%s), %s memory, %s, %s; load average at the end: %s.\n",
		runtime.NumCPU(), model, mem, strings.TrimSpace(string(kernel)), runtime.Version(),
		strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " "))
}

func figuresTable(figures []benchfmt.Figure) string {
	var b strings.Builder
	b.WriteString("\n| Operator | Figure | Where | n | p50 | p95 | p99 | Baseline (same run) | Baseline p50 / p99 | Ratio (p50) | Target | Met |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, f := range figures {
		baseline, bstats, ratio := "—", "—", "—"
		if f.Baseline != "" {
			baseline = f.Baseline
			bstats = num(benchfmt.Percentile(f.BaselineSamples, 50), f.Unit) + " / " + num(benchfmt.Percentile(f.BaselineSamples, 99), f.Unit)
			ratio = fmt.Sprintf("%.3g", f.Stat("ratio"))
		}
		var targets, met []string
		for _, t := range f.Targets {
			ok, v := f.Met(t)
			bound := ""
			if t.Max != nil {
				bound = "≤ " + num(*t.Max, unitOf(t, f))
			}
			if t.Min != nil {
				bound = strings.TrimSpace(bound + " ≥ " + num(*t.Min, unitOf(t, f)))
			}
			targets = append(targets, t.Stat+" "+bound)
			met = append(met, map[bool]string{true: "yes", false: "**no** (" + num(v, unitOf(t, f)) + ")"}[ok])
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", f.Operator, f.Name, f.Where,
			len(f.Samples), num(f.Stat("p50"), f.Unit), num(f.Stat("p95"), f.Unit), num(f.Stat("p99"), f.Unit),
			baseline, bstats, ratio, orDash(strings.Join(targets, "; ")), orDash(strings.Join(met, "; ")))
	}
	var notes []string
	for _, f := range figures {
		if f.Note != "" {
			notes = append(notes, fmt.Sprintf("- %s, %s: %s", f.Operator, f.Name, f.Note))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\nNotes recorded with the figures:\n\n" + strings.Join(notes, "\n") + "\n")
	}
	return b.String()
}

func chaosTable(runs []benchfmt.ChaosRun) string {
	var b strings.Builder
	b.WriteString("\n| Operator | Campaign | Seed | Scale | Operations | Faults injected | Invariant | Violations | Duration |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		var kinds []string
		for k, n := range r.FaultsByKind {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
		faults := fmt.Sprint(r.Faults)
		if len(kinds) > 0 {
			faults += " (" + strings.Join(sorted(kinds), ", ") + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %g | %d | %s | %s | %d | %.0f s |\n", r.Operator, r.Campaign, r.Seed, r.Scale,
			r.Operations, faults, r.Invariant, r.Violations, r.Seconds)
	}
	return b.String()
}

func unitOf(t benchfmt.Target, f benchfmt.Figure) string {
	if strings.HasPrefix(t.Stat, "ratio") {
		return "×"
	}
	return f.Unit
}

func num(v float64, unit string) string {
	if math.IsNaN(v) {
		return "—"
	}
	if unit == "×" {
		return fmt.Sprintf("%.3g×", v)
	}
	if math.Abs(v) >= 10000 {
		// %.4g would print 1.638e+04: four significant digits are kept by rounding instead.
		return fmt.Sprintf("%.0f %s", v, unit)
	}
	return fmt.Sprintf("%.4g %s", v, unit)
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
