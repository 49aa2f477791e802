// Package verbs holds the commands that act: rollout, lease, singleton and cluster.
package verbs

import (
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// NewCommands returns the verb groups.
func NewCommands(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) []*cobra.Command {
	return nil
}
