package verbs

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
)

const clusterKind = "statefulcluster"

func newClusterCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Act on a StatefulCluster (enge.me/v1alpha1, short name stc)",
	}
	cmd.AddCommand(newRetireCommand(e))
	return cmd
}

func newRetireCommand(e *env) *cobra.Command {
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "retire NAME POD",
		Short: "Retire one identity of a StatefulCluster: its pod is deleted and replaced by a new identity",
		Long: "Delete POD, a member of the StatefulCluster NAME, gracefully (never forced), with a UID\n" +
			"precondition so that only that pod instance is deleted. A StatefulCluster never reuses an identity\n" +
			"(docs/cluster.md): the operator records the pod in its ledger (status.identities, reason Deleted),\n" +
			"its claims follow persistentVolumeClaimRetentionPolicy.whenReplaced, and a pod of a new identity\n" +
			"takes its place. Waits until the ledger shows the identity retired and names the replacement.",
		Example: "  kubectl statefulops cluster retire coder coder-2 -n dev",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.retire(cmd.Context(), args[0], args[1], w)
		},
	}
	w.add(cmd, "the ledger shows the identity retired and its replacement exists")
	return cmd
}

func (e *env) retire(ctx context.Context, name, podName string, w waitFlags) error {
	cs, err := e.connect()
	if err != nil {
		return err
	}
	c, ns := cs.Client, cs.Namespace
	sc := &clusterv1alpha1.StatefulCluster{}
	if err := get(ctx, c, clusterKind, client.ObjectKey{Namespace: ns, Name: name}, sc); err != nil {
		return err
	}
	pod := &corev1.Pod{}
	if err := get(ctx, c, "pod", client.ObjectKey{Namespace: ns, Name: podName}, pod); err != nil {
		return err
	}
	if owner := metav1.GetControllerOf(pod); owner == nil || owner.UID != sc.UID {
		by := "no controller"
		if owner != nil {
			by = "controlled by " + strings.ToLower(owner.Kind) + "/" + owner.Name
		}
		return fmt.Errorf("pod %s is not a member of %s/%s (%s): refusing to delete it", podName, clusterKind, name, by)
	}
	if pod.DeletionTimestamp != nil {
		return fmt.Errorf("pod %s is already being deleted: its identity is being retired", podName)
	}
	before, err := members(ctx, c, sc)
	if err != nil {
		return err
	}
	start := e.now()
	if err := c.Delete(ctx, pod, client.Preconditions{UID: ptr.To(pod.UID)}); err != nil {
		return writeErr("deleting pod "+podName, err)
	}
	out := e.streams.Out
	if !w.wait {
		printf(out, "pod/%s deleted: %s/%s retires its identity (not waiting for the operator)\n", podName, clusterKind, name)
		return nil
	}
	// Without a ledger (identityHistoryLimit 0) the retirement shows only as the pod gone.
	ledger := ptr.Deref(sc.Spec.IdentityHistoryLimit, 20) > 0
	wantReplacement := int(ptr.Deref(sc.Spec.Replicas, 1)) >= len(before)
	var record *clusterv1alpha1.IdentityRecord
	var replacement string
	err = e.waitFor(ctx, c, sc, w.timeout, func() (bool, string, error) {
		record = nil
		for i := range sc.Status.Identities {
			if r := &sc.Status.Identities[i]; r.Name == podName && r.UID == pod.UID {
				record = r
			}
		}
		now, err := members(ctx, c, sc)
		if err != nil {
			return false, err.Error(), nil
		}
		replacement = ""
		for _, p := range now {
			if !slices.Contains(before, p) {
				replacement = p
			}
		}
		gone := !slices.Contains(now, podName)
		seen := fmt.Sprintf("identity %s %s in status.identities, replacement %s", podName, map[bool]string{true: "recorded", false: "not yet"}[record != nil], orNone(replacement))
		return (record != nil || !ledger && gone) && (replacement != "" || !wantReplacement), seen, nil
	})
	if err != nil {
		return err
	}
	elapsed := e.since(start)
	if record != nil {
		claims := "no claims"
		if len(record.Claims) > 0 {
			claims = "claims " + strings.Join(record.Claims, ", ")
		}
		printf(out, "%s/%s: identity %s retired after %s (reason %s: %s; %s)\n", clusterKind, name, podName, elapsed, record.Reason, record.Message, claims)
	} else {
		printf(out, "%s/%s: identity %s retired after %s (no ledger: spec.identityHistoryLimit is 0)\n", clusterKind, name, podName, elapsed)
	}
	if replacement != "" {
		printf(out, "replacement: pod %s, a new identity (status.nextIdentity %d); %s is never used again\n", replacement, sc.Status.NextIdentity, podName)
	} else {
		printf(out, "no replacement: spec.replicas is %d\n", ptr.Deref(sc.Spec.Replicas, 1))
	}
	return nil
}

// members are the names of the StatefulCluster's live pods: controlled by it (by UID) and not
// terminating, as the operator counts them.
func members(ctx context.Context, c client.Client, sc *clusterv1alpha1.StatefulCluster) ([]string, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(sc.Namespace), client.MatchingLabels{clusterv1alpha1.ClusterNameLabel: sc.Name}); err != nil {
		return nil, fmt.Errorf("listing the pods of %s/%s: %w", clusterKind, sc.Name, err)
	}
	var names []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if owner := metav1.GetControllerOf(p); owner != nil && owner.UID == sc.UID && p.DeletionTimestamp == nil &&
			p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			names = append(names, p.Name)
		}
	}
	return names, nil
}
