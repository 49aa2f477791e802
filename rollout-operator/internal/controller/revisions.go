package controller

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// The decisions on the StatefulSet's revisions, once the StatefulSet controller has computed them:
// which rollout runs, starts, is retried, or whether the StatefulSet is idle.

// reconcileRevisions acts on the StatefulSet's revisions once they are known: a scale-up during a
// rollout, then the step under way, a retry after a failure, a new revision to roll, pods returning to
// the current revision, or idle.
func (r *Reconciler) reconcileRevisions(ctx context.Context, s *scope) (reconcile.Result, error) {
	pr, sts := s.pr, s.sts
	target := sts.Status.UpdateRevision
	inRollout := pr.Status.UpdateRevision == target && underWay(pr.Status.Phase)
	if err := r.recordReplicas(ctx, s, inRollout); err != nil {
		return reconcile.Result{}, err
	}
	switch {
	case pr.Spec.AnalysisOnly && sts.Status.CurrentRevision != target:
		return r.dryRun(ctx, s)
	case inRollout:
		return r.step(ctx, s)
	case pr.Status.UpdateRevision == target && pr.Status.Phase == rolloutv1alpha1.PhaseFailed && sts.Status.CurrentRevision != target:
		return r.retryFailed(ctx, s)
	case sts.Status.CurrentRevision != target:
		return r.startRollout(ctx, s)
	case !r.podsAllOn(ctx, sts, target):
		// A revert to the current revision: a pod of the reverted-from revision that crash-loops never
		// returns by itself (kubernetes/kubernetes#67250).
		if err := r.recreateStuckPod(ctx, s, stsPartition(sts, s.replicas)); err != nil {
			return reconcile.Result{}, err
		}
		return awaitReturn(s), nil
	default:
		return r.idle(ctx, s)
	}
}

// recordReplicas records the replica count in the status and applies scaleUpDuringRollout to a
// scale-up seen during the rollout (or after it failed) of the revision still rolling.
func (r *Reconciler) recordReplicas(ctx context.Context, s *scope, inRollout bool) error {
	pr, sts := s.pr, s.sts
	target := sts.Status.UpdateRevision
	prevReplicas := pr.Status.Replicas
	pr.Status.Replicas = ptr.To(s.replicas)
	if prevReplicas != nil && s.replicas > *prevReplicas && pr.Status.UpdateRevision == target && sts.Status.CurrentRevision != target &&
		(inRollout || pr.Status.Phase == rolloutv1alpha1.PhaseFailed) {
		return r.scaledUp(ctx, s, *prevReplicas, s.replicas)
	}
	return nil
}

// retryFailed keeps a failed rollout stopped, partition where it is, until the PhasedRollout is
// changed or promoted (sts.plus/promote, control.go); then it runs the step again.
func (r *Reconciler) retryFailed(ctx context.Context, s *scope) (reconcile.Result, error) {
	pr := s.pr
	if pr.Status.ObservedGeneration == pr.Generation && !promotePending(pr) {
		// Stay stopped; the partition stays where it is. Editing the PhasedRollout retries.
		return reconcile.Result{}, nil
	}
	s.setPhase(rolloutv1alpha1.PhaseRolling, "retrying after the PhasedRollout was changed")
	pr.Status.RolloutEndTime = nil
	pr.Status.RollingPodStatus = nil
	return r.step(ctx, s)
}

// startRollout starts the rollout of a new revision (or of a second update during a rollout) from the
// highest ordinal, so no pod moves to the newest revision unchecked. A PhasedRollout created during a
// rollout the StatefulSet controller already started freezes it where it is instead.
func (r *Reconciler) startRollout(ctx context.Context, s *scope) (reconcile.Result, error) {
	pr, sts := s.pr, s.sts
	target := sts.Status.UpdateRevision
	partition := s.replicas
	if pr.Status.Phase == "" {
		adopted, err := r.adoptablePartition(ctx, sts, s.replicas, target)
		if err != nil {
			return reconcile.Result{}, err
		}
		if adopted < s.replicas {
			partition = adopted
			pr.Status.AdoptedPartition = ptr.To(adopted)
			s.event(pr, corev1.EventTypeNormal, rolloutv1alpha1.EventRolloutAdopted,
				"StatefulSet %s was already rolling to revision %s: the pods from ordinal index %d up were rolled without checks before this PhasedRollout existed; the partition is frozen at %d and every further step is checked",
				sts.Name, target, adopted, adopted)
		}
	}
	if err := r.applyPartition(ctx, pr, sts, partition, true); err != nil {
		return reconcile.Result{}, err
	}
	pr.Status.UpdateRevision = target
	pr.Status.RolloutStartTime = ptr.To(metav1.NewTime(s.now))
	pr.Status.RolloutEndTime = nil
	pr.Status.RollingPodStatus = &rolloutv1alpha1.RollingPodStatus{Partition: ptr.To(partition)}
	pr.Status.Batch = nil // spec.steps start over from steps[0]
	pr.Status.Switchover = nil
	pr.Status.LastQueryResult = ""
	pr.Status.LastError = ""
	s.setPhase(rolloutv1alpha1.PhaseRolling, "rolling StatefulSet %s to revision %s", sts.Name, target)
	s.event(pr, corev1.EventTypeNormal, rolloutv1alpha1.EventRolloutStarted, "rolling StatefulSet %s from revision %s to %s, one pod at a time", sts.Name, sts.Status.CurrentRevision, target)
	return r.step(ctx, s)
}

// msgPodsReturning starts the message of awaitReturn, phase Updated too: idle replaces it.
const msgPodsReturning = "pods are returning to revision"

// awaitReturn waits for pods to return to the current revision: the template went back to it (a
// rollback, or a revert by the user), and the pods at or above the partition return to the revision
// every pod ran before, which needs no check. The partition is kept until they are back.
func awaitReturn(s *scope) reconcile.Result {
	pr, target := s.pr, s.sts.Status.UpdateRevision
	pr.Status.UpdateRevision = target
	pr.Status.RollingPodStatus = nil
	pr.Status.Switchover = nil
	if pr.Status.Phase != rolloutv1alpha1.PhaseFailed {
		// Not Rolling: no check is needed and the partition must not move down.
		msg := fmt.Sprintf("%s %s; the partition is held until they are back", msgPodsReturning, target)
		if pr.Status.Message != msg {
			// A waiting state with Ready True: only this Event tells kubectl describe why it waits.
			s.event(pr, corev1.EventTypeNormal, rolloutv1alpha1.EventWaitForPodsToReturn, "%s", msg)
		}
		s.setPhase(rolloutv1alpha1.PhaseUpdated, "%s", msg)
	}
	return reconcile.Result{RequeueAfter: pollWhileWaiting}
}

// idle holds the partition at replicas while every pod is on the current revision (written only when
// it is not held yet, so an idle rollout makes no API writes at rest).
func (r *Reconciler) idle(ctx context.Context, s *scope) (reconcile.Result, error) {
	pr, sts, target := s.pr, s.sts, s.sts.Status.UpdateRevision
	if !partitionHeld(sts, pr, s.replicas) {
		if err := r.applyPartition(ctx, pr, sts, s.replicas, true); err != nil {
			return reconcile.Result{}, err
		}
	}
	// Failed stays visible until a retry or a new revision; a finished rollout's message until a new
	// revision. Pods that were returning are back.
	finished := pr.Status.Phase == rolloutv1alpha1.PhaseUpdated && pr.Status.UpdateRevision == target && !strings.HasPrefix(pr.Status.Message, msgPodsReturning)
	if pr.Status.Phase != rolloutv1alpha1.PhaseFailed && !finished {
		s.setPhase(rolloutv1alpha1.PhaseUpdated, "idle: partition held at %d, waiting for a new revision", s.replicas)
	}
	pr.Status.UpdateRevision = target
	pr.Status.RollingPodStatus = nil
	pr.Status.Switchover = nil
	pr.Status.LastError = ""
	return reconcile.Result{}, nil
}
