// Package verbs holds the commands that act: rollout, lease, singleton and cluster. Each one writes
// what the operator's API already offers (a spec field, an annotation, a node taint, a pod deletion),
// then waits until the operator's status shows the effect and says what happened; --wait=false
// returns right after the write.
package verbs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/kubectl-statefulops/internal/kube"
)

// NewCommands returns the verb groups.
func NewCommands(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) []*cobra.Command {
	return newCommands(func() (*kube.Clients, error) { return kube.Connect(flags) }, streams)
}

// newCommands builds the verb groups on connect, which the unit tests replace with a fake client.
func newCommands(connect func() (*kube.Clients, error), streams genericiooptions.IOStreams) []*cobra.Command {
	return (&env{connect: connect, streams: streams, now: time.Now, poll: 200 * time.Millisecond}).commands()
}

func (e *env) commands() []*cobra.Command {
	return []*cobra.Command{newRolloutCommand(e), newLeaseCommand(e), newSingletonCommand(e), newClusterCommand(e)}
}

// env is what every verb shares: the connection, the streams, the clock and the wait flags.
type env struct {
	connect func() (*kube.Clients, error)
	streams genericiooptions.IOStreams
	now     func() time.Time
	poll    time.Duration
}

// waitFlags are --wait and --timeout, on every verb.
type waitFlags struct {
	wait    bool
	timeout time.Duration
}

func (w *waitFlags) add(cmd *cobra.Command, what string) {
	cmd.Flags().BoolVar(&w.wait, "wait", true, "wait until "+what+"; false returns right after the write")
	cmd.Flags().DurationVar(&w.timeout, "timeout", 2*time.Minute, "how long to wait for the operator's confirmation")
}

// errTimeout marks a wait that ran out of time; the message says what was last seen.
var errTimeout = errors.New("timed out")

// waitFor reads the object every e.poll until done says it shows the effect, at most timeout. done
// returns a description of the last state seen, used in the timeout error, and may fail the wait
// (e.g. the object was deleted meanwhile).
func (e *env) waitFor(ctx context.Context, c client.Client, obj client.Object, timeout time.Duration, done func() (bool, string, error)) error {
	key := client.ObjectKeyFromObject(obj)
	last := ""
	err := wait.PollUntilContextTimeout(ctx, e.poll, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, obj); err != nil {
			if apierrors.IsNotFound(err) {
				return false, fmt.Errorf("%s disappeared while waiting: %w", key, err)
			}
			last = err.Error() // a transient read error: try again until the timeout
			return false, nil
		}
		ok, seen, err := done()
		last = seen
		return ok, err
	})
	if wait.Interrupted(err) {
		return fmt.Errorf("%w after %s waiting for the operator: %s (the write was made; look again with kubectl get or kubectl statefulops status)", errTimeout, timeout, last)
	}
	return err
}

// get reads the object named key, with a message naming the kind on NotFound.
func get(ctx context.Context, c client.Client, kind string, key client.ObjectKey, obj client.Object) error {
	if err := c.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) && key.Namespace == "" {
			return fmt.Errorf("%s %q not found", kind, key.Name)
		} else if apierrors.IsNotFound(err) {
			return fmt.Errorf("%s %q not found in namespace %q", kind, key.Name, key.Namespace)
		}
		if meta.IsNoMatchError(err) {
			return fmt.Errorf("the cluster does not serve %s: is its operator installed? (%w)", kind, err)
		}
		return fmt.Errorf("reading %s %s: %w", kind, key, err)
	}
	return nil
}

// conflictAttempts bounds patchFresh's reads and writes.
const conflictAttempts = 5

// patchFresh reads obj (named by its namespace and name), lets plan decide on what it read (refuse,
// or return the merge patch to write) and writes the patch guarded by the resourceVersion read. The
// operators write their objects' status often, which moves the resourceVersion, so a conflict is met
// by reading again and deciding again on the newer state, a few times.
// A failed write is worded by writeErr with what; plan's refusals are returned as they are.
func patchFresh(ctx context.Context, c client.Client, kind, what string, obj client.Object, plan func() (map[string]any, error)) error {
	key := client.ObjectKeyFromObject(obj)
	for attempt := 1; ; attempt++ {
		if err := get(ctx, c, kind, key, obj); err != nil {
			return err
		}
		body, err := plan()
		if err != nil {
			return err
		}
		err = c.Patch(ctx, obj, mergePatch(obj.GetResourceVersion(), body))
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) || attempt == conflictAttempts {
			return writeErr(what, err)
		}
	}
}

// writeErr words a failed write: a conflict means the object changed between the read and the write
// (the patch carries the resourceVersion read), so the decision made on it may no longer hold.
func writeErr(what string, err error) error {
	if apierrors.IsConflict(err) {
		return fmt.Errorf("%s: the object kept changing while it was read and written, nothing was written; run the command again: %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// since is the elapsed time for the confirmation lines, to a tenth of a second.
func (e *env) since(start time.Time) time.Duration {
	return e.now().Sub(start).Round(100 * time.Millisecond)
}

// mergePatch is a JSON merge patch of body that also sets metadata.resourceVersion to the version
// read: the API server refuses it with a conflict if the object changed since, so a decision taken
// on what was read (paused or not, annotated or not, the node's taints) is never applied to a
// different state.
func mergePatch(resourceVersion string, body map[string]any) client.Patch {
	meta, _ := body["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		body["metadata"] = meta
	}
	meta["resourceVersion"] = resourceVersion
	raw, err := json.Marshal(body)
	if err != nil {
		panic(err) // maps of strings, bools, nil and slices of taints always marshal
	}
	return client.RawPatch(types.MergePatchType, raw)
}

func printf(w io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(w, format, args...)
}
