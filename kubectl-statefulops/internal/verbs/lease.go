package verbs

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

const lockKind = "statefulsetlock"

func newLeaseCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lease",
		Short: "Act on a StatefulSetLock (app.anukkrit.me/v1, short name ssl)",
	}
	cmd.AddCommand(newSwitchoverCommand(e))
	return cmd
}

func newSwitchoverCommand(e *env) *cobra.Command {
	var w waitFlags
	var to string
	cmd := &cobra.Command{
		Use:   "switchover NAME --to POD",
		Short: "Move the writer role to another Ready pod (planned switchover)",
		Long: "Annotate the StatefulSetLock app.anukkrit.me/switchover-to=POD (docs/lease.md, \"Planned\n" +
			"switchover\"). The lease-operator demotes the writer, then promotes POD, and removes the\n" +
			"annotation. POD must be a Ready, not terminating pod of the lock's StatefulSet on a Ready node.\n" +
			"Waits until status.writerPod is POD and prints the old and new writer, the fencing epoch\n" +
			"(status.leaseTransitions) and how long the move took.",
		Example: "  # move the writer off db-0 before draining its node\n  kubectl statefulops lease switchover db-lock --to db-2 -n shop",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.switchover(cmd.Context(), args[0], to, w)
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the pod of the lock's StatefulSet to make the writer (required)")
	_ = cmd.MarkFlagRequired("to")
	w.add(cmd, "status.writerPod names the pod")
	return cmd
}

func (e *env) switchover(ctx context.Context, name, to string, w waitFlags) error {
	if to == "" {
		return errors.New("--to POD is required: the pod to make the writer")
	}
	cs, err := e.connect()
	if err != nil {
		return err
	}
	c, ns := cs.Client, cs.Namespace
	lock := &leasev1.StatefulSetLock{}
	if err := get(ctx, c, lockKind, client.ObjectKey{Namespace: ns, Name: name}, lock); err != nil {
		return err
	}
	pod := &corev1.Pod{}
	if err := get(ctx, c, "pod", client.ObjectKey{Namespace: ns, Name: to}, pod); err != nil {
		return err
	}
	if err := switchoverTarget(ctx, c, lock, pod); err != nil {
		return fmt.Errorf("%s/%s: cannot switch over to pod %s: %w", lockKind, name, to, err)
	}
	var oldWriter string
	var oldEpoch int32
	start := e.now()
	err = patchFresh(ctx, c, lockKind, fmt.Sprintf("switchover of %s/%s", lockKind, name), lock, func() (map[string]any, error) {
		if lock.Status.WriterPod == to {
			return nil, fmt.Errorf("%s/%s: pod %s is already the writer (epoch %d)", lockKind, name, to, lock.Status.LeaseTransitions)
		}
		if pending, ok := lock.Annotations[leasev1.SwitchoverAnnotation]; ok {
			return nil, fmt.Errorf("%s/%s: a switchover to %q is already pending (%s); the operator removes the annotation once it is done", lockKind, name, pending, leasev1.SwitchoverAnnotation)
		}
		oldWriter, oldEpoch = lock.Status.WriterPod, lock.Status.LeaseTransitions
		return map[string]any{"metadata": map[string]any{"annotations": map[string]any{leasev1.SwitchoverAnnotation: to}}}, nil
	})
	if err != nil {
		return err
	}
	out := e.streams.Out
	if !w.wait {
		printf(out, "%s/%s: switchover to %s requested (not waiting for the operator)\n", lockKind, name, to)
		return nil
	}
	err = e.waitFor(ctx, c, lock, w.timeout, func() (bool, string, error) {
		seen := fmt.Sprintf("writer %s, epoch %d", orNone(lock.Status.WriterPod), lock.Status.LeaseTransitions)
		if _, pending := lock.Annotations[leasev1.SwitchoverAnnotation]; pending {
			seen += ", annotation " + leasev1.SwitchoverAnnotation + " still set"
		}
		if r := meta.FindStatusCondition(lock.Status.Conditions, leasev1.ConditionReconciling); r != nil && r.Reason == leasev1.ReasonSwitchoverPending {
			seen += ", " + r.Message
		}
		return lock.Status.WriterPod == to && lock.Status.WriterPodUID == string(pod.UID), seen, nil
	})
	if err != nil {
		return err
	}
	printf(out, "%s/%s: writer %s → %s after %s\n", lockKind, name, orNone(oldWriter), to, e.since(start))
	printf(out, "epoch %d → %d (pod annotation %s), reason %s\n", oldEpoch, lock.Status.LeaseTransitions, leasev1.WriterEpochAnnotation, lock.Status.LastFailoverReason)
	return nil
}

// switchoverTarget says why pod cannot take the writer role: the operator would leave the annotation
// waiting for it, and a pod of another StatefulSet would never be elected.
func switchoverTarget(ctx context.Context, c client.Client, lock *leasev1.StatefulSetLock, pod *corev1.Pod) error {
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "StatefulSet" || owner.Name != lock.Spec.StatefulSetName {
		return fmt.Errorf("it is not a pod of statefulset/%s, the lock's StatefulSet", lock.Spec.StatefulSetName)
	}
	if pod.DeletionTimestamp != nil {
		return errors.New("it is terminating")
	}
	if !opsutil.PodReady(pod) {
		return errors.New("it is not Ready")
	}
	node := &corev1.Node{}
	if pod.Spec.NodeName == "" {
		return errors.New("it is not scheduled")
	}
	if err := c.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, node); err != nil {
		return fmt.Errorf("reading its node %s: %w", pod.Spec.NodeName, err)
	}
	if !opsutil.NodeReady(node) {
		return fmt.Errorf("its node %s is not Ready", node.Name)
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
