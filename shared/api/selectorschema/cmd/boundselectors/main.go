// Command boundselectors rewrites generated CRD files with their label selectors bounded and their
// selector rules added (package selectorschema), which controller-gen cannot generate. Meant to run in
// `make generate` right after controller-gen (and crdslim), on every CRD file; a CRD without a
// selector the package knows is left as it is.
//
// Usage: go run ./api/selectorschema/cmd/boundselectors <crd.yaml>...
package main

import (
	"fmt"
	"os"

	"github.com/statefulops/statefulops/shared/api/selectorschema"
	"github.com/statefulops/statefulops/shared/hack/crdfile"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: boundselectors <crd.yaml>...")
		os.Exit(2)
	}
	for _, file := range os.Args[1:] {
		if err := rewrite(file); err != nil {
			fmt.Fprintf(os.Stderr, "boundselectors: %v\n", err)
			os.Exit(1)
		}
	}
}

// rewrite bounds the selectors of the CRD in file; a CRD without a selector the package knows stays as
// controller-gen wrote it.
func rewrite(file string) error { return crdfile.Edit(file, selectorschema.Apply) }
