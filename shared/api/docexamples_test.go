//go:build integration

package api_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// statefulopsGroup reports whether an apiVersion belongs to one of the five CRD families.
func statefulopsGroup(apiVersion string) bool {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return false
	}
	switch gv.Group {
	case "apps.openshift.statefulsingleton.com", "enge.me", "app.anukkrit.me", "sts.plus", "fissile.cloudfoundry.org":
		return true
	}
	return false
}

// exampleMarkerLine is the doc examples' marker (see e2e/docs_test.go): refused and fragment blocks are
// not applied here.
var exampleMarkerLine = regexp.MustCompile(`^<!--\s*example:\s*(\w+)`)

// manifestBlocks returns the ```yaml blocks of a markdown file that are meant to apply, by line.
func manifestBlocks(t *testing.T, file string) map[int]string {
	t.Helper()
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	out := map[int]string{}
	var (
		inBlock, keep bool
		start         int
		lastText      string
		body          strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case !inBlock && strings.HasPrefix(trimmed, "```"):
			inBlock, start = true, n
			keep = strings.TrimSpace(strings.TrimPrefix(trimmed, "```")) == "yaml"
			if m := exampleMarkerLine.FindStringSubmatch(lastText); m != nil && m[1] != "sample" {
				keep = false
			}
			body.Reset()
		case inBlock && trimmed == "```":
			inBlock = false
			if keep {
				out[start] = body.String()
			}
		case inBlock:
			body.WriteString(line + "\n")
		case trimmed != "":
			lastText = trimmed
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// Every manifest of the samples, README.md and docs/*.md (except blocks marked refused or fragment)
// is accepted by the CRDs: the rules that refuse bad input refuse none of the documented examples.
func TestDocAndSampleManifestsAreAccepted(t *testing.T) {
	root := filepath.Join("..", "..")
	sources := map[string]string{}
	samples, err := filepath.Glob(filepath.Join(root, "*-operator", "config", "samples", "*.yaml"))
	require.NoError(t, err)
	for _, f := range samples {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, f)
		sources[rel] = string(raw)
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	for _, page := range append(pages, filepath.Join(root, "README.md")) {
		rel, _ := filepath.Rel(root, page)
		for line, block := range manifestBlocks(t, page) {
			sources[fmt.Sprintf("%s:%d", rel, line)] = block
		}
	}
	applied := 0
	i := 0
	for src, doc := range sources {
		i++
		ns := fmt.Sprintf("example-%d", i)
		dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(doc), 4096)
		for {
			obj := &unstructured.Unstructured{}
			err := dec.Decode(&obj.Object)
			if err == io.EOF {
				break
			}
			require.NoError(t, err, src)
			if len(obj.Object) == 0 || !statefulopsGroup(obj.GetAPIVersion()) {
				continue
			}
			obj.SetNamespace(ns)
			ensureNamespace(t, ns)
			require.NoError(t, k8sClient.Create(t.Context(), obj), "%s: %s %s", src, obj.GetKind(), obj.GetName())
			applied++
		}
	}
	require.NotZero(t, applied)
	t.Logf("applied %d custom resources from %d samples and doc blocks", applied, len(sources))
}
