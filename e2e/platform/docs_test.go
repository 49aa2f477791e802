//go:build e2e

package platform

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
)

// The examples of README.md and docs/*.md are tested as a user runs them: every ```yaml block is
// applied with `kubectl apply -f` as written, in a fresh namespace of its own, and every custom
// resource of a statefulops family in it must become Ready. A block may carry a marker, an HTML comment
// on the last non-blank line before it:
//
//	<!-- example: sample <path> -->        applied like any block, and equal to that sample file
//	<!-- example: refused "<substring>" --> `kubectl apply` must refuse it with that message
//	<!-- example: fragment (why) -->       shown, not applied (lines to add to something else)

// docExampleKind is how the doc test treats a ```yaml block.
type docExampleKind string

const (
	exampleApply    docExampleKind = "apply"
	exampleRefused  docExampleKind = "refused"
	exampleFragment docExampleKind = "fragment"
)

// docExample is one ```yaml block of the documentation.
type docExample struct {
	file string // relative to the repository root
	line int    // of the opening fence
	kind docExampleKind
	// sample is the file (relative to the root) the block must equal; refused the message substring.
	sample, refused string
	yaml            string
}

func (e docExample) String() string { return fmt.Sprintf("%s:%d", e.file, e.line) }

var exampleMarker = regexp.MustCompile(`^<!--\s*example:\s*(\w+)\s*(.*?)\s*-->$`)

// statefulopsGroups are the API groups of the five families; a custom resource of these must get Ready.
var statefulopsGroups = map[string]bool{
	"apps.openshift.statefulsingleton.com": true,
	"enge.me":                              true,
	"app.anukkrit.me":                      true,
	"sts.plus":                             true,
	"fissile.cloudfoundry.org":             true,
}

// parseDocExamples returns every ```yaml block of one markdown file with its marker.
func parseDocExamples(root, rel string) ([]docExample, error) {
	raw, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	var (
		out       []docExample
		lastText  string // the last non-blank line outside a block
		inBlock   bool
		blockLang string
		cur       docExample
		body      strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if !inBlock {
			if lang, ok := strings.CutPrefix(trimmed, "```"); ok {
				inBlock, blockLang = true, strings.TrimSpace(lang)
				body.Reset()
				cur = docExample{file: rel, line: n, kind: exampleApply}
				if m := exampleMarker.FindStringSubmatch(lastText); m != nil {
					if blockLang != "yaml" {
						return nil, fmt.Errorf("%s:%d: an example marker before a %q block (only ```yaml blocks are examples)", rel, n, blockLang)
					}
					switch docExampleKind(m[1]) {
					case exampleFragment:
						cur.kind = exampleFragment
					case exampleRefused:
						msg, err := strconv.Unquote(m[2])
						if err != nil || msg == "" {
							return nil, fmt.Errorf("%s:%d: refused marker needs a quoted message: %q", rel, n, lastText)
						}
						cur.kind, cur.refused = exampleRefused, msg
					case "sample":
						if m[2] == "" {
							return nil, fmt.Errorf("%s:%d: sample marker needs a path", rel, n)
						}
						cur.sample = m[2]
					default:
						return nil, fmt.Errorf("%s:%d: unknown example marker %q", rel, n, lastText)
					}
				}
				continue
			}
			if trimmed != "" {
				lastText = trimmed
			}
			continue
		}
		if trimmed == "```" {
			inBlock = false
			lastText = ""
			cur.yaml = body.String()
			switch {
			case blockLang == "yaml":
				out = append(out, cur)
			case strings.Contains(cur.yaml, "apiVersion:") && strings.Contains(cur.yaml, "kind:"):
				// A manifest must be in a ```yaml block, or it would escape the test.
				return nil, fmt.Errorf("%s:%d: a Kubernetes manifest in a %q block: write it as ```yaml", rel, cur.line, blockLang)
			}
			continue
		}
		body.WriteString(line)
		body.WriteByte('\n')
	}
	if inBlock {
		return nil, fmt.Errorf("%s:%d: unclosed block", rel, cur.line)
	}
	return out, sc.Err()
}

// allDocExamples returns the examples of README.md and docs/*.md.
func allDocExamples(t *testing.T) (string, []docExample) {
	t.Helper()
	root, err := localcluster.RepoRoot()
	require.NoError(t, err)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, pages, "docs/*.md")
	files := []string{"README.md"}
	for _, p := range pages {
		rel, err := filepath.Rel(root, p)
		require.NoError(t, err)
		files = append(files, rel)
	}
	var all []docExample
	for _, f := range files {
		ex, err := parseDocExamples(root, f)
		require.NoError(t, err)
		all = append(all, ex...)
	}
	return root, all
}

// statefulopsObjects returns "<kind>.<group>/<name>" of every custom resource of a statefulops family
// in a multi-document YAML.
func statefulopsObjects(doc string) ([]string, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(doc), 4096)
	var out []string
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if obj.Object == nil {
			continue
		}
		gvk := obj.GroupVersionKind()
		if statefulopsGroups[gvk.Group] {
			out = append(out, strings.ToLower(gvk.Kind)+"."+gvk.Group+"/"+obj.GetName())
		}
	}
}

// The markers are honest: a sample-marked block is exactly its sample file (one source for what
// `make run` applies and what the docs show), every sample is some page's example, a block applied by
// the test holds at least one object, and a refused block shows the message it is refused with.
func TestDocExamplesMatchTheirSamples(t *testing.T) {
	root, examples := allDocExamples(t)
	samples, err := filepath.Glob(filepath.Join(root, "*-operator", "config", "samples", "*.yaml"))
	require.NoError(t, err)
	require.Len(t, samples, 5, "one sample per operator")
	shown := map[string]bool{}
	for _, ex := range examples {
		if ex.sample != "" {
			want, err := os.ReadFile(filepath.Join(root, ex.sample))
			require.NoError(t, err, "%s names sample %s", ex, ex.sample)
			assert.Equal(t, string(want), ex.yaml, "%s is not %s as it is: copy the file into the block", ex, ex.sample)
			shown[ex.sample] = true
		}
		if ex.kind == exampleApply {
			objs, err := statefulopsObjects(ex.yaml)
			assert.NoError(t, err, "%s is not valid YAML", ex)
			assert.NotEmpty(t, objs, "%s: an applied example holds a statefulops custom resource (else mark it a fragment)", ex)
		}
	}
	for _, s := range samples {
		rel, err := filepath.Rel(root, s)
		require.NoError(t, err)
		assert.True(t, shown[rel], "%s is no page's example: mark that page's block <!-- example: sample %s -->", rel, rel)
	}
}

// Every example of README.md and docs/*.md, applied as written in a namespace of its own, gets each of
// its statefulops custom resources Ready; each refused example is refused with the message the doc shows.
func TestDocExamples(t *testing.T) {
	_, examples := allDocExamples(t)
	count := map[docExampleKind]int{}
	for _, ex := range examples {
		count[ex.kind]++
	}
	t.Logf("doc examples: %d yaml blocks: %d applied, %d refused, %d fragments (not applied)",
		len(examples), count[exampleApply], count[exampleRefused], count[exampleFragment])
	require.NotZero(t, count[exampleApply], "the docs have examples to apply")

	runDocOperators(t)

	var tested int
	var failed atomic.Int32
	t.Run("examples", func(t *testing.T) {
		for _, ex := range examples {
			if ex.kind == exampleFragment {
				t.Logf("%s: fragment, not applied", ex)
				continue
			}
			tested++
			name := strings.ReplaceAll(ex.String(), "/", "_")
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				t.Cleanup(func() {
					if t.Failed() {
						failed.Add(1)
					}
				})
				ns := framework.NewNamespace(t)
				file := filepath.Join(t.TempDir(), "example.yaml")
				require.NoError(t, os.WriteFile(file, []byte(ex.yaml), 0o644))
				out, err := framework.Kubectl().Run(t.Context(), "apply", "-n", ns, "-f", file)
				if ex.kind == exampleRefused {
					require.Error(t, err, "%s must be refused, was applied: %s", ex, out)
					assert.Contains(t, err.Error(), ex.refused, "%s is refused with the message the doc shows", ex)
					return
				}
				require.NoError(t, err, "%s: kubectl apply -f", ex)
				objs, err := statefulopsObjects(ex.yaml)
				require.NoError(t, err)
				for _, obj := range objs {
					_, err := framework.Kubectl().Run(t.Context(), "wait", "-n", ns, "--for=condition=Ready", "--timeout=5m", obj)
					if !assert.NoError(t, err, "%s: %s gets Ready", ex, obj) {
						describe, _ := framework.Kubectl().Run(t.Context(), "describe", "-n", ns, obj)
						pods, _ := framework.Kubectl().Run(t.Context(), "get", "pods,pvc,statefulsets,deployments", "-n", ns, "-o", "wide")
						t.Logf("%s is not Ready:\n%s\n%s", obj, describe, pods)
					}
				}
			})
		}
	})
	t.Logf("doc examples tested: %d (%d applied, each CR to get Ready; %d to be refused), %d failed; %d fragments not applied",
		tested, count[exampleApply], count[exampleRefused], failed.Load(), count[exampleFragment])
}

// runDocOperators makes every operator and the webhook server run for the examples: installed from
// deploy/ as a user installs them. On the real node they run there as real pods; on kwok nodes, whose
// pods run nothing, they run as local processes under their manifests' RBAC (as `make run` does) and
// the pod webhook is pointed at a local webhook server.
func runDocOperators(t *testing.T) {
	t.Helper()
	framework.Install(t)
	onRealNode, err := framework.RealNodeReady(t.Context())
	require.NoError(t, err)
	if onRealNode {
		for _, d := range []string{"singleton-operator-system/deployment/singleton-operator-webhook-server",
			"singleton-operator-system/deployment/singleton-operator-controller-manager",
			"cluster-operator-system/deployment/cluster-operator-controller-manager",
			"lease-operator-system/deployment/lease-operator-controller-manager",
			"rollout-operator-system/deployment/rollout-operator-controller-manager",
			"extended-operator-system/deployment/extended-operator-controller-manager"} {
			ns, obj, _ := strings.Cut(d, "/")
			_, err := framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", ns, obj, "--timeout=240s")
			require.NoError(t, err)
		}
		return
	}
	start := time.Now()
	for _, op := range []string{"singleton-operator", "cluster-operator", "lease-operator", "rollout-operator", "extended-operator"} {
		framework.StartLocalOperator(t, op)
	}
	framework.StartChaosWebhook(t)
	t.Logf("operators and webhook server running locally in %s", time.Since(start).Round(time.Second))
}
