package controller

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// The step machine: one rollout step waits for the rolled pod, for every pod, for the initial delay,
// then runs checks until successThreshold passes in a row (the partition moves by one) or maxTries
// (onFailure applies).

// step runs the current rollout step: wait for the rolled pod, for all pods, for the delay, then
// check; move the partition after successThreshold consecutive passes.
func (r *Reconciler) step(ctx context.Context, s *scope) (reconcile.Result, error) {
	partition, ordinal, fresh := beginStep(s)
	if fresh {
		// No streak of an earlier step carries over to a new one.
		r.streaks.drop(s.pr.UID)
	}
	// Abort and pause hold the step; an Inconclusive step waits for a spec change or a promote.
	if held(s, partition) || (holdInconclusive(s) && !promoteRequested(s.pr)) {
		return reconcile.Result{}, nil
	}
	if res, hold, err := r.batchHold(ctx, s, partition); hold {
		return res, err
	}
	ready, err := r.podsReadyForCheck(ctx, s, partition)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !ready {
		return reconcile.Result{RequeueAfter: pollWhileWaiting}, nil
	}
	if s.pr.Status.RollingPodStatus.Status == rolloutv1alpha1.StepWaitForSwitchover && len(s.pr.Spec.Steps) == 0 {
		// The step passed and waits for a StatefulSetLock's writer to move (writer.go): no more checks.
		return r.stepPassed(ctx, s, partition, s.now)
	}
	if res, done, err := r.promoteStep(ctx, s, partition); done {
		return res, err
	}
	if res, hold, err := r.pauseHold(ctx, s, partition); hold {
		return res, err
	}
	if skipsFirstAnalysis(s.pr, partition, s.replicas) {
		// The first pod rolls without a check of the old one; every later step is checked.
		return r.stepPassed(ctx, s, partition, s.now)
	}
	if usesCheckSet(s.pr) {
		return r.runChecks(ctx, s, partition, ordinal)
	}
	if wait := checkWait(s, r.streaks.get(s.pr, rolloutv1alpha1.SeedCheckName).lastCheck); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	return r.runCheck(ctx, s, partition, ordinal)
}

// skipsFirstAnalysis reports whether the step at partition is the first of a rollout (no pod rolled
// yet) and spec.analyzeBeforeFirstPod is false: that step passes without a check.
func skipsFirstAnalysis(pr *rolloutv1alpha1.PhasedRollout, partition, replicas int32) bool {
	return partition >= replicas && replicas > 0 && !ptr.Deref(pr.Spec.AnalyzeBeforeFirstPod, true)
}

// beginStep finds the step of the StatefulSet's partition (a new one, with no passes, when the status
// records another), the pod its checks judge and the phase, and returns the partition, that pod's
// ordinal and whether the step is new.
func beginStep(s *scope) (partition, ordinal int32, fresh bool) {
	pr, sts, replicas := s.pr, s.sts, s.replicas
	partition = stsPartition(sts, replicas)
	st := pr.Status.RollingPodStatus
	if st == nil || st.Partition == nil || *st.Partition != partition {
		// A step belongs to one partition value: a partition the status does not record (the operator
		// stopped between the two writes, or someone else moved it) starts a new step with no passes.
		st = &rolloutv1alpha1.RollingPodStatus{Partition: ptr.To(partition)}
		pr.Status.RollingPodStatus = st
		fresh = true
	}
	start := int32(0)
	if sts.Spec.Ordinals != nil {
		start = sts.Spec.Ordinals.Start
	}
	// The pod the checks judge: the one rolled by the last partition move, or, before the first
	// move, the first one to roll.
	ordinal = start + max(min(partition, replicas-1), 0)
	st.Pod = fmt.Sprintf("%s-%d", sts.Name, ordinal)
	setStepPhase(pr, sts.Name, partition)
	return partition, ordinal, fresh
}

// stsPartition is the StatefulSet's partition, at most replicas (an unset partition is 0).
func stsPartition(sts *appsv1.StatefulSet, replicas int32) int32 {
	if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		return min(*ru.Partition, replicas)
	}
	return 0
}

// setStepPhase sets the phase of the step at partition: Verifying once every pod is released
// (partition 0), Rolling before; the step's status names its pod.
func setStepPhase(pr *rolloutv1alpha1.PhasedRollout, sts string, partition int32) {
	if partition == 0 {
		pr.Status.Phase = rolloutv1alpha1.PhaseVerifying
		pr.Status.Message = fmt.Sprintf("every pod is on revision %s; verifying the last pod %s", pr.Status.UpdateRevision, pr.Status.RollingPodStatus.Pod)
	} else {
		pr.Status.Phase = rolloutv1alpha1.PhaseRolling
		pr.Status.Message = fmt.Sprintf("rolling StatefulSet %s to revision %s: partition %d", sts, pr.Status.UpdateRevision, partition)
	}
}

// podsReadyForCheck reads the StatefulSet's pods from the API server (never the cache: a check must
// not judge a pod that is not there yet) and reports whether the rolled pod runs the update revision
// and every pod is available; while not, the step waits with its analysis reset.
func (r *Reconciler) podsReadyForCheck(ctx context.Context, s *scope, partition int32) (bool, error) {
	pr, st := s.pr, s.pr.Status.RollingPodStatus
	pods, err := r.pods(ctx, s.sts)
	if err != nil {
		return false, err
	}
	minReady := time.Duration(s.sts.Spec.MinReadySeconds) * time.Second
	resetAnalysis := func(state rolloutv1alpha1.RollingPodState) {
		r.streaks.drop(pr.UID) // the pods changed: every check passes anew
		st.Status = state
		st.AnalisysStartTime = nil
		st.ConsecutiveSuccessfulChecks = 0
		resetChecks(st)
	}
	if partition < s.replicas {
		p, ok := pods[st.Pod]
		if !ok || p.Labels[appsv1.ControllerRevisionHashLabelKey] != pr.Status.UpdateRevision || !available(p, minReady, s.now) {
			resetAnalysis(rolloutv1alpha1.StepWaitForPodToBeUpdated)
			return false, nil
		}
	}
	availableCount := int32(0)
	for _, p := range pods {
		if available(p, minReady, s.now) {
			availableCount++
		}
	}
	if availableCount < s.replicas {
		resetAnalysis(rolloutv1alpha1.StepWaitForAllPodsToBeAvailable)
		return false, nil
	}
	return true, nil
}

// checkWait returns how long the step still waits before its next check: the initial delay (which
// starts when the pods are ready), then periodSeconds since the last check (the later of the status's
// and lastCheck, the one this process saw: the status may have missed a write); zero when a check is
// due.
func checkWait(s *scope, lastCheck time.Time) time.Duration {
	check, st := s.pr.Spec.Check, s.pr.Status.RollingPodStatus
	if st.AnalisysStartTime == nil {
		delay := time.Duration(ptr.Deref(check.InitialDelaySeconds, 60)) * time.Second
		st.AnalisysStartTime = ptr.To(metav1.NewTime(ceilSecond(s.now.Add(delay))))
	}
	if wait := st.AnalisysStartTime.Sub(s.now); wait > 0 {
		st.Status = rolloutv1alpha1.StepWaitForInitialDelay
		return wait
	}
	period := time.Duration(max(check.PeriodSeconds, 1)) * time.Second
	if st.LastCheckTime != nil && st.LastCheckTime.After(lastCheck) {
		lastCheck = st.LastCheckTime.Time
	}
	if !lastCheck.IsZero() {
		if wait := lastCheck.Add(period).Sub(s.now); wait > 0 {
			if st.Status != rolloutv1alpha1.StepPrometheusError {
				st.Status = rolloutv1alpha1.StepWaitForChecks
			}
			return wait
		}
	}
	return 0
}

// runCheck runs one check of the current step and acts on its result: the step passes after
// successThreshold passes in a row, fails after maxTries, or checks again after periodSeconds.
func (r *Reconciler) runCheck(ctx context.Context, s *scope, partition, ordinal int32) (reconcile.Result, error) {
	check := s.pr.Spec.Check
	res := r.check(ctx, s, ordinal)
	checkedAt := time.Now()
	st := recordCheck(s.pr, res, checkedAt)
	// The passes in a row this process saw, not the status's count plus one: a lost status write of
	// a failing check must not let the next pass carry on the streak (streak.go).
	st.ConsecutiveSuccessfulChecks = r.streaks.record(s.pr, rolloutv1alpha1.SeedCheckName, res.Verdict == VerdictPass, checkedAt)
	mirrorSeedCheck(st, res, max(check.SuccessThreshold, 1))
	if st.ConsecutiveSuccessfulChecks >= max(check.SuccessThreshold, 1) {
		return r.stepPassed(ctx, s, partition, checkedAt)
	}
	if check.MaxTries != nil && st.TotalChecks >= *check.MaxTries {
		return r.fail(ctx, s, partition)
	}
	return reconcile.Result{RequeueAfter: time.Duration(max(check.PeriodSeconds, 1)) * time.Second}, nil
}

// recordCheck counts a check's result in the step's status and the metrics, and returns the step.
func recordCheck(pr *rolloutv1alpha1.PhasedRollout, res CheckResult, checkedAt time.Time) *rolloutv1alpha1.RollingPodStatus {
	st := pr.Status.RollingPodStatus
	checksTotal.WithLabelValues(pr.Namespace, pr.Name, res.Verdict.String(), rolloutv1alpha1.SeedCheckName).Inc()
	st.LastCheckTime = ptr.To(metav1.NewTime(ceilSecond(checkedAt)))
	st.TotalChecks++
	pr.Status.LastQueryResult = res.Message
	if res.Verdict == VerdictPass {
		st.ConsecutiveSuccessfulChecks++
		st.ConsecutiveFailedChecks = 0
		st.Status = rolloutv1alpha1.StepWaitForChecks
		pr.Status.LastError = ""
		return st
	}
	st.ConsecutiveSuccessfulChecks = 0
	st.ConsecutiveFailedChecks++
	st.TotalFailedChecks++
	st.Status = rolloutv1alpha1.StepWaitForChecks
	if res.Verdict == VerdictError {
		st.Status = rolloutv1alpha1.StepPrometheusError
		pr.Status.LastError = res.Message
		pr.Status.LastQueryResult = "check not evaluated (counts as failed): " + res.Message
	} else {
		pr.Status.LastError = ""
	}
	return st
}

// stepPassed ends a step whose checks passed: the partition moves down by one (a new step starts), or,
// at partition 0, the rollout is complete (phase Updated).
func (r *Reconciler) stepPassed(ctx context.Context, s *scope, partition int32, checkedAt time.Time) (reconcile.Result, error) {
	pr, sts, st := s.pr, s.sts, s.pr.Status.RollingPodStatus
	if wait := startPause(s, partition, checkedAt); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	gateStart := time.Now()
	if partition > 0 && len(pr.Spec.Steps) == 0 {
		// A one-pod step waits here for a lock's writer to move, before it counts as passed, and comes
		// back through step() without checking again; a batch waits in releaseBatch.
		next, err := r.writerGate(ctx, s, partition, partition-1)
		if err != nil || next == partition {
			if next == partition {
				st.Status = rolloutv1alpha1.StepWaitForSwitchover
				pr.Status.Message += "; " + switchoverMessage(pr.Status.Switchover)
			}
			return reconcile.Result{RequeueAfter: switchoverPoll}, err
		}
	}
	stepsTotal.WithLabelValues(pr.Namespace, pr.Name).Inc()
	if st.AnalisysStartTime != nil {
		stepDuration.WithLabelValues(pr.Namespace, pr.Name).Observe(checkedAt.Sub(st.AnalisysStartTime.Time).Seconds())
	}
	if partition == 0 {
		r.streaks.drop(pr.UID) // the rollout is over: its streaks never count again
		pr.Status.Phase = rolloutv1alpha1.PhaseUpdated
		pr.Status.Message = fmt.Sprintf("StatefulSet %s is on revision %s and its last pod passed its checks", sts.Name, pr.Status.UpdateRevision)
		pr.Status.RolloutEndTime = ptr.To(metav1.NewTime(checkedAt))
		pr.Status.RollingPodStatus = nil
		s.event(pr, corev1.EventTypeNormal, rolloutv1alpha1.EventRolloutCompleted, "StatefulSet %s rolled to revision %s; every step passed its checks", sts.Name, pr.Status.UpdateRevision)
		if sts.Status.CurrentRevision == pr.Status.UpdateRevision {
			// Idle again: hold the partition at replicas (otherwise the next event does it).
			return reconcile.Result{}, r.applyPartition(ctx, pr, sts, s.replicas, true)
		}
		return reconcile.Result{RequeueAfter: pollWhileWaiting}, nil
	}
	nextStart := time.Now()
	next, err := r.nextPartition(ctx, s, partition)
	if err != nil {
		return reconcile.Result{}, err
	}
	applyStart := time.Now()
	if err := r.applyPartition(ctx, pr, sts, next, true); err != nil {
		return reconcile.Result{}, err
	}
	// Where a step's overhead goes (docs/performance.md, "rollout step overhead"): the time from the
	// last passing answer to this reconcile's gate, a one-pod step's lock gate (StatefulSetLocks read
	// live), the next partition's decision (a batch's own gate included) and the partition's write.
	log.FromContext(ctx).Info("Moved the partition", "statefulSet", sts.Name, "from", partition, "to", next,
		"sinceCheck", gateStart.Sub(checkedAt), "gate", nextStart.Sub(gateStart), "decide", applyStart.Sub(nextStart), "apply", time.Since(applyStart))
	r.streaks.drop(pr.UID) // the step is over: its streaks never count again
	s.overheadStart = &checkedAt
	start := int32(0)
	if sts.Spec.Ordinals != nil {
		start = sts.Spec.Ordinals.Start
	}
	pr.Status.RollingPodStatus = &rolloutv1alpha1.RollingPodStatus{
		Partition: ptr.To(next),
		Status:    rolloutv1alpha1.StepWaitForPodToBeUpdated,
		// The pod this move releases, as beginStep names it: the step's Event names it.
		Pod: fmt.Sprintf("%s-%d", sts.Name, start+max(min(next, s.replicas-1), 0)),
	}
	// The status written with the partition says what the partition now is (Verifying at 0).
	setStepPhase(pr, sts.Name, next)
	if s.waitingForSwitchover {
		// A batch released the pods above a lock's writer; the rest waits for the writer to move.
		pr.Status.RollingPodStatus.Status = rolloutv1alpha1.StepWaitForSwitchover
		pr.Status.Message += "; " + switchoverMessage(pr.Status.Switchover)
		return reconcile.Result{RequeueAfter: switchoverPoll}, nil
	}
	return reconcile.Result{RequeueAfter: pollWhileWaiting}, nil
}

// ceilSecond rounds t up to the second. Status times are serialised with a one-second precision; a
// time that gates the next action (start of checks, last check) is stored rounded up so that reading
// it back never shortens initialDelaySeconds or periodSeconds.
func ceilSecond(t time.Time) time.Time {
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}

// fail stops the rollout after maxTries: phase Failed, Event, partition unchanged; with onFailure
// Rollback the StatefulSet's template is set back to its current revision.
func (r *Reconciler) fail(ctx context.Context, s *scope, partition int32) (reconcile.Result, error) {
	check := s.pr.Spec.Check
	why := fmt.Sprintf("used up maxTries=%d without %d consecutive passing checks", ptr.Deref(check.MaxTries, 0), max(check.SuccessThreshold, 1))
	return r.failStep(ctx, s, partition, why, check.OnFailure == rolloutv1alpha1.OnFailureRollback)
}

// failStep stops the rollout because the step at partition failed (why): phase Failed, Event,
// partition unchanged; with rollback the StatefulSet's template is set back to its current revision.
func (r *Reconciler) failStep(ctx context.Context, s *scope, partition int32, why string, rollback bool) (reconcile.Result, error) {
	pr, sts := s.pr, s.sts
	pr.Status.Phase = rolloutv1alpha1.PhaseFailed
	pr.Status.RolloutEndTime = ptr.To(metav1.NewTime(time.Now()))
	pr.Status.Message = fmt.Sprintf("step at partition %d (pod %s) %s; the partition stays at %d. Fix the cause and edit the PhasedRollout (or push a new revision) to retry",
		partition, pr.Status.RollingPodStatus.Pod, why, partition)
	if rollback {
		if err := r.rollback(ctx, sts); err != nil {
			pr.Status.LastError = fmt.Sprintf("rollback to revision %s failed: %v", sts.Status.CurrentRevision, err)
		} else {
			pr.Status.Message += fmt.Sprintf("; the pod template was set back to revision %s", sts.Status.CurrentRevision)
		}
	}
	s.event(pr, corev1.EventTypeWarning, rolloutv1alpha1.EventRolloutFailed, "%s", pr.Status.Message)
	return reconcile.Result{}, nil
}

// rollback re-applies the pod template stored in the ControllerRevision of the StatefulSet's current
// revision (its data is a strategic merge patch of spec.template).
func (r *Reconciler) rollback(ctx context.Context, sts *appsv1.StatefulSet) error {
	rev := &appsv1.ControllerRevision{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: sts.Namespace, Name: sts.Status.CurrentRevision}, rev); err != nil {
		return err
	}
	if len(rev.Data.Raw) == 0 {
		return fmt.Errorf("ControllerRevision %s has no data", rev.Name)
	}
	return r.Client.Patch(ctx, sts, client.RawPatch(types.StrategicMergePatchType, rev.Data.Raw))
}
