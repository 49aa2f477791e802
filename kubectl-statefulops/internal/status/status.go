// Package status is `kubectl statefulops status`: every statefulops object with its health (the kstatus
// verdict), what it waits for, and its workload, as a tree on a terminal, plain text in a pipe, or a
// structured summary with -o json|yaml; --watch redraws it on every change.
package status

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/statefulops/statefulops/kubectl-statefulops/internal/kube"
)

type options struct {
	flags         *genericclioptions.ConfigFlags
	streams       genericiooptions.IOStreams
	allNamespaces bool
	output        string
	watch         bool
	// debounce gathers a burst of watch events into one redraw.
	debounce time.Duration
}

// NewCommand returns the status command.
func NewCommand(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{flags: flags, streams: streams, debounce: 200 * time.Millisecond}
	cmd := &cobra.Command{
		Use:   "status [KIND/NAME | KIND [NAME]]",
		Short: "Show every statefulops object with its health and workload",
		Long: `Show every statefulops object (StatefulSingleton sss, StatefulSetLock ssl, PhasedRollout pr,
StatefulCluster stc, ExtendedStatefulSet ests) with its health as kstatus computes it (Current,
InProgress, Failed), the condition that says what it waits for, and its workload. Kinds whose
operator is not installed are skipped. The health is shown, never an exit code: the command fails
only when it cannot read the cluster or is used wrongly.`,
		Example: `  kubectl statefulops status -A
  kubectl statefulops status sss/my-database
  kubectl statefulops status pr -n shop --watch
  kubectl statefulops status -A -o json`,
		Args: cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args)
		},
	}
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "show the objects of every namespace")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "output format: json or yaml (a structured summary); default text")
	cmd.Flags().BoolVarP(&o.watch, "watch", "w", false, "redraw on every change of the objects or their pods")
	return cmd
}

// parseArgs accepts KIND/NAME, KIND NAME, KIND or nothing.
func parseArgs(args []string) (kindArg, name string, err error) {
	switch len(args) {
	case 0:
		return "", "", nil
	case 1:
		k, n, found := strings.Cut(args[0], "/")
		if found && (k == "" || n == "") {
			return "", "", fmt.Errorf("%q: expected KIND/NAME", args[0])
		}
		return k, n, nil
	default:
		if strings.Contains(args[0], "/") {
			return "", "", fmt.Errorf("give KIND/NAME or KIND NAME, not both")
		}
		return args[0], args[1], nil
	}
}

func (o *options) run(ctx context.Context, args []string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	kindArg, name, err := parseArgs(args)
	if err != nil {
		return err
	}
	switch o.output {
	case "", "json", "yaml":
	default:
		return fmt.Errorf("--output %q: use json or yaml (or nothing for text)", o.output)
	}
	if name != "" && o.allNamespaces {
		return fmt.Errorf("an object cannot be shown by name across all namespaces: drop -A or the name")
	}
	clients, err := kube.Connect(o.flags)
	if err != nil {
		return err
	}
	ns := clients.Namespace
	if o.allNamespaces {
		ns = ""
	}
	sc, err := resolveScope(clients.Client, ns, kindArg, name)
	if err != nil {
		return err
	}
	out := &frames{w: o.streams.Out, format: o.output, style: detectStyle(o.streams.Out), empty: emptyMessage(sc, kindArg), watch: o.watch}
	snap, err := collect(ctx, clients.Client, sc)
	if err != nil {
		return err
	}
	if name != "" && len(snap.summary.Objects) == 0 && !o.watch {
		return fmt.Errorf("%s %q not found in namespace %q", sc.kinds[0].Kind, name, ns)
	}
	if err := out.emit(snap.summary); err != nil {
		return err
	}
	if !o.watch {
		return nil
	}
	return watchLoop(ctx, clients.Client, sc, snap, o.debounce, out.emit)
}

// detectStyle draws the tree on a terminal, in colour unless NO_COLOR is set (https://no-color.org).
func detectStyle(w io.Writer) Style {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return Style{}
	}
	return Style{Tree: true, Color: os.Getenv("NO_COLOR") == ""}
}

func emptyMessage(sc scope, kindArg string) string {
	what := "statefulops objects"
	if kindArg != "" && len(sc.kinds) == 1 {
		what = sc.kinds[0].Kind + " objects"
	}
	if sc.name != "" {
		what = fmt.Sprintf("%s %q", sc.kinds[0].Kind, sc.name)
	}
	if sc.namespace == "" {
		return fmt.Sprintf("No %s in any namespace.", what)
	}
	return fmt.Sprintf("No %s in namespace %q.", what, sc.namespace)
}

// frames writes one view after another: on a terminal each replaces the last (clear and redraw); in
// a pipe each later frame follows a separator line. A frame equal to the last one is not written.
type frames struct {
	w      io.Writer
	format string
	style  Style
	empty  string
	watch  bool
	count  int
	last   []byte
}

func (f *frames) emit(sum Summary) error {
	var buf bytes.Buffer
	var err error
	switch f.format {
	case "json":
		err = RenderJSON(&buf, sum)
	case "yaml":
		err = RenderYAML(&buf, sum)
	default:
		err = RenderText(&buf, sum, f.style, time.Now(), f.empty)
	}
	if err != nil {
		return err
	}
	if f.count > 0 && bytes.Equal(buf.Bytes(), f.last) {
		return nil
	}
	f.last = buf.Bytes()
	var prefix string
	if f.count > 0 {
		switch {
		case f.format == "json":
			// A stream of JSON documents, as kubectl get -w -o json writes.
		case f.format == "yaml":
			prefix = "---\n"
		case f.style.Tree:
			prefix = "\x1b[H\x1b[2J"
		default:
			prefix = "--- " + time.Now().Format("15:04:05") + "\n"
		}
	} else if f.watch && f.style.Tree && f.format == "" {
		prefix = "\x1b[H\x1b[2J"
	}
	f.count++
	_, err = io.WriteString(f.w, prefix+buf.String())
	return err
}
