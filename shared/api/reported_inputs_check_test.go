package api_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the repository's root, seen from shared/api.
var repoRoot = filepath.Join("..", "..")

// TestReportedInputsNameTheirTests keeps the reported-at-once tables of docs/bad-input.md honest: every
// row's reason is a constant of its kind's API package whose value the row shows, and every test the row
// names exists in that package's files, mentions the constant (or its value), and has the named subtest.
// It parses the files (build tags ignored) and runs nothing, so it is fast and needs no envtest.
func TestReportedInputsNameTheirTests(t *testing.T) {
	tests := map[string]map[string]string{} // package dir → test name → body source
	for _, k := range reportedInputKinds {
		consts := stringConstants(t, filepath.Join(k.apiDir))
		cases := map[string]bool{}
		for _, row := range k.rows {
			t.Run(k.kind+"/"+row.Case, func(t *testing.T) {
				if cases[row.Case] {
					t.Errorf("case listed twice")
				}
				cases[row.Case] = true
				if row.Condition == "" || row.Event == "" || row.Kstatus == "" || len(row.Tests) == 0 {
					t.Fatalf("a row says the condition, the Event, what kstatus reads, and names its tests: %+v", row)
				}
				value, ok := consts[row.Reason]
				if !ok {
					t.Fatalf("reason %s is no string constant of shared/api/%s", row.Reason, k.apiDir)
				}
				if !strings.Contains(row.Condition+" "+row.Event, value) {
					t.Errorf("the row shows neither a condition nor an Event with reason %q (%s)", value, row.Reason)
				}
				mention := regexp.MustCompile(`\.` + row.Reason + `\b|` + regexp.QuoteMeta(strconv.Quote(value)))
				for _, ref := range row.Tests {
					dir, name, sub, err := parseTestRef(ref)
					if err != nil {
						t.Errorf("%s: %v", ref, err)
						continue
					}
					if tests[dir] == nil {
						tests[dir] = testBodies(t, dir)
					}
					body, ok := tests[dir][name]
					if !ok {
						t.Errorf("%s: no func %s(t *testing.T) in %s", ref, name, dir)
						continue
					}
					if !mention.MatchString(body) {
						t.Errorf("%s does not mention %s (%q): the row outlived what its test asserts", ref, row.Reason, value)
					}
					if sub != "" && !strings.Contains(body, strconv.Quote(sub)) {
						t.Errorf("%s: no subtest %q in %s", ref, sub, name)
					}
				}
			})
		}
	}
}

// parseTestRef splits "<module dir>/<package path>.<TestName>[/<subtest>]".
func parseTestRef(ref string) (dir, name, sub string, err error) {
	i := strings.LastIndex(ref, ".Test")
	if i < 0 {
		return "", "", "", errors.New("want <module dir>/<package path>.<TestName>[/<subtest>]")
	}
	dir, name = ref[:i], ref[i+1:]
	name, sub, _ = strings.Cut(name, "/")
	return filepath.Join(repoRoot, filepath.FromSlash(dir)), name, sub, nil
}

// testBodies returns the source of every func TestX(t *testing.T) in the _test.go files of dir.
func testBodies(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files in %s (%v)", dir, err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Test") {
				continue
			}
			out[fn.Name.Name] = string(src[fset.Position(fn.Body.Pos()).Offset:fset.Position(fn.Body.End()).Offset])
		}
	}
	return out
}

// stringConstants returns the string constants (name → value) of the non-test files of dir.
func stringConstants(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if v, err := strconv.Unquote(lit.Value); err == nil {
							out[n.Name] = v
						}
					}
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no string constants in %s", dir)
	}
	return out
}
