package crdvalidation

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// seedPrograms are the mutation programs every seed manifest is added with (Mutate): none (the manifest
// as written), and a few that touch the selector, the names and the numbers near the front of the
// object, so that the first minutes of fuzzing already leave the seeds.
var seedPrograms = [][]byte{
	nil,
	{0, 0, 17}, // first node: an invalid value
	{3, 5, 9, 1, 0, 60},
	{5, 2, 4, 7, 0, 47, 2, 4, 0},
	{9, 0, 71, 12, 1, 0},
}

// acceptedPrograms returns up to n one-step mutation programs of doc, each on another node, that the
// validator accepts: seeds that already reach the operator's checks with a changed object (most single
// mutations make an object invalid, and the fuzzer would take long to find the others).
func acceptedPrograms(v *Validator, doc string, n int) [][]byte {
	var out [][]byte
	budget := 300 // validations: the seed corpus runs in every `make test`
	for sel := 0; sel < 256 && len(out) < n && budget > 0; sel += 3 {
		for _, act := range []byte{0, 2, 5, 3} {
			found := false
			for val := 0; val < len(interesting)+len(newKeys) && !found && budget > 0; val += 3 {
				budget--
				obj := map[string]any{}
				if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
					return nil
				}
				p := []byte{byte(sel), act, byte(val)}
				if len(Mutate(obj, p)) > 0 && len(v.Validate(context.Background(), obj)) == 0 {
					out, found = append(out, p), true
				}
			}
			if found {
				break
			}
		}
	}
	return out
}

var (
	seedMu    sync.Mutex
	seedCache = map[string][]string{}
)

// seedDocs returns a kind's documented examples and bad inputs, read once per process.
func seedDocs(kind string) ([]string, error) {
	seedMu.Lock()
	defer seedMu.Unlock()
	if docs, ok := seedCache[kind]; ok {
		return docs, nil
	}
	examples, err := Examples(kind)
	if err != nil {
		return nil, err
	}
	bad, err := BadInputs(kind)
	if err != nil {
		return nil, err
	}
	var docs []string
	for _, c := range append(examples, bad...) {
		docs = append(docs, c.Doc)
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("no examples or bad inputs of %s", kind)
	}
	seedCache[kind] = docs
	return docs, nil
}

// AddSeeds adds a kind's fuzz seed corpus to f: every documented example and every bad input of
// docs/bad-input.md, each with a few mutation programs. The fuzz function takes (doc string, ops []byte)
// and passes them to Admit.
func AddSeeds(f *testing.F, kind string) {
	f.Helper()
	examples, err := Examples(kind)
	if err != nil {
		f.Fatal(err)
	}
	bad, err := BadInputs(kind)
	if err != nil {
		f.Fatal(err)
	}
	if len(examples) == 0 || len(bad) == 0 {
		f.Fatalf("%s: %d examples, %d bad inputs: the seed corpus needs both", kind, len(examples), len(bad))
	}
	v, err := ForKind(kind)
	if err != nil {
		f.Fatal(err)
	}
	for _, c := range examples {
		for _, p := range seedPrograms {
			f.Add(c.Doc, p)
		}
		for _, p := range acceptedPrograms(v, c.Doc, 8) {
			f.Add(c.Doc, p)
		}
	}
	for _, c := range bad {
		f.Add(c.Doc, []byte(nil))
	}
}

// Admit decodes doc, applies the mutation program ops, and asks the kind's validator whether the API
// server would accept the result. When it does, into (a pointer to the kind's Go type) holds the object
// as the operator would read it (pruned and defaulted) and Admit returns it as Admitted, whose Fatalf
// shows the mutation steps and the object. A document that is not YAML of this kind stands for one of the
// kind's seed manifests, picked by its bytes. An object the validator refuses returns nil: the API
// server never hands such an object to the operator. An accepted object that does not decode into the
// operator's Go type fails t: the informer could not decode it either.
func Admit(t testing.TB, kind, doc string, ops []byte, into runtime.Object) *Admitted {
	t.Helper()
	v, err := ForKind(kind)
	if err != nil {
		t.Fatal(err)
	}
	obj := map[string]any{}
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil || obj["kind"] != kind {
		// Most of the fuzzer's changes to doc break the YAML: such a doc picks one of the kind's seed
		// manifests by its bytes instead, so that every input still mutates a real object.
		seeds, err := seedDocs(kind)
		if err != nil {
			t.Fatal(err)
		}
		h := fnv.New32a()
		_, _ = h.Write([]byte(doc))
		obj = map[string]any{}
		if err := yaml.Unmarshal([]byte(seeds[h.Sum32()%uint32(len(seeds))]), &obj); err != nil {
			t.Fatal(err)
		}
	}
	steps := Mutate(obj, ops)
	if errs := v.Validate(t.Context(), obj); len(errs) > 0 {
		return nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, into); err != nil {
		data, _ := yaml.Marshal(obj)
		t.Fatalf("the API server accepts a %s the operator cannot decode: %v\nmutations: %s\n%s", kind, err, strings.Join(steps, "; "), data)
	}
	return &Admitted{t: t, steps: steps, obj: into}
}

// Fuzz is a kind's fuzz target: it adds the seed corpus (AddSeeds) and, for every fuzz input whose
// object the API server would accept (Admit), calls check with the object as the operator would read it
// and a fail function that shows the mutations and the object after the message. Inputs the validator
// refuses assert nothing: the operator never sees them.
func Fuzz[T any, PT interface {
	*T
	runtime.Object
}](f *testing.F, kind string, check func(t *testing.T, obj PT, fail func(format string, args ...any))) {
	f.Helper()
	AddSeeds(f, kind)
	f.Fuzz(func(t *testing.T, doc string, ops []byte) {
		obj := PT(new(T))
		if admitted := Admit(t, kind, doc, ops, obj); admitted != nil {
			check(t, obj, admitted.Fatalf)
		}
	})
}

// Admitted is an object the validator accepted, and how the fuzz input made it.
type Admitted struct {
	t     testing.TB
	steps []string
	obj   any
}

// Fatalf fails the fuzz input with the mutations and the accepted object after the message.
func (a *Admitted) Fatalf(format string, args ...any) {
	a.t.Helper()
	data, _ := yaml.Marshal(a.obj)
	a.t.Fatalf(format+"\nmutations: %s\n%s", append(args, strings.Join(a.steps, "; "), data)...)
}
