// kubectl-statefulops is the kubectl plugin of statefulops: `kubectl statefulops status` shows every
// statefulops object with its health and its workload, and its verbs (rollout, lease, singleton,
// cluster) wrap what each operator's API already offers. Installed on the PATH as
// kubectl-statefulops, kubectl finds it as `kubectl statefulops`.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/statefulops/statefulops/kubectl-statefulops/internal/cmd"
)

func main() {
	root := cmd.NewRootCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	if err := root.Execute(); err != nil {
		os.Exit(1)
	}
}
