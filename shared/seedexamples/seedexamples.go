// Package seedexamples extracts the example objects from the seed documents, the specification of
// statefulops (the handbook's seeds/ folder beside the checkout), so that tests can prove every example
// applies unchanged to the CRDs we serve.
package seedexamples

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// EnvDir names the environment variable that overrides where the seed documents are.
const EnvDir = "STATEFULOPS_SEEDS"

// Example is one installable object shown in a seed document.
type Example struct {
	// Seed is the seed document's file name.
	Seed string
	// Kind and Name identify the object (after the mechanical fixes).
	Kind, Name string
	// Namespace is the object's namespace as written, or empty.
	Namespace string
	// YAML is the object as one YAML document, after the mechanical fixes.
	YAML string
	// Fixes lists the mechanical fixes applied, in words; empty when the example is used exactly as written.
	Fixes []string
}

// Dir returns the directory of the seed documents: $STATEFULOPS_SEEDS, or ../shared/seeds beside the root
// of the checkout (the directory holding go.work), found by walking up from the working directory.
func Dir() (string, error) {
	if dir := os.Getenv(EnvDir); dir != "" {
		return dir, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			seeds := filepath.Join(filepath.Dir(dir), "shared", "seeds")
			if _, err := os.Stat(seeds); err != nil {
				return "", fmt.Errorf("the seed documents are not at %s (set %s): %w", seeds, EnvDir, err)
			}
			return seeds, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no go.work above %s, so the seed documents cannot be found (set %s)", wd, EnvDir)
		}
	}
}

// fencedYAML matches a fenced ```yaml block of a Markdown document.
var fencedYAML = regexp.MustCompile("(?ms)^[ \t]*```ya?ml[ \t]*\n(.*?)^[ \t]*```")

// Load returns the examples of every seed document (*.txt) in dir, in file order.
//
// A block or document counts as an example when it parses as YAML and names an apiVersion, a kind, a
// metadata.name and a body (spec, data or stringData). Everything else is an illustration (a status or
// affinity snippet, a metadata-only fragment, a ConfigMap fragment that does not parse) and is left out.
// Two mechanical fixes that change no meaning are applied, and recorded in Example.Fixes: a line "--"
// between two documents is read as the separator "---", and a metadata.name that is not a valid object
// name only because of upper-case letters is lower-cased.
func Load(dir string) ([]Example, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no seed documents (*.txt) in %s", dir)
	}
	slices.Sort(files)
	var examples []Example
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		for _, block := range fencedYAML.FindAllStringSubmatch(string(text), -1) {
			examples = append(examples, fromBlock(filepath.Base(file), block[1])...)
		}
	}
	return examples, nil
}

// fromBlock returns the examples of one fenced block.
func fromBlock(seed, block string) []Example {
	var fixes []string
	lines := strings.Split(block, "\n")
	for i, line := range lines {
		if strings.TrimSpace(line) == "--" {
			lines[i] = "---"
			fixes = append(fixes, `"--" read as the YAML document separator "---"`)
		}
	}
	var examples []Example
	for _, doc := range splitDocuments(strings.Join(lines, "\n")) {
		ex, ok := fromDocument(seed, doc)
		if !ok {
			continue
		}
		ex.Fixes = append(slices.Clone(fixes), ex.Fixes...)
		examples = append(examples, ex)
	}
	return examples
}

// splitDocuments splits a multi-document YAML stream at its "---" lines.
func splitDocuments(stream string) []string {
	var docs []string
	var current []string
	for _, line := range strings.Split(stream, "\n") {
		if strings.TrimRight(line, " \t") == "---" {
			docs = append(docs, strings.Join(current, "\n"))
			current = nil
			continue
		}
		current = append(current, line)
	}
	return append(docs, strings.Join(current, "\n"))
}

// fromDocument returns the example of one YAML document, or false when it is no installable object.
func fromDocument(seed, doc string) (Example, bool) {
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil || obj == nil {
		return Example{}, false
	}
	kind, _ := obj["kind"].(string)
	apiVersion, _ := obj["apiVersion"].(string)
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if kind == "" || apiVersion == "" || name == "" || !hasBody(obj) {
		return Example{}, false
	}
	ex := Example{Seed: seed, Kind: kind, Name: name, YAML: strings.TrimSpace(doc) + "\n"}
	ex.Namespace, _ = meta["namespace"].(string)
	if lower := strings.ToLower(name); lower != name {
		meta["name"] = lower
		out, err := yaml.Marshal(obj)
		if err != nil {
			return Example{}, false
		}
		ex.Name, ex.YAML = lower, string(out)
		ex.Fixes = append(ex.Fixes, fmt.Sprintf("metadata.name %q lower-cased to %q (object names are lower-case)", name, lower))
	}
	return ex, true
}

// hasBody reports whether obj carries content beyond its metadata.
func hasBody(obj map[string]any) bool {
	return slices.ContainsFunc([]string{"spec", "data", "stringData"}, func(key string) bool {
		_, ok := obj[key]
		return ok
	})
}
