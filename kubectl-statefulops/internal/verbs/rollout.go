package verbs

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

const rolloutKind = "phasedrollout"

// underWay are the phases of a rollout in progress, the ones promote and abort act on (a promote or
// an abort set in any other phase waits on the object for the next rollout, which this command could
// not confirm).
var underWay = []rolloutv1alpha1.PhasedRolloutPhase{
	rolloutv1alpha1.PhaseRolling, rolloutv1alpha1.PhaseVerifying, rolloutv1alpha1.PhasePaused, rolloutv1alpha1.PhaseFailed,
}

func newRolloutCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Pause, resume, promote or abort a PhasedRollout (sts.plus/v1alpha1, short name pr)",
		Long: "Steer a PhasedRollout under way through the controls its API offers (docs/rollout.md,\n" +
			"\"Pause, promote and abort\"): spec.paused, the annotations sts.plus/promote and sts.plus/abort.\n" +
			"Each subcommand waits until the rollout-operator's status shows the effect.",
	}
	cmd.AddCommand(newPauseCommand(e), newResumeCommand(e), newPromoteCommand(e), newAbortCommand(e))
	return cmd
}

func newPauseCommand(e *env) *cobra.Command {
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "pause NAME",
		Short: "Hold the rollout's partition where it is (spec.paused: true)",
		Long: "Set spec.paused: true. The partition stays where it is, no check runs, and the step's progress\n" +
			"is kept for resume. Waits until the operator has seen the edit: phase Paused for a rollout under\n" +
			"way; a PhasedRollout paused while idle stays Updated and holds the next revision at\n" +
			"partition = replicas until resumed.",
		Example: "  kubectl statefulops rollout pause web -n shop",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.rollout(cmd.Context(), args[0], w, pauseAction)
		},
	}
	w.add(cmd, "the operator shows the rollout paused")
	return cmd
}

func newResumeCommand(e *env) *cobra.Command {
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "resume NAME",
		Short: "Resume a paused or aborted rollout (spec.paused: false, sts.plus/abort removed)",
		Long: "Set spec.paused: false and remove the annotation sts.plus/abort, whichever is set.\n\n" +
			"A paused rollout continues its step where it stopped (Event Resumed).\n" +
			"An aborted rollout: removing sts.plus/abort is also how the abort is undone after a revert, so\n" +
			"what resume does depends on the StatefulSet's template. If you set the template back first\n" +
			"(kubectl rollout undo statefulset/NAME), the operator holds the partition while the pods above it\n" +
			"return to the current revision (phase Updated, Event WaitForPodsToReturn). If you did not, the\n" +
			"rollout continues from where it was stopped, with its checks (Event Resumed).\n" +
			"Waits until the phase is neither Paused nor Aborted.",
		Example: "  # continue a paused rollout\n  kubectl statefulops rollout resume web\n\n" +
			"  # go back after an abort: revert the template, then resume\n" +
			"  kubectl rollout undo statefulset/web && kubectl statefulops rollout resume web",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.rollout(cmd.Context(), args[0], w, resumeAction)
		},
	}
	w.add(cmd, "the operator shows the rollout going again")
	return cmd
}

func newPromoteCommand(e *env) *cobra.Command {
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "promote NAME",
		Short: "Pass the current step once, skipping its remaining checks (annotation sts.plus/promote)",
		Long: "Annotate sts.plus/promote. The operator passes the current step once, skipping what remains of\n" +
			"its initial delay, period and passes, moves the partition by one and removes the annotation. It\n" +
			"never skips the wait for the rolled pod to be updated and Ready. A Failed step is retried and\n" +
			"passed. Refused unless a rollout is under way (Rolling, Verifying or Failed). Waits until the\n" +
			"operator recorded this promotion (status.promotion) and removed the annotation.",
		Example: "  kubectl statefulops rollout promote web -n shop --timeout 5m",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.rollout(cmd.Context(), args[0], w, promoteAction)
		},
	}
	w.add(cmd, "the operator passed the step")
	return cmd
}

func newAbortCommand(e *env) *cobra.Command {
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "abort NAME",
		Short: "Stop the rollout where it is (annotation sts.plus/abort)",
		Long: "Annotate sts.plus/abort. The operator stops the rollout and keeps the partition: pods already\n" +
			"rolled stay on the new revision, none is rolled back. To go back, set the StatefulSet's template\n" +
			"back, then `kubectl statefulops rollout resume NAME`. Refused unless a rollout is under way.\n" +
			"Waits for phase Aborted.",
		Example: "  kubectl statefulops rollout abort web -n shop",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.rollout(cmd.Context(), args[0], w, abortAction)
		},
	}
	w.add(cmd, "the operator shows the rollout aborted")
	return cmd
}

// rolloutAction is one control: plan checks the state read and returns the patch body and what to
// wait for; report words the outcome.
type rolloutAction struct {
	name string
	plan func(pr *rolloutv1alpha1.PhasedRollout, value string) (map[string]any, rolloutWait, error)
}

// rolloutWait tells when the operator shows the effect of the write, on the object read again.
// gen is the generation the write produced: the operator has seen a spec edit once
// status.observedGeneration reaches it.
type rolloutWait func(pr *rolloutv1alpha1.PhasedRollout, gen int64) bool

func (e *env) rollout(ctx context.Context, name string, w waitFlags, a rolloutAction) error {
	cs, err := e.connect()
	if err != nil {
		return err
	}
	c := cs.Client
	pr := &rolloutv1alpha1.PhasedRollout{}
	pr.Namespace, pr.Name = cs.Namespace, name
	start := e.now()
	value := "kubectl-statefulops " + start.UTC().Format("2006-01-02T15:04:05.000Z")
	var done rolloutWait
	err = patchFresh(ctx, c, rolloutKind, fmt.Sprintf("%s %s/%s", a.name, rolloutKind, name), pr, func() (body map[string]any, err error) {
		body, done, err = a.plan(pr, value)
		return body, err
	})
	if err != nil {
		return err
	}
	gen := pr.Generation      // the patch's response: the generation of the edit
	promoted := pr.DeepCopy() // the patch's response: the step a promote is for (the operator acts after it)
	out := e.streams.Out
	if !w.wait {
		printf(out, "%s/%s: %s requested (not waiting for the operator)\n", rolloutKind, name, a.name)
		return nil
	}
	err = e.waitFor(ctx, c, pr, w.timeout, func() (bool, string, error) {
		return done(pr, gen), describeRollout(pr), nil
	})
	if err != nil {
		return err
	}
	target, partition := e.partition(ctx, c, pr)
	elapsed := e.since(start)
	switch a.name {
	case "pause":
		if pr.Status.Phase == rolloutv1alpha1.PhasePaused {
			printf(out, "%s/%s paused after %s: phase Paused, partition of statefulset/%s held at %s\n", rolloutKind, name, elapsed, target, partition)
		} else {
			printf(out, "%s/%s paused after %s while not rolling (phase %s): a new revision is held at partition = replicas until resumed\n", rolloutKind, name, elapsed, pr.Status.Phase)
		}
	case "resume":
		printf(out, "%s/%s resumed after %s: %s, partition of statefulset/%s at %s\n", rolloutKind, name, elapsed, describeRollout(pr), target, partition)
	case "promote":
		passed := "the step"
		if rec := pr.Status.Promotion; rec != nil {
			passed = fmt.Sprintf("the step at partition %d", rec.Partition)
		} else if stepFrom, ok := stepPartition(promoted); ok {
			passed = fmt.Sprintf("the step at partition %d", stepFrom)
		}
		printf(out, "%s/%s promoted after %s: %s passed, partition of statefulset/%s now %s, %s\n",
			rolloutKind, name, elapsed, passed, target, partition, describeRollout(pr))
	case "abort":
		printf(out, "%s/%s aborted after %s: partition of statefulset/%s kept at %s, pods already rolled stay on the new revision\n", rolloutKind, name, elapsed, target, partition)
		printf(out, "to go back: kubectl rollout undo statefulset/%s, then kubectl statefulops rollout resume %s\n", target, name)
	}
	return nil
}

var pauseAction = rolloutAction{name: "pause", plan: func(pr *rolloutv1alpha1.PhasedRollout, _ string) (map[string]any, rolloutWait, error) {
	if pr.Spec.Paused {
		return nil, nil, fmt.Errorf("%s/%s is already paused (spec.paused: true, phase %s)", rolloutKind, pr.Name, phaseOf(pr))
	}
	// A rollout under way shows Paused once the operator has seen the edit; an idle one keeps its
	// phase (Updated).
	return map[string]any{"spec": map[string]any{"paused": true}}, func(pr *rolloutv1alpha1.PhasedRollout, gen int64) bool {
		return pr.Status.ObservedGeneration >= gen && !slices.Contains([]rolloutv1alpha1.PhasedRolloutPhase{
			rolloutv1alpha1.PhaseRolling, rolloutv1alpha1.PhaseVerifying, rolloutv1alpha1.PhaseFailed}, pr.Status.Phase)
	}, nil
}}

var resumeAction = rolloutAction{name: "resume", plan: func(pr *rolloutv1alpha1.PhasedRollout, _ string) (map[string]any, rolloutWait, error) {
	_, aborted := pr.Annotations[rolloutv1alpha1.AbortAnnotation]
	if !pr.Spec.Paused && !aborted {
		return nil, nil, fmt.Errorf("%s/%s is neither paused nor aborted (phase %s): nothing to resume", rolloutKind, pr.Name, phaseOf(pr))
	}
	body := map[string]any{}
	if pr.Spec.Paused {
		body["spec"] = map[string]any{"paused": false}
	}
	if aborted {
		body["metadata"] = map[string]any{"annotations": map[string]any{rolloutv1alpha1.AbortAnnotation: nil}}
	}
	// Removing the annotation does not change the generation: the phase leaving Aborted is the sign.
	return body, func(pr *rolloutv1alpha1.PhasedRollout, gen int64) bool {
		return pr.Status.ObservedGeneration >= gen && pr.Status.Phase != rolloutv1alpha1.PhasePaused && pr.Status.Phase != rolloutv1alpha1.PhaseAborted
	}, nil
}}

var promoteAction = rolloutAction{name: "promote", plan: func(pr *rolloutv1alpha1.PhasedRollout, value string) (map[string]any, rolloutWait, error) {
	if v, ok := pr.Annotations[rolloutv1alpha1.PromoteAnnotation]; ok {
		return nil, nil, fmt.Errorf("%s/%s already has a promote the operator has not acted on yet (%s=%q)", rolloutKind, pr.Name, rolloutv1alpha1.PromoteAnnotation, v)
	}
	if _, ok := pr.Annotations[rolloutv1alpha1.AbortAnnotation]; ok || pr.Spec.Paused {
		return nil, nil, fmt.Errorf("%s/%s is %s: a promote would wait until it is resumed (kubectl statefulops rollout resume %s)", rolloutKind, pr.Name, heldBy(pr), pr.Name)
	}
	if pr.Spec.AnalysisOnly {
		return nil, nil, fmt.Errorf("%s/%s is a dry run (spec.analysisOnly): the operator does not act on a promote until analysisOnly is false", rolloutKind, pr.Name)
	}
	if !slices.Contains(underWay, pr.Status.Phase) {
		return nil, nil, fmt.Errorf("%s/%s has no rollout under way (phase %s): nothing to promote", rolloutKind, pr.Name, phaseOf(pr))
	}
	from, stepping := stepPartition(pr)
	return map[string]any{"metadata": map[string]any{"annotations": map[string]any{rolloutv1alpha1.PromoteAnnotation: value}}},
		func(pr *rolloutv1alpha1.PhasedRollout, _ int64) bool {
			// The operator records the promotion (its value) before it moves the partition, removes the
			// annotation after, and drops the record in its next status write: a poll can miss the moment
			// both show. Once the annotation is gone, the record of this value or the step's partition
			// moved below the promoted step's (or the rollout over) says the step was passed.
			if _, pending := pr.Annotations[rolloutv1alpha1.PromoteAnnotation]; pending {
				return false
			}
			if rec := pr.Status.Promotion; rec != nil && rec.Value == value {
				return true
			}
			now, ok := stepPartition(pr)
			return pr.Status.Phase == rolloutv1alpha1.PhaseUpdated || (stepping && ok && now < from)
		}, nil
}}

var abortAction = rolloutAction{name: "abort", plan: func(pr *rolloutv1alpha1.PhasedRollout, _ string) (map[string]any, rolloutWait, error) {
	if v, ok := pr.Annotations[rolloutv1alpha1.AbortAnnotation]; ok {
		return nil, nil, fmt.Errorf("%s/%s is already aborted (%s=%q, phase %s)", rolloutKind, pr.Name, rolloutv1alpha1.AbortAnnotation, v, phaseOf(pr))
	}
	if !slices.Contains(underWay, pr.Status.Phase) {
		return nil, nil, fmt.Errorf("%s/%s has no rollout under way (phase %s): nothing to abort (an abort set now would stop the next rollout at its first step: kubectl annotate pr %s %s=true)",
			rolloutKind, pr.Name, phaseOf(pr), pr.Name, rolloutv1alpha1.AbortAnnotation)
	}
	return map[string]any{"metadata": map[string]any{"annotations": map[string]any{rolloutv1alpha1.AbortAnnotation: "true"}}},
		func(pr *rolloutv1alpha1.PhasedRollout, _ int64) bool {
			return pr.Status.Phase == rolloutv1alpha1.PhaseAborted
		}, nil
}}

func heldBy(pr *rolloutv1alpha1.PhasedRollout) string {
	if _, ok := pr.Annotations[rolloutv1alpha1.AbortAnnotation]; ok {
		return "aborted"
	}
	return "paused"
}

func phaseOf(pr *rolloutv1alpha1.PhasedRollout) string {
	if pr.Status.Phase == "" {
		return "not reported yet"
	}
	return string(pr.Status.Phase)
}

// describeRollout is the phase and the step, as the confirmation and the timeout message give them.
func describeRollout(pr *rolloutv1alpha1.PhasedRollout) string {
	parts := []string{"phase " + phaseOf(pr)}
	if s := pr.Status.RollingPodStatus; s != nil && s.Status != "" {
		step := "step " + string(s.Status)
		if s.Pod != "" {
			step += " at pod " + s.Pod
		}
		parts = append(parts, step)
	}
	return strings.Join(parts, ", ")
}

// partition reads the partition of the StatefulSet the rollout is on ("unknown" when it cannot be
// read: the confirmation comes from the PhasedRollout, the partition only illustrates it).
func (e *env) partition(ctx context.Context, c client.Client, pr *rolloutv1alpha1.PhasedRollout) (string, string) {
	target := pr.Spec.TargetRef
	if pr.Status.ActiveTarget != "" {
		target = pr.Status.ActiveTarget
	}
	if target == "" && len(pr.Spec.TargetRefs) > 0 {
		target = pr.Spec.TargetRefs[0]
	}
	sts := &appsv1.StatefulSet{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: pr.Namespace, Name: target}, sts); err != nil {
		return target, "unknown"
	}
	if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		return target, fmt.Sprint(*ru.Partition)
	}
	return target, "0"
}

// stepPartition is the partition of the step under way, from the status (false when no step is).
func stepPartition(pr *rolloutv1alpha1.PhasedRollout) (int32, bool) {
	if st := pr.Status.RollingPodStatus; st != nil && st.Partition != nil {
		return *st.Partition, true
	}
	return 0, false
}
