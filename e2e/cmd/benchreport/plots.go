package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/statefulops/statefulops/e2e/benchfmt"
)

// minPlotSamples is the fewest samples a figure needs for its distribution to be drawn: below it
// (a scale-up rate, a memory reading) the table's numbers say all there is.
const minPlotSamples = 5

// plotLink is one rendered picture: what it shows and its path relative to the markdown file.
type plotLink struct {
	title, path string
}

// writePlots renders, for each figure with enough samples, the cumulative distribution of the
// operator's samples beside its baseline's as an SVG file in dir (relative to the markdown file's
// directory root), replacing the pictures of an earlier run, and returns the links in figure order.
func writePlots(root, dir string, figures []benchfmt.Figure) ([]plotLink, error) {
	abs := filepath.Join(root, dir)
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, err
	}
	// The pictures belong to the run the table shows: an earlier run's would outlive their rows.
	old, err := filepath.Glob(filepath.Join(abs, "*.svg"))
	if err != nil {
		return nil, err
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return nil, err
		}
	}
	var links []plotLink
	used := map[string]int{}
	for _, f := range figures {
		if len(f.Samples) < minPlotSamples {
			continue
		}
		name := slug(f.Operator + " " + f.Name)
		if used[name]++; used[name] > 1 {
			name = fmt.Sprintf("%s-%d", name, used[name])
		}
		file := name + ".svg"
		if err := renderDistribution(filepath.Join(abs, file), f); err != nil {
			return nil, fmt.Errorf("plot of %s/%s: %w", f.Operator, f.Name, err)
		}
		links = append(links, plotLink{title: f.Operator + ": " + f.Name, path: filepath.ToSlash(filepath.Join(dir, file))})
	}
	return links, nil
}

// renderDistribution draws the empirical cumulative distribution (value → share of samples at or
// below it) of the figure's samples and of its baseline's, so medians and tails can be compared at
// a glance: the further right a line's top, the longer its tail.
func renderDistribution(path string, f benchfmt.Figure) error {
	p, err := distributionPlot(f)
	if err != nil {
		return err
	}
	canvas := vgsvg.New(8*vg.Inch, 4.5*vg.Inch)
	p.Draw(draw.New(canvas))
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := canvas.WriteTo(out); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// distributionPlot is the picture renderDistribution saves.
func distributionPlot(f benchfmt.Figure) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = f.Operator + ": " + wrap(f.Name, 70)
	p.X.Label.Text = f.Unit
	p.Y.Label.Text = "share of samples ≤ x"
	// The band above 1 holds the legend, so it never covers a line.
	p.Y.Min, p.Y.Max = 0, 1.3
	p.Y.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 0, Label: "0"}, {Value: 0.25}, {Value: 0.5, Label: "0.5"},
		{Value: 0.75}, {Value: 1, Label: "1"}})
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	series := []struct {
		label   string
		samples []float64
		color   color.Color
		dashes  []vg.Length
	}{
		{fmt.Sprintf("%s (n=%d)", f.Operator, len(f.Samples)), f.Samples, color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, nil},
		{fmt.Sprintf("baseline: %s (n=%d)", wrap(f.Baseline, 60), len(f.BaselineSamples)), f.BaselineSamples,
			color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, []vg.Length{vg.Points(4), vg.Points(2)}},
	}
	for _, s := range series {
		if len(s.samples) == 0 {
			continue
		}
		line, err := plotter.NewLine(cumulative(s.samples))
		if err != nil {
			return nil, err
		}
		line.StepStyle = plotter.PostStep
		line.Color = s.color
		line.Width = vg.Points(1.5)
		line.Dashes = s.dashes
		p.Add(line)
		p.Legend.Add(s.label, line)
	}
	return p, nil
}

// cumulative is the step function of the empirical distribution: (value, share ≤ value), starting
// at share 0 on the smallest value so the line rises from the axis.
func cumulative(samples []float64) plotter.XYs {
	s := slices.Clone(samples)
	slices.Sort(s)
	xys := plotter.XYs{{X: s[0], Y: 0}}
	for i, v := range s {
		xys = append(xys, plotter.XY{X: v, Y: float64(i+1) / float64(len(s))})
	}
	return xys
}

var nonSlug = regexp.MustCompile(`[^a-z0-9]+`)

// slug turns a figure's name into a file name: lower case, words joined by '-', at most 80 bytes.
func slug(s string) string {
	out := strings.Trim(nonSlug.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if len(out) > 80 {
		out = strings.TrimRight(out[:80], "-")
	}
	return out
}

// wrap breaks text into lines of at most width bytes at spaces (plot titles and legends do not wrap).
func wrap(text string, width int) string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		line = strings.TrimSpace(line + " " + w)
	}
	return strings.Join(append(lines, line), "\n")
}

// plotsList is the markdown list of links under the table.
func plotsList(links []plotLink) string {
	if len(links) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nDistributions of this run (cumulative, each operator beside its baseline; SVG):\n\n")
	for _, l := range links {
		fmt.Fprintf(&b, "- [%s](%s)\n", l.title, l.path)
	}
	return b.String()
}
