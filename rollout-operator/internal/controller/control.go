package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// The user's controls of a rollout under way (issue 18): spec.paused, the sts.plus/promote and
// sts.plus/abort annotations, the dry run of spec.analysisOnly, and the Available condition that
// health tools read.
//
// Promote passes exactly one step, across restarts: the partition is written before the status, so
// the promotion is first recorded in the status (its value and the partition of the step it passes,
// under the status write's optimistic lock) without moving anything; the next reconcile passes that
// step only if the StatefulSet's partition is still the recorded one. An operator that died after
// moving the partition but before writing the status finds the partition moved: the promotion is
// spent, and the annotation is removed (a JSON patch that tests its value, so a new promote set
// meanwhile stays).

// promoteAgain is how soon the reconcile that recorded a promotion runs again to pass the step.
const promoteAgain = 10 * time.Millisecond

// underWay reports whether phase is that of a rollout under way: progressing, or held by spec.paused
// or the abort annotation (the step and the partition are kept).
func underWay(phase rolloutv1alpha1.PhasedRolloutPhase) bool {
	switch phase {
	case rolloutv1alpha1.PhaseRolling, rolloutv1alpha1.PhaseVerifying, rolloutv1alpha1.PhasePaused, rolloutv1alpha1.PhaseAborted:
		return true
	}
	return false
}

// held holds the step at partition when the abort annotation or spec.paused says so (phase Aborted or
// Paused, the partition and the step's progress kept, nothing checked) and reports whether it did; it
// records Aborted, Paused and Resumed on each transition.
func held(s *scope, partition int32) bool {
	pr, was := s.pr, s.orig.Status.Phase
	pod := pr.Status.RollingPodStatus.Pod
	if _, ok := pr.Annotations[rolloutv1alpha1.AbortAnnotation]; ok {
		s.setPhase(rolloutv1alpha1.PhaseAborted, "aborted by the %s annotation at partition %d (pod %s): the partition stays, no pod is rolled back. "+
			"To revert, set the StatefulSet's template back (kubectl rollout undo statefulset/%s, or apply the previous template), then remove the annotation "+
			"(kubectl annotate phasedrollout %s %s-); removing it without a revert resumes the rollout",
			rolloutv1alpha1.AbortAnnotation, partition, pod, s.sts.Name, pr.Name, rolloutv1alpha1.AbortAnnotation)
		if was != rolloutv1alpha1.PhaseAborted {
			s.event(pr, corev1.EventTypeWarning, rolloutv1alpha1.EventAborted, "%s", pr.Status.Message)
		}
		return true
	}
	if pr.Spec.Paused {
		s.setPhase(rolloutv1alpha1.PhasePaused, "paused by spec.paused at partition %d (pod %s): the partition and the step's progress are kept; set spec.paused to false to continue", partition, pod)
		if was != rolloutv1alpha1.PhasePaused {
			s.event(pr, corev1.EventTypeNormal, rolloutv1alpha1.EventPaused, "%s", pr.Status.Message)
		}
		return true
	}
	if was == rolloutv1alpha1.PhasePaused || was == rolloutv1alpha1.PhaseAborted {
		s.event(pr, corev1.EventTypeNormal, rolloutv1alpha1.EventResumed, "resumed at partition %d (pod %s) after phase %s", partition, pod, was)
	}
	return false
}

// promoteStep acts on the promote annotation once the step's pods are ready: it records a new one in
// the status (nothing moves in this reconcile), passes the step it recorded while the partition is
// still that step's, and marks a spent one for removal. It reports whether it decided the reconcile.
func (r *Reconciler) promoteStep(ctx context.Context, s *scope, partition int32) (reconcile.Result, bool, error) {
	pr := s.pr
	v, ok := pr.Annotations[rolloutv1alpha1.PromoteAnnotation]
	if !ok {
		return reconcile.Result{}, false, nil
	}
	if rec := pr.Status.Promotion; rec != nil && rec.Value == v {
		if rec.Partition != partition {
			s.dropPromote = true // spent: the step it passed is over
			return reconcile.Result{}, false, nil
		}
		s.dropPromote = true
		res, err := r.stepPassed(ctx, s, partition, time.Now())
		return res, true, err
	}
	pr.Status.Promotion = &rolloutv1alpha1.PromotionRecord{Value: v, Partition: partition, Time: metav1.NewTime(s.now)}
	s.event(pr, corev1.EventTypeNormal, rolloutv1alpha1.EventPromoted,
		"promoted by the %s annotation: the step at partition %d (pod %s) passes without its remaining initial delay, period and passes", rolloutv1alpha1.PromoteAnnotation, partition, pr.Status.RollingPodStatus.Pod)
	return reconcile.Result{RequeueAfter: promoteAgain}, true, nil
}

// promoteRequested reports whether the PhasedRollout carries the promote annotation (pending or being
// acted on): an Inconclusive step is then released for the promotion to pass it.
func promoteRequested(pr *rolloutv1alpha1.PhasedRollout) bool {
	_, ok := pr.Annotations[rolloutv1alpha1.PromoteAnnotation]
	return ok
}

// promotePending reports whether the PhasedRollout carries a promote annotation not yet acted on (it
// retries a Failed step, which the promotion then passes).
func promotePending(pr *rolloutv1alpha1.PhasedRollout) bool {
	v, ok := pr.Annotations[rolloutv1alpha1.PromoteAnnotation]
	return ok && (pr.Status.Promotion == nil || pr.Status.Promotion.Value != v)
}

// setControlStatus completes the status before it is written: the promotion record goes once its
// annotation is gone, the dry run's once spec.analysisOnly is off, and the Available condition
// follows the StatefulSet's available replicas (left as it was when the StatefulSet was not read).
func setControlStatus(s *scope) {
	pr := s.pr
	if _, ok := pr.Annotations[rolloutv1alpha1.PromoteAnnotation]; !ok {
		pr.Status.Promotion = nil
	}
	if !pr.Spec.AnalysisOnly {
		pr.Status.DryRun = nil
	} else if pr.Status.DryRun != nil && pr.Status.Phase == rolloutv1alpha1.PhaseUpdated && s.sts != nil && s.sts.Status.CurrentRevision != pr.Status.DryRun.Revision {
		// A revision analysed, not rolled: the StatefulSet is not updated.
		meta.SetStatusCondition(&pr.Status.Conditions, metav1.Condition{Type: rolloutv1alpha1.ConditionUpdated, Status: metav1.ConditionFalse,
			Reason: rolloutv1alpha1.ReasonAnalysisOnly, Message: pr.Status.Message, ObservedGeneration: pr.Generation})
	}
	cond := metav1.Condition{Type: rolloutv1alpha1.ConditionAvailable, ObservedGeneration: pr.Generation}
	switch {
	case pr.Status.Phase == rolloutv1alpha1.PhaseErrorSTSNotFound:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, string(rolloutv1alpha1.PhaseErrorSTSNotFound), pr.Status.Message
	case s.sts == nil:
		if c := meta.FindStatusCondition(pr.Status.Conditions, rolloutv1alpha1.ConditionAvailable); c != nil {
			c.ObservedGeneration = pr.Generation
		}
		return
	case len(s.targets) > 0:
		cond.Status, cond.Reason = metav1.ConditionTrue, "AllReplicasAvailable"
		var counts []string
		for _, sts := range s.targets {
			replicas := ptr.Deref(sts.Spec.Replicas, 1)
			if sts.Status.AvailableReplicas < replicas {
				cond.Status, cond.Reason = metav1.ConditionFalse, "ReplicasUnavailable"
			}
			counts = append(counts, fmt.Sprintf("%s %d of %d", sts.Name, sts.Status.AvailableReplicas, replicas))
		}
		cond.Message = "available replicas: " + strings.Join(counts, ", ")
	default:
		avail := s.sts.Status.AvailableReplicas
		cond.Status, cond.Reason = metav1.ConditionTrue, "AllReplicasAvailable"
		if avail < s.replicas {
			cond.Status, cond.Reason = metav1.ConditionFalse, "ReplicasUnavailable"
		}
		cond.Message = fmt.Sprintf("%d of %d replicas of StatefulSet %s are available", avail, s.replicas, s.sts.Name)
	}
	meta.SetStatusCondition(&pr.Status.Conditions, cond)
}

// afterStatus removes a spent promote annotation once the status recording its promotion is written:
// a JSON patch that tests the value first, so a promote the user set meanwhile is kept.
func (r *Reconciler) afterStatus(ctx context.Context, s *scope) {
	pr := s.pr
	v, ok := pr.Annotations[rolloutv1alpha1.PromoteAnnotation]
	rec := pr.Status.Promotion
	if !ok || rec == nil || rec.Value != v {
		return
	}
	st := pr.Status.RollingPodStatus
	if !s.dropPromote && underWay(pr.Status.Phase) && st != nil && ptr.Deref(st.Partition, -1) == rec.Partition {
		return // recorded, the step not passed yet
	}
	path := "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(rolloutv1alpha1.PromoteAnnotation, "~", "~0"), "/", "~1")
	value, _ := json.Marshal(v)
	patch := fmt.Sprintf(`[{"op":"test","path":%q,"value":%s},{"op":"remove","path":%q}]`, path, value, path)
	obj := &rolloutv1alpha1.PhasedRollout{ObjectMeta: metav1.ObjectMeta{Namespace: pr.Namespace, Name: pr.Name}}
	if err := r.Client.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, []byte(patch))); err != nil {
		// The next reconcile tries again (the promotion stays spent meanwhile).
		log.FromContext(ctx).Info("could not remove the promote annotation", "error", err.Error())
	}
}

// dryRun runs the simulated rollout of spec.analysisOnly: the StatefulSet is held where it is (at
// replicas, as when idle and as a new rollout starts, unless a real rollout of this revision was under
// way or failed: then its partition is frozen where it is, never raised, as raising it would roll pods
// back), and a simulated step walks down from there, its checks judging the pod it would roll, with
// WouldAdvance after each passed step and WouldFail when a step uses up maxTries (the dry run stops).
func (r *Reconciler) dryRun(ctx context.Context, s *scope) (reconcile.Result, error) {
	pr, sts, target := s.pr, s.sts, s.sts.Status.UpdateRevision
	partition := s.replicas
	switch {
	case pr.Status.Phase == rolloutv1alpha1.PhaseFailed && pr.Status.UpdateRevision == target:
		partition = 0
		if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
			partition = min(*ru.Partition, s.replicas)
		}
		s.setPhase(rolloutv1alpha1.PhaseFailed, "the rollout of revision %s failed at partition %d (Event RolloutFailed); spec.analysisOnly analyses it from there, the partition stays", target, partition)
	case underWay(pr.Status.Phase) && pr.Status.UpdateRevision == target:
		partition, _, _ = beginStep(s)
		s.setPhase(rolloutv1alpha1.PhasePaused, "spec.analysisOnly freezes the rollout under way at partition %d", partition)
		if s.orig.Status.Phase != rolloutv1alpha1.PhasePaused {
			s.event(pr, corev1.EventTypeNormal, rolloutv1alpha1.EventPaused, "%s", pr.Status.Message)
		}
	default:
		if !partitionHeld(sts, pr, s.replicas) {
			if err := r.applyPartition(ctx, pr, sts, s.replicas, true); err != nil {
				return reconcile.Result{}, err
			}
		}
		pr.Status.UpdateRevision = target
		pr.Status.RollingPodStatus = nil
		s.setPhase(rolloutv1alpha1.PhaseUpdated, "dry run (spec.analysisOnly): revision %s is analysed, not rolled; the partition is held at %d", target, partition)
	}
	d := pr.Status.DryRun
	if d == nil || d.Revision != target {
		if skipsFirstAnalysis(pr, partition, s.replicas) {
			partition-- // as the real rollout would: the first pod rolls unchecked
		}
		d = &rolloutv1alpha1.DryRunStatus{Revision: target, Step: &rolloutv1alpha1.RollingPodStatus{Partition: ptr.To(partition)}}
		pr.Status.DryRun = d
		s.event(pr, corev1.EventTypeNormal, rolloutv1alpha1.EventAnalysisOnly,
			"dry run of revision %s (spec.analysisOnly): every step's checks run from partition %d down, nothing rolls; see status.dryRun and the Events WouldAdvance, WouldFail", target, partition)
	}
	if d.Step == nil || d.WouldAdvance == rolloutv1alpha1.EventWouldFail {
		pr.Status.Message += "; " + d.Message
		return reconcile.Result{}, nil // the dry run ended
	}
	if pr.Spec.Paused {
		pr.Status.Message += "; the dry run is paused (spec.paused)"
		return reconcile.Result{}, nil
	}
	real := pr.Status.RollingPodStatus
	defer func() { pr.Status.RollingPodStatus = real }()
	return r.simulateStep(ctx, s, d)
}

// simulateStep runs one reconcile of the dry run's step d.Step (swapped in as the status's step, so
// the step machine's timers, counters and query run on it).
func (r *Reconciler) simulateStep(ctx context.Context, s *scope, d *rolloutv1alpha1.DryRunStatus) (reconcile.Result, error) {
	pr, st := s.pr, d.Step
	p := ptr.Deref(st.Partition, 0)
	start := int32(0)
	if s.sts.Spec.Ordinals != nil {
		start = s.sts.Spec.Ordinals.Start
	}
	ordinal := start + max(min(p, s.replicas-1), 0)
	st.Pod = fmt.Sprintf("%s-%d", s.sts.Name, ordinal)
	pr.Status.RollingPodStatus = st
	passed, failed, wait := false, "", time.Duration(0)
	progress := "" // what the simulated step waits for, in words
	if usesCheckSet(pr) {
		// Every check of the step, each on its own delay and period, as runChecks runs them.
		_, run := r.evaluateChecks(ctx, s, ordinal, false)
		passed, wait = allChecksPassed(st), max(run.wait, time.Second)
		progress = fmt.Sprintf("checks not passed yet: %s", notPassed(st))
		for _, c := range run.failed {
			failed = fmt.Sprintf("check %q used up maxTries=%d (onFailure %s)", c.name, *c.spec.MaxTries, c.spec.OnFailure)
		}
	} else {
		if wait := checkWait(s, time.Time{}); wait > 0 {
			pr.Status.Message += fmt.Sprintf("; simulated step at partition %d (pod %s): %s", p, st.Pod, st.Status)
			return reconcile.Result{RequeueAfter: wait}, nil
		}
		check := pr.Spec.Check
		recordCheck(pr, r.check(ctx, s, ordinal), time.Now())
		passed, wait = st.ConsecutiveSuccessfulChecks >= max(check.SuccessThreshold, 1), time.Duration(max(check.PeriodSeconds, 1))*time.Second
		progress = fmt.Sprintf("%d of %d passes", st.ConsecutiveSuccessfulChecks, max(check.SuccessThreshold, 1))
		if check.MaxTries != nil && st.TotalChecks >= *check.MaxTries {
			failed = fmt.Sprintf("used up maxTries=%d (onFailure %s)", *check.MaxTries, check.OnFailure)
		}
	}
	switch {
	case passed:
		d.WouldAdvance = rolloutv1alpha1.EventWouldAdvance
		if p == 0 {
			d.Message = fmt.Sprintf("every step passed its checks: the rollout to revision %s would be complete", d.Revision)
			d.Step = nil
		} else {
			d.Message = fmt.Sprintf("the step at partition %d (pod %s) passed its checks: the partition would move to %d", p, st.Pod, p-1)
			d.Step = &rolloutv1alpha1.RollingPodStatus{Partition: ptr.To(p - 1)}
		}
		s.event(pr, corev1.EventTypeNormal, rolloutv1alpha1.EventWouldAdvance, "dry run: %s", d.Message)
	case failed != "":
		d.WouldAdvance = rolloutv1alpha1.EventWouldFail
		d.Message = fmt.Sprintf("the step at partition %d (pod %s) %s: the rollout would stop here", p, st.Pod, failed)
		s.event(pr, corev1.EventTypeWarning, rolloutv1alpha1.EventWouldFail, "dry run: %s", d.Message)
	default:
		pr.Status.Message += fmt.Sprintf("; simulated step at partition %d (pod %s): %s", p, st.Pod, progress)
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	pr.Status.Message += "; " + d.Message
	return reconcile.Result{RequeueAfter: promoteAgain}, nil
}
