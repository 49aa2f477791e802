// Package status is `kubectl statefulops status`.
package status

import (
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// NewCommand returns the status command.
func NewCommand(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{Use: "status [KIND/NAME]", Short: "Show every statefulops object with its health and workload"}
}
