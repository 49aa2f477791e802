package verbs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

const singletonKind = "statefulsingleton"

// outOfService is the taint the documented fencing path sets: kube-controller-manager then deletes
// the node's terminating pods and detaches their volumes, and the singleton-operator counts the node
// as having confirmed the stop.
var outOfService = corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}

func newSingletonCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "singleton",
		Short: "Act on a StatefulSingleton (apps.openshift.statefulsingleton.com/v1, short name sss)",
	}
	cmd.AddCommand(newFenceReleaseCommand(e))
	return cmd
}

func newFenceReleaseCommand(e *env) *cobra.Command {
	var w waitFlags
	var yes bool
	cmd := &cobra.Command{
		Use:   "fence-release NAME",
		Short: "Confirm that the node a singleton waits on is down, so its held pod is released",
		Long: "A StatefulSingleton never releases its next pod while the previous one may still run: when that\n" +
			"pod is stuck Terminating on a NotReady node, or vanished from one (condition FencingRequired),\n" +
			"its stop was never confirmed and the new pod stays held (docs/singleton.md, Troubleshooting).\n" +
			"This command finds that node, refuses if it is Ready, warns, asks you to type the node's name\n" +
			"(or --yes), taints it node.kubernetes.io/out-of-service=nodeshutdown:NoExecute, and waits until\n" +
			"the singleton's status shows the held pod released (a new active pod and epoch).\n\n" +
			"Only do this when the machine is really down: if the old process still runs there, the taint\n" +
			"lets a second instance start beside it. Remove the taint once the node is back and clean.",
		Example: "  kubectl statefulops singleton fence-release billing -n jobs\n" +
			"  kubectl statefulops singleton fence-release billing -n jobs --yes   # no prompt (scripts)",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.fenceRelease(cmd.Context(), args[0], yes, w)
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask: you confirm the node is down")
	w.add(cmd, "the held pod is released")
	return cmd
}

// fenceTarget is what a singleton waits on: the node that never confirmed the stop of a pod (pod,
// its name or a description, and podUID).
type fenceTarget struct {
	node, pod, why string
	podUID         string
}

// findFence names the NotReady node the singleton waits on, or says why it waits on none.
func findFence(ctx context.Context, c client.Client, ss *singletonv1.StatefulSingleton) (*fenceTarget, error) {
	if f := meta.FindStatusCondition(ss.Status.Conditions, singletonv1.ConditionFencingRequired); f != nil && f.Status == metav1.ConditionTrue {
		// A Wrapper pod released on its predecessor's exit is already the recorded active pod; the
		// predecessor that vanished, and its node, are in its start-on-exit annotation.
		if ss.Status.ActivePod != "" {
			held := &corev1.Pod{}
			err := c.Get(ctx, client.ObjectKey{Namespace: ss.Namespace, Name: ss.Status.ActivePod}, held)
			if err != nil && !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("reading pod %s: %w", ss.Status.ActivePod, err)
			}
			if cond, ok := singletonv1.PodStartOnExit(held); err == nil && string(held.UID) == ss.Status.ActivePodUID && ok {
				return &fenceTarget{node: cond.Node, pod: "of UID " + string(cond.PodUID), podUID: string(cond.PodUID), why: f.Message}, nil
			}
		}
		if ss.Status.ActivePodNode == "" {
			return nil, fmt.Errorf("%s/%s requires fencing but its status names no node (status.activePodNode): %s", singletonKind, ss.Name, f.Message)
		}
		return &fenceTarget{node: ss.Status.ActivePodNode, pod: ss.Status.ActivePod, podUID: ss.Status.ActivePodUID, why: f.Message}, nil
	}
	if h := ss.Status.Handover; h != nil {
		pod := &corev1.Pod{}
		err := c.Get(ctx, client.ObjectKey{Namespace: ss.Namespace, Name: h.WaitingFor}, pod)
		if apierrors.IsNotFound(err) || err == nil && h.WaitingForUID != "" && string(pod.UID) != h.WaitingForUID {
			return nil, fmt.Errorf("%s/%s waits for pod %s, which is gone: the operator is about to release the next pod (look again with kubectl statefulops status)", singletonKind, ss.Name, h.WaitingFor)
		} else if err != nil {
			return nil, fmt.Errorf("reading pod %s: %w", h.WaitingFor, err)
		}
		if pod.Spec.NodeName == "" {
			return nil, fmt.Errorf("%s/%s waits for pod %s, which is on no node: nothing to fence", singletonKind, ss.Name, pod.Name)
		}
		return &fenceTarget{node: pod.Spec.NodeName, pod: pod.Name, podUID: string(pod.UID),
			why: fmt.Sprintf("pod %s is terminating since %s on node %s", pod.Name, h.TerminatingSince.UTC().Format("2006-01-02T15:04:05Z"), pod.Spec.NodeName)}, nil
	}
	return nil, fmt.Errorf("%s/%s is not waiting on a node (phase %s%s): nothing to fence", singletonKind, ss.Name, orNone(string(ss.Status.Phase)), messageSuffix(ss.Status.Message))
}

func messageSuffix(m string) string {
	if m == "" {
		return ""
	}
	return ": " + m
}

func (e *env) fenceRelease(ctx context.Context, name string, yes bool, w waitFlags) error {
	cs, err := e.connect()
	if err != nil {
		return err
	}
	c := cs.Client
	ss := &singletonv1.StatefulSingleton{}
	if err := get(ctx, c, singletonKind, client.ObjectKey{Namespace: cs.Namespace, Name: name}, ss); err != nil {
		return err
	}
	fence, err := findFence(ctx, c, ss)
	if err != nil {
		return err
	}
	node := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: fence.node}, node); apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s is gone: the operator counts a deleted node as fenced, nothing to taint", fence.node)
	} else if err != nil {
		return fmt.Errorf("reading node %s: %w", fence.node, err)
	}
	if opsutil.NodeReady(node) {
		return fmt.Errorf("node %s is Ready: its kubelet confirms the stop of pod %s by itself; refusing to taint a running node", node.Name, orNone(fence.pod))
	}
	for _, t := range node.Spec.Taints {
		if t.Key == outOfService.Key {
			return fmt.Errorf("node %s already carries the taint %s: the operator counts it as fenced (look at the singleton with kubectl statefulops status)", node.Name, t.ToString())
		}
	}

	errOut := e.streams.ErrOut
	printf(errOut, "%s/%s waits on node %s, which is not Ready: %s\n", singletonKind, name, node.Name, fence.why)
	printf(errOut, "WARNING: tainting node %s %s tells the cluster its machine is shut down.\n", node.Name, outOfService.ToString())
	printf(errOut, "If pod %s's process still runs there, the singleton's next pod starts beside it and two\n", fence.pod)
	printf(errOut, "instances run at once. Confirm that the machine is powered off or cut off from its storage.\n")
	if !yes {
		printf(errOut, "Type the node's name to taint it: ")
		line, err := bufio.NewReader(e.streams.In).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) || strings.TrimSpace(line) == "" {
			return errors.New("no confirmation read (type the node's name, or use --yes): nothing was changed")
		}
		if strings.TrimSpace(line) != node.Name {
			return fmt.Errorf("confirmation %q is not the node's name %q: nothing was changed", strings.TrimSpace(line), node.Name)
		}
	}

	start := e.now()
	err = patchFresh(ctx, c, "node", "tainting node "+node.Name, node, func() (map[string]any, error) {
		// Read again for the write: the same refusals hold on the state the taint is added to.
		if opsutil.NodeReady(node) {
			return nil, fmt.Errorf("node %s turned Ready: its kubelet confirms the stop by itself; nothing was changed", node.Name)
		}
		taints := append([]corev1.Taint{}, node.Spec.Taints...)
		for _, t := range taints {
			if t.Key == outOfService.Key {
				return nil, fmt.Errorf("node %s was tainted %s meanwhile; nothing was changed", node.Name, t.ToString())
			}
		}
		taints = append(taints, corev1.Taint{Key: outOfService.Key, Value: outOfService.Value, Effect: outOfService.Effect, TimeAdded: &metav1.Time{Time: start}})
		return map[string]any{"spec": map[string]any{"taints": taints}}, nil
	})
	if err != nil {
		return err
	}
	out := e.streams.Out
	printf(out, "node/%s tainted %s\n", node.Name, outOfService.ToString())
	if !w.wait {
		printf(out, "%s/%s: not waiting for the release\n", singletonKind, name)
		return nil
	}
	err = e.waitFor(ctx, c, ss, w.timeout, func() (bool, string, error) {
		// Released: a pod other than the one waited on is active, and nothing is pending (a pod
		// released on its predecessor's exit is recorded active before, but the phase is Running only
		// once its release is complete).
		released := ss.Status.Phase == singletonv1.PhaseRunning && ss.Status.ActivePod != "" && ss.Status.ActivePodUID != fence.podUID &&
			!meta.IsStatusConditionTrue(ss.Status.Conditions, singletonv1.ConditionFencingRequired)
		return released, fmt.Sprintf("phase %s, active pod %s%s", orNone(string(ss.Status.Phase)), orNone(ss.Status.ActivePod), messageSuffix(ss.Status.Message)), nil
	})
	if err != nil {
		return err
	}
	printf(out, "%s/%s: pod %s released after %s (epoch %d, phase %s); it waited on pod %s on node %s\n", singletonKind, name, ss.Status.ActivePod, e.since(start), ss.Status.Epoch, ss.Status.Phase, orNone(fence.pod), node.Name)
	printf(out, "once node %s is back and clean: kubectl taint node %s %s-\n", node.Name, node.Name, outOfService.Key)
	return nil
}
