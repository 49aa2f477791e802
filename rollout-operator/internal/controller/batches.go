package controller

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// Steps in batches (spec.steps, Kruise Rollouts' model for StatefulSets). Without spec.steps a step
// releases one pod, as the seed says, and nothing here runs. With them, once the checks of the step
// at partition p passed (and its pause, if any, is over), step i's batch is released: the partition
// moves to max(p - steps[i].pods, 0) in one write, or, when the StatefulSet's maxUnavailable does not
// allow that many pods down at once, in several, each released as the earlier ones become available.
// The batch's checks start once every released pod is updated and available, at the partition the
// batch ends at: they judge its lowest ordinal (the pod beginStep names). status.batch records the
// batch; a partition outside its range (a scale-up raised it, a new rollout started) starts over
// from steps[0].

// batchHold runs before a step's pods are awaited: it recreates a stuck pod (recreateStuckPods),
// releases the rest of a batch that maxUnavailable held back, and holds the checks until every pod of
// the batch is on the update revision. It reports whether the step waits.
func (r *Reconciler) batchHold(ctx context.Context, s *scope, partition int32) (reconcile.Result, bool, error) {
	if err := r.recreateStuckPod(ctx, s, partition); err != nil {
		return reconcile.Result{}, true, err
	}
	b := currentBatch(s.pr, partition)
	if b == nil {
		return reconcile.Result{}, false, nil
	}
	st := s.pr.Status.RollingPodStatus
	if partition > b.ToPartition {
		next, err := r.releaseBatch(ctx, s, b, partition)
		if err != nil {
			return reconcile.Result{}, true, err
		}
		if next < partition {
			r.movedTo(s, next)
		}
		if s.waitingForSwitchover {
			s.pr.Status.RollingPodStatus.Status = rolloutv1alpha1.StepWaitForSwitchover
			s.pr.Status.Message += "; " + switchoverMessage(s.pr.Status.Switchover)
			return reconcile.Result{RequeueAfter: switchoverPoll}, true, nil
		}
		s.pr.Status.RollingPodStatus.Status = rolloutv1alpha1.StepWaitForPodToBeUpdated
		return reconcile.Result{RequeueAfter: pollWhileWaiting}, true, nil
	}
	pods, err := r.pods(ctx, s.sts)
	if err != nil {
		return reconcile.Result{}, true, err
	}
	for i := partition; i < s.replicas; i++ {
		if p, ok := pods[podName(s.sts, i)]; !ok || p.Labels[appsv1.ControllerRevisionHashLabelKey] != s.sts.Status.UpdateRevision {
			st.Status = rolloutv1alpha1.StepWaitForPodToBeUpdated
			st.AnalisysStartTime, st.ConsecutiveSuccessfulChecks = nil, 0
			return reconcile.Result{RequeueAfter: pollWhileWaiting}, true, nil
		}
	}
	return reconcile.Result{}, false, nil
}

// currentBatch returns status.batch when spec.steps is set and the partition is within the batch's
// range (released or being released), nil otherwise.
func currentBatch(pr *rolloutv1alpha1.PhasedRollout, partition int32) *rolloutv1alpha1.BatchStatus {
	b := pr.Status.Batch
	if len(pr.Spec.Steps) == 0 || b == nil || partition < b.ToPartition || partition > b.FromPartition {
		return nil
	}
	return b
}

// stepOf returns step i of spec.steps, the last one when i is past the end.
func stepOf(pr *rolloutv1alpha1.PhasedRollout, i int32) rolloutv1alpha1.RolloutStep {
	return pr.Spec.Steps[min(int(i), len(pr.Spec.Steps)-1)]
}

// nextPartition is where stepPassed moves the partition once the checks of the step at partition
// passed: one pod down without spec.steps; with them, the next step's batch starts (status.batch) and
// as many of its pods are released as maxUnavailable allows.
func (r *Reconciler) nextPartition(ctx context.Context, s *scope, partition int32) (int32, error) {
	pr := s.pr
	if len(pr.Spec.Steps) == 0 {
		return partition - 1, nil
	}
	idx := int32(0)
	if b := currentBatch(pr, partition); b != nil && b.ToPartition == partition {
		idx = b.Step + 1
	}
	to := max(partition-stepOf(pr, idx).Pods, 0)
	b := &rolloutv1alpha1.BatchStatus{Step: idx, Pods: partition - to, FromPartition: partition, ToPartition: to}
	pr.Status.Batch = b
	return r.releaseBatch(ctx, s, b, partition)
}

// releaseBatch releases as many more pods of batch b as maxUnavailable allows: released pods not yet
// updated and available, and pods unavailable anyway, count against it. It writes the partition when
// it moves, records the released count and its Event, and returns the partition.
func (r *Reconciler) releaseBatch(ctx context.Context, s *scope, b *rolloutv1alpha1.BatchStatus, partition int32) (int32, error) {
	pods, err := r.pods(ctx, s.sts)
	if err != nil {
		return partition, err
	}
	limit := maxUnavailable(s.sts, s.replicas)
	next := max(b.ToPartition, partition-releasable(s.sts, pods, s.replicas, partition, s.now))
	if next, err = r.writerGate(ctx, s, partition, next); err != nil || next == partition {
		return partition, err
	}
	if err := r.applyPartition(ctx, s.pr, s.sts, next, true); err != nil {
		return partition, err
	}
	b.Released = b.FromPartition - next
	note := fmt.Sprintf("step %d releases %s (%d of the batch's %d pods released; the checks judge %s)",
		b.Step, podRange(s.sts, next, partition), b.Released, b.Pods, podName(s.sts, b.ToPartition))
	if next > b.ToPartition {
		note += fmt.Sprintf("; maxUnavailable %d holds the other %d until the released pods are available", limit, next-b.ToPartition)
	}
	s.event(s.pr, corev1.EventTypeNormal, rolloutv1alpha1.EventStepReleased, "%s", note)
	return next, nil
}

// releasable returns how many more pods may be released below partition: maxUnavailable less the
// pods that are unavailable or released and not yet on the update revision.
func releasable(sts *appsv1.StatefulSet, pods map[string]*corev1.Pod, replicas, partition int32, now time.Time) int32 {
	minReady := time.Duration(sts.Spec.MinReadySeconds) * time.Second
	busy := int32(0)
	for i := range replicas {
		p, ok := pods[podName(sts, i)]
		if !ok || !available(p, minReady, now) || (i >= partition && p.Labels[appsv1.ControllerRevisionHashLabelKey] != sts.Status.UpdateRevision) {
			busy++
		}
	}
	return max(maxUnavailable(sts, replicas)-busy, 0)
}

// movedTo records in the status a partition move within a batch, as stepPassed does for a step's.
func (r *Reconciler) movedTo(s *scope, next int32) {
	pr := s.pr
	pr.Status.RollingPodStatus = &rolloutv1alpha1.RollingPodStatus{
		Partition: &next,
		Status:    rolloutv1alpha1.StepWaitForPodToBeUpdated,
		Pod:       podName(s.sts, max(min(next, s.replicas-1), 0)),
	}
	setStepPhase(pr, s.sts.Name, next)
}

// startPause starts the pause of the batch whose checks just passed at partition (the step's
// pause.duration) and returns how long it waits; zero when the step has no pause or it is over.
func startPause(s *scope, partition int32, checkedAt time.Time) time.Duration {
	b := currentBatch(s.pr, partition)
	if partition == 0 || b == nil || b.ToPartition != partition {
		return 0 // the last batch has no pause: nothing follows it
	}
	pause := stepOf(s.pr, b.Step).Pause
	if pause == nil {
		return 0
	}
	if b.PausedUntil == nil {
		d, err := time.ParseDuration(pause.Duration)
		if err != nil {
			return 0 // refused at apply (CEL); never reached
		}
		b.PausedUntil = &metav1.Time{Time: ceilSecond(checkedAt.Add(d))}
		s.event(s.pr, corev1.EventTypeNormal, rolloutv1alpha1.EventStepPaused, "the checks of step %d (pod %s) passed; pausing %s (until %s) before the next step",
			b.Step, podName(s.sts, partition), pause.Duration, b.PausedUntil.UTC().Format(time.RFC3339))
	}
	wait := b.PausedUntil.Sub(s.now)
	if wait > 0 {
		s.pr.Status.Message += fmt.Sprintf("; step %d passed its checks and pauses until %s", b.Step, b.PausedUntil.UTC().Format(time.RFC3339))
	}
	return wait
}

// pauseHold holds a step whose checks passed while its pause runs, without checking again, and
// moves on (stepPassed) once it is over. A step whose analysis was reset meanwhile (a pod became
// unavailable) drops its pause: its checks run again.
func (r *Reconciler) pauseHold(ctx context.Context, s *scope, partition int32) (reconcile.Result, bool, error) {
	b := currentBatch(s.pr, partition)
	if b == nil || b.PausedUntil == nil || b.ToPartition != partition {
		return reconcile.Result{}, false, nil
	}
	if s.pr.Status.RollingPodStatus.ConsecutiveSuccessfulChecks == 0 {
		b.PausedUntil = nil
		return reconcile.Result{}, false, nil
	}
	if wait := b.PausedUntil.Sub(s.now); wait > 0 {
		s.pr.Status.Message += fmt.Sprintf("; step %d passed its checks and pauses until %s", b.Step, b.PausedUntil.UTC().Format(time.RFC3339))
		return reconcile.Result{RequeueAfter: wait}, true, nil
	}
	res, err := r.stepPassed(ctx, s, partition, s.now)
	return res, true, err
}

// maxUnavailable is the StatefulSet's spec.updateStrategy.rollingUpdate.maxUnavailable as a number
// of pods, as the StatefulSet controller computes it: default 1, a percentage of replicas rounded
// down, at least 1.
func maxUnavailable(sts *appsv1.StatefulSet, replicas int32) int32 {
	v := intstr.FromInt32(1)
	if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
		v = *ru.MaxUnavailable
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, int(replicas), false)
	if err != nil || n < 1 {
		return 1
	}
	return int32(min(n, int(replicas)))
}

// podName is the name of the StatefulSet's pod at index i (from spec.ordinals.start).
func podName(sts *appsv1.StatefulSet, i int32) string {
	start := int32(0)
	if sts.Spec.Ordinals != nil {
		start = sts.Spec.Ordinals.Start
	}
	return fmt.Sprintf("%s-%d", sts.Name, start+i)
}

// podRange names the pods at indexes [from, to).
func podRange(sts *appsv1.StatefulSet, from, to int32) string {
	if to-from == 1 {
		return "pod " + podName(sts, from)
	}
	return fmt.Sprintf("pods %s to %s", podName(sts, to-1), podName(sts, from))
}
