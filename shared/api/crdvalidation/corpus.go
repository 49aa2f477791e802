package crdvalidation

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// BadInputFile is the corpus of docs/bad-input.md's whole manifests (the doc shows only the offending
// part), relative to the repository root. TestCRDValidatorAgreesWithAPIServer in shared/api writes it
// from the same tables as the doc (`cd shared && go test -tags integration ./api/ -run
// 'TestBadInputDoc|TestCRDValidatorAgreesWithAPIServer' -update`) and fails when it is stale, so fuzz
// targets of other modules can seed their corpora with every bad input.
const BadInputFile = "shared/api/crdvalidation/testdata/bad-input.json"

// Case is one manifest of a kind: a bad input of docs/bad-input.md, or a documented example.
type Case struct {
	Kind string `json:"kind"`
	Name string `json:"case"` // what is wrong (bad input) or where it comes from (example)
	Doc  string `json:"doc"`  // the YAML of one object
}

// BadInputs returns docs/bad-input.md's cases of one kind ("" for all), in the doc's order.
func BadInputs(kind string) ([]Case, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(root, BadInputFile))
	if err != nil {
		return nil, err
	}
	var all []Case
	if err := json.Unmarshal(data, &all); err != nil {
		return nil, err
	}
	var out []Case
	for _, c := range all {
		if kind == "" || c.Kind == kind {
			out = append(out, c)
		}
	}
	return out, nil
}

// exampleMarker is the documentation examples' marker (docs/development.md): blocks marked refused or
// fragment are not examples that apply.
var exampleMarker = regexp.MustCompile(`^<!--\s*example:\s*(\w+)`)

// Examples returns every custom resource of one kind ("" for all) that the documentation shows as
// applying: the operators' samples and every ```yaml block of README.md and docs/*.md not marked
// refused or fragment, one Case per object, sorted by where it comes from.
func Examples(kind string) ([]Case, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	sources := map[string]string{}
	samples, err := filepath.Glob(filepath.Join(root, "*-operator", "config", "samples", "*.yaml"))
	if err != nil {
		return nil, err
	}
	for _, f := range samples {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, f)
		sources[rel] = string(raw)
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	for _, page := range append(pages, filepath.Join(root, "README.md")) {
		blocks, err := yamlBlocks(page)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, page)
		for name, block := range blocks {
			sources[rel+":"+name] = block
		}
	}
	var out []Case
	for src, doc := range sources {
		objs, err := splitObjects(doc)
		if err != nil {
			return nil, errors.Join(errors.New(src), err)
		}
		for _, obj := range objs {
			k, _ := obj["kind"].(string)
			if _, ours := CRDFiles[k]; !ours || (kind != "" && k != kind) {
				continue
			}
			data, err := yaml.Marshal(obj)
			if err != nil {
				return nil, err
			}
			out = append(out, Case{Kind: k, Name: src, Doc: string(data)})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Name < out[j].Name || (out[i].Name == out[j].Name && out[i].Doc < out[j].Doc)
	})
	return out, nil
}

// yamlBlocks returns the ```yaml blocks of a Markdown file meant to apply, keyed by their first line.
func yamlBlocks(file string) (map[string]string, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	var (
		inBlock, keep bool
		start         int
		lastText      string
		body          strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case !inBlock && strings.HasPrefix(trimmed, "```"):
			inBlock, start = true, n
			keep = strings.TrimSpace(strings.TrimPrefix(trimmed, "```")) == "yaml"
			if m := exampleMarker.FindStringSubmatch(lastText); m != nil && m[1] != "sample" {
				keep = false
			}
			body.Reset()
		case inBlock && trimmed == "```":
			inBlock = false
			if keep {
				out[itoa(start)] = body.String()
			}
		case inBlock:
			body.WriteString(line + "\n")
		case trimmed != "":
			lastText = trimmed
		}
	}
	return out, sc.Err()
}

func itoa(n int) string { return strconv.Itoa(n) }

// splitObjects decodes every YAML document of doc.
func splitObjects(doc string) ([]map[string]any, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(doc), 4096)
	var out []map[string]any
	for {
		obj := map[string]any{}
		if err := dec.Decode(&obj); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		if len(obj) > 0 {
			out = append(out, obj)
		}
	}
}
