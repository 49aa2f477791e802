// Package cmd assembles the plugin's command tree.
package cmd

import (
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/statefulops/statefulops/kubectl-statefulops/internal/status"
	"github.com/statefulops/statefulops/kubectl-statefulops/internal/verbs"
	"github.com/statefulops/statefulops/shared/version"
)

// NewRootCommand returns `kubectl statefulops` with kubectl's connection flags (--kubeconfig,
// --context, -n, ...) on every subcommand.
func NewRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	flags := genericclioptions.NewConfigFlags(true)
	root := &cobra.Command{
		Use:           "kubectl-statefulops",
		Short:         "See and steer the statefulops operators",
		Version:       version.Get(),
		SilenceUsage:  true,
		SilenceErrors: false,
		Annotations: map[string]string{
			// kubectl shows plugin commands under this name in help texts.
			cobra.CommandDisplayNameAnnotation: "kubectl statefulops",
		},
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	flags.AddFlags(root.PersistentFlags())

	root.AddCommand(status.NewCommand(flags, streams))
	root.AddCommand(verbs.NewCommands(flags, streams)...)
	return root
}
