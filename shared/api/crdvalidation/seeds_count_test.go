package crdvalidation

import (
	"testing"

	"sigs.k8s.io/yaml"
)

// The seed programs keep some documented examples valid, so that the seed corpus alone already runs
// every fuzz target's operator checks on mutated objects, not only on the examples as written.
func TestSeedProgramsReachTheOperator(t *testing.T) {
	for kind := range CRDFiles {
		examples, err := Examples(kind)
		if err != nil {
			t.Fatal(err)
		}
		v, err := ForKind(kind)
		if err != nil {
			t.Fatal(err)
		}
		accepted, mutated := 0, 0
		for _, ex := range examples {
			for _, p := range append(seedPrograms, acceptedPrograms(v, ex.Doc, 8)...) {
				obj := map[string]any{}
				if err := yaml.Unmarshal([]byte(ex.Doc), &obj); err != nil {
					t.Fatal(err)
				}
				steps := Mutate(obj, p)
				if len(v.Validate(t.Context(), obj)) == 0 {
					accepted++
					if len(steps) > 0 {
						mutated++
					}
				}
			}
		}
		t.Logf("%s: %d examples, %d seeds accepted, %d of them mutated", kind, len(examples), accepted, mutated)
		if accepted < len(examples) || mutated < len(examples) {
			t.Errorf("%s: %d of %d examples accepted as written, %d mutated seeds accepted", kind, accepted, len(examples), mutated)
		}
	}
}
