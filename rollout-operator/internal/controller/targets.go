package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// Several StatefulSets in one ordered rollout (spec.targetRefs). One of them is active: the rollout
// machine of a single targetRef runs on it, unchanged, and the status's rollout fields describe it
// (status.activeTarget). Every other one is held at partition = replicas, before the active one is
// acted on, so no two StatefulSets ever have pods released at once. The active one is:
//   - the previous active one while its rollout has released pods (its partition is below replicas)
//     and is not over (the StatefulSet is not done, or the rollout's phase is still Rolling,
//     Verifying, Paused, Aborted or Failed: the last pod's checks included): a rollout that released
//     pods finishes (or is fixed) before anything else moves. One that released none yet (its first
//     step checks the pod it is about to roll) gives way to an earlier StatefulSet that changed;
//   - otherwise the first one in spec.targetRefs that is not done (done: every pod on the update
//     revision and Ready), so a StatefulSet starts only when every one before it is done;
//   - when all are done, the previous active one (the last one at first): idle, partitions held.
// When the first not-done StatefulSet has nothing to roll but is not Ready, and a later one is not
// done, the later ones wait (Event WaitForTarget) and no machine runs.

// reconcileTargets reconciles a PhasedRollout with spec.targetRefs: read them all (the partition
// decisions depend on each), refuse to act unless every one can be managed, then hold all but the
// active one and run the rollout on that one.
func (r *Reconciler) reconcileTargets(ctx context.Context, s *scope) (reconcile.Result, error) {
	pr := s.pr
	names := pr.Spec.TargetRefs
	stss := make([]*appsv1.StatefulSet, len(names))
	var missing []string
	for i, name := range names {
		sts := &appsv1.StatefulSet{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: pr.Namespace, Name: name}, sts); err != nil {
			if apierrors.IsNotFound(err) {
				missing = append(missing, name)
				continue
			}
			return reconcile.Result{}, fmt.Errorf("reading StatefulSet %s: %w", name, err)
		}
		stss[i] = sts
	}
	s.targets = stss
	defer recordTargets(pr, stss)
	if len(missing) > 0 {
		// Nothing is held or moved until every StatefulSet exists: the order cannot be kept otherwise.
		s.setPhase(rolloutv1alpha1.PhaseErrorSTSNotFound, "StatefulSet %s of spec.targetRefs not found in namespace %s", strings.Join(missing, ", "), pr.Namespace)
		pr.Status.RollingPodStatus = nil
		pr.Status.LastError = ""
		return reconcile.Result{}, nil
	}
	for _, sts := range stss {
		s.sts, s.replicas = sts, ptr.Deref(sts.Spec.Replicas, 1)
		if refused, err := r.cannotManage(ctx, s); err != nil || refused {
			return reconcile.Result{}, err
		}
	}
	if skipCheck(pr) {
		return reconcile.Result{}, r.suspendTargets(ctx, s)
	}
	active, waiting := chooseTarget(pr, stss)
	for i, sts := range stss {
		if replicas := ptr.Deref(sts.Spec.Replicas, 1); i != active && !partitionHeld(sts, pr, replicas) {
			if err := r.applyPartition(ctx, pr, sts, replicas, true); err != nil {
				return reconcile.Result{}, err
			}
		}
	}
	s.sts, s.replicas = stss[active], ptr.Deref(stss[active].Spec.Replicas, 1)
	if waiting >= 0 {
		return r.waitForTarget(ctx, s, waiting)
	}
	if names[active] != pr.Status.ActiveTarget {
		switchTarget(s, names[active])
	}
	res, err := r.reconcileTarget(ctx, s)
	if err == nil && pr.Status.Phase == rolloutv1alpha1.PhaseUpdated && !slices.ContainsFunc(stss, func(sts *appsv1.StatefulSet) bool { return !targetDone(sts) }) {
		s.setPhase(rolloutv1alpha1.PhaseUpdated, "idle: every StatefulSet of spec.targetRefs (%s) runs its update revision on every pod; partitions held at replicas", strings.Join(names, ", "))
	}
	return res, err
}

// chooseTarget returns the index of the active StatefulSet (see the file comment) and, when the
// StatefulSets after it must wait for it to become Ready without anything to roll, the index of the
// first of them that is not done (else -1).
func chooseTarget(pr *rolloutv1alpha1.PhasedRollout, stss []*appsv1.StatefulSet) (active, waiting int) {
	prev := slices.Index(pr.Spec.TargetRefs, pr.Status.ActiveTarget)
	if prev >= 0 && releasing(stss[prev]) && (!targetDone(stss[prev]) || underWay(pr.Status.Phase) || pr.Status.Phase == rolloutv1alpha1.PhaseFailed) {
		return prev, -1
	}
	first := slices.IndexFunc(stss, func(sts *appsv1.StatefulSet) bool { return !targetDone(sts) })
	if first < 0 {
		if prev >= 0 {
			return prev, -1
		}
		return len(stss) - 1, -1
	}
	if nothingToRoll(stss[first]) {
		if next := slices.IndexFunc(stss[first+1:], func(sts *appsv1.StatefulSet) bool { return !targetDone(sts) }); next >= 0 {
			return first, first + 1 + next
		}
	}
	return first, -1
}

// releasing reports whether the StatefulSet's partition is below its replicas: some pods may roll.
func releasing(sts *appsv1.StatefulSet) bool {
	ru := sts.Spec.UpdateStrategy.RollingUpdate
	return ru == nil || ru.Partition == nil || *ru.Partition < ptr.Deref(sts.Spec.Replicas, 1)
}

// targetDone reports whether the StatefulSet controller has seen the StatefulSet's latest spec, and
// every pod runs its update revision and is Ready.
func targetDone(sts *appsv1.StatefulSet) bool {
	replicas := ptr.Deref(sts.Spec.Replicas, 1)
	return nothingToRoll(sts) && sts.Status.ReadyReplicas >= replicas && sts.Status.Replicas == replicas
}

// nothingToRoll reports whether the StatefulSet controller has seen the StatefulSet's latest spec and
// every pod runs its update revision, which is the current revision.
func nothingToRoll(sts *appsv1.StatefulSet) bool {
	st := sts.Status
	return st.ObservedGeneration >= sts.Generation && st.UpdateRevision != "" && st.UpdateRevision == st.CurrentRevision &&
		st.UpdatedReplicas >= ptr.Deref(sts.Spec.Replicas, 1)
}

// switchTarget makes name the active StatefulSet: the rollout fields of the status start afresh for it
// (phase unset, as for a new PhasedRollout, so a rollout its StatefulSet controller started on its
// own is adopted, frozen where it is).
func switchTarget(s *scope, name string) {
	st := &s.pr.Status
	if st.ActiveTarget != "" || st.Phase == rolloutv1alpha1.PhaseRolling {
		s.event(s.pr, corev1.EventTypeNormal, rolloutv1alpha1.EventTargetStarted, "the StatefulSets before %s in spec.targetRefs are done; the ordered rollout moves on to StatefulSet %s", name, name)
	}
	resetRolloutStatus(st)
	st.ActiveTarget = name
}

// resetRolloutStatus clears the status fields that describe the rollout of one StatefulSet.
func resetRolloutStatus(st *rolloutv1alpha1.PhasedRolloutStatus) {
	st.ActiveTarget = ""
	st.Phase, st.Message = "", ""
	st.CurrentRevision, st.UpdateRevision = "", ""
	st.RollingPodStatus = nil
	st.Replicas = nil
	st.AdoptedPartition = nil
	st.LastScaleUp = nil
	st.Batch = nil
	st.DryRun = nil
	st.LastQueryResult, st.LastError = "", ""
}

// waitForTarget holds every StatefulSet while the active one (s.sts) has nothing to roll but is not
// Ready: the StatefulSet at index next, which is not done, starts once it is. The phase is Rolling
// (the rollout is not over) with no step; the rollout fields start afresh when the next one starts.
func (r *Reconciler) waitForTarget(ctx context.Context, s *scope, next int) (reconcile.Result, error) {
	pr, sts := s.pr, s.sts
	if !partitionHeld(sts, pr, s.replicas) {
		if err := r.applyPartition(ctx, pr, sts, s.replicas, true); err != nil {
			return reconcile.Result{}, err
		}
	}
	resetRolloutStatus(&pr.Status)
	s.pr.Status.CurrentRevision, s.pr.Status.UpdateRevision = sts.Status.CurrentRevision, sts.Status.UpdateRevision
	msg := fmt.Sprintf("waiting for StatefulSet %s to be Ready (%d of %d pods Ready) before rolling StatefulSet %s of spec.targetRefs",
		sts.Name, sts.Status.ReadyReplicas, s.replicas, pr.Spec.TargetRefs[next])
	if s.orig.Status.Message != msg {
		s.event(pr, corev1.EventTypeNormal, rolloutv1alpha1.EventWaitForTarget, "%s", msg)
	}
	s.setPhase(rolloutv1alpha1.PhaseRolling, "%s", msg)
	return reconcile.Result{RequeueAfter: pollWhileWaiting}, nil
}

// suspendTargets lets every StatefulSet of spec.targetRefs roll without checks (skipCheck):
// partition 0 on each, at once (skipCheck gives up the order too), phase Suspended.
func (r *Reconciler) suspendTargets(ctx context.Context, s *scope) error {
	pr := s.pr
	for _, sts := range s.targets {
		if err := r.applyPartition(ctx, pr, sts, 0, true); err != nil {
			return err
		}
	}
	if pr.Status.Phase != rolloutv1alpha1.PhaseSuspended {
		s.event(pr, corev1.EventTypeNormal, rolloutv1alpha1.EventSuspended, "skipCheck is true: the normal rolling update of StatefulSets %s is resumed (partition 0), all at once", strings.Join(pr.Spec.TargetRefs, ", "))
	}
	s.setPhase(rolloutv1alpha1.PhaseSuspended, "skipCheck is true: the StatefulSets roll without checks")
	pr.Status.RollingPodStatus = nil
	pr.Status.LastError = ""
	return nil
}

// recordTargets writes status.targets from the StatefulSets as read (nil: not found). Only what
// changes when a StatefulSet changes is recorded, so an idle rollout makes no writes at rest.
func recordTargets(pr *rolloutv1alpha1.PhasedRollout, stss []*appsv1.StatefulSet) {
	out := make([]rolloutv1alpha1.TargetStatus, len(stss))
	for i, sts := range stss {
		t := rolloutv1alpha1.TargetStatus{Name: pr.Spec.TargetRefs[i], State: rolloutv1alpha1.TargetNotFound}
		if sts != nil {
			t.CurrentRevision, t.UpdateRevision = sts.Status.CurrentRevision, sts.Status.UpdateRevision
			t.Replicas = ptr.Deref(sts.Spec.Replicas, 1)
			t.UpdatedReplicas, t.ReadyReplicas = sts.Status.UpdatedReplicas, sts.Status.ReadyReplicas
			if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
				t.Partition = ptr.To(*ru.Partition)
			}
			switch {
			case t.Name == pr.Status.ActiveTarget && !targetDone(sts):
				t.State = rolloutv1alpha1.TargetActive
			case targetDone(sts):
				t.State = rolloutv1alpha1.TargetUpdated
			case nothingToRoll(sts):
				t.State = rolloutv1alpha1.TargetNotReady
			default:
				t.State = rolloutv1alpha1.TargetWaiting
			}
		}
		out[i] = t
	}
	pr.Status.Targets = out
}

// activeTarget names the StatefulSet the status's rollout fields describe.
func activeTarget(pr *rolloutv1alpha1.PhasedRollout) string {
	if pr.Status.ActiveTarget != "" {
		return pr.Status.ActiveTarget
	}
	return pr.Spec.TargetRef
}
