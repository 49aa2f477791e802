package controller

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// scope is what one reconcile of a PhasedRollout reads and decides: the object (whose status is written
// once when Reconcile returns) and its status as read, the StatefulSet and its replicas as read from the
// API server, and the Events to record once the status is written.
type scope struct {
	pr   *rolloutv1alpha1.PhasedRollout
	orig *rolloutv1alpha1.PhasedRollout // as read (after the finalizer was added): the status patch's base
	// deleting: the PhasedRollout is being deleted; its status is not written (the finalizer goes).
	deleting bool
	now      time.Time
	sts      *appsv1.StatefulSet // nil until readTarget found it
	replicas int32               // sts's spec.replicas (default 1)
	events   []pendingEvent
	// overheadStart is when the last passing check of a step ended, set when the step moved the
	// partition: the status write ends the step's overhead (stepOverhead).
	overheadStart *time.Time
}

type pendingEvent struct {
	regarding client.Object
	kind      string
	reason    string
	note      string
}

// newScope starts the scope of one reconcile of pr.
func newScope(pr *rolloutv1alpha1.PhasedRollout, now time.Time) *scope {
	return &scope{pr: pr, orig: pr.DeepCopy(), deleting: !pr.DeletionTimestamp.IsZero(), now: now}
}

// event buffers an Event until the status is written, so that no Event announces a decision the API
// server refused.
func (s *scope) event(regarding client.Object, kind, reason, format string, args ...any) {
	s.events = append(s.events, pendingEvent{regarding: regarding, kind: kind, reason: reason, note: fmt.Sprintf(format, args...)})
}

// setPhase sets the phase and its message.
func (s *scope) setPhase(phase rolloutv1alpha1.PhasedRolloutPhase, format string, args ...any) {
	s.pr.Status.Phase = phase
	s.pr.Status.Message = fmt.Sprintf(format, args...)
}

// Reconcile drives one PhasedRollout one decision further: get it from the API server, ensure its
// finalizer, build the scope, write the status once at the end, and reconcile its deletion or its
// StatefulSet's partition.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (result reconcile.Result, reterr error) {
	pr := &rolloutv1alpha1.PhasedRollout{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, pr); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if pr.DeletionTimestamp.IsZero() {
		if _, err := opsutil.EnsureFinalizer(ctx, r.Client, pr, rolloutv1alpha1.Finalizer); err != nil {
			return reconcile.Result{}, err
		}
	}
	s := newScope(pr, time.Now())
	if s.deleting {
		return reconcile.Result{}, r.reconcileDelete(ctx, s)
	}
	defer func() {
		result, reterr = r.writeStatus(ctx, s, result, reterr)
	}()
	return r.reconcileNormal(ctx, s)
}

// writeStatus ends a reconcile that did not delete: it records err in the status, writes the status
// (only when it changed, so an idle rollout makes no API writes at rest, and under an optimistic lock:
// the partition decision recorded in it depends on the state read), and only then records the
// buffered Events, the waiting Events and the step's overhead. A Conflict writes nothing: the next
// reconcile reads anew and decides again.
func (r *Reconciler) writeStatus(ctx context.Context, s *scope, result reconcile.Result, err error) (reconcile.Result, error) {
	pr := s.pr
	if err != nil {
		pr.Status.LastError = err.Error()
		if apierrors.IsConflict(err) {
			return reconcile.Result{}, err
		}
	}
	pr.Status.ObservedGeneration = pr.Generation
	setConditions(pr)
	if _, serr := opsutil.PatchStatus(ctx, r.Client, pr, s.orig, opsutil.WithOptimisticLock()); serr != nil {
		if err == nil {
			err = serr
		}
		return reconcile.Result{}, err
	}
	for _, e := range s.events {
		r.Recorder.Eventf(e.regarding, nil, e.kind, e.reason, e.reason, "%s", e.note)
	}
	r.waitingEvents(s)
	if s.overheadStart != nil {
		stepOverhead.Observe(time.Since(*s.overheadStart).Seconds())
	}
	return result, err
}

// reconcileNormal decides what the StatefulSet's partition must be and runs the current step: read the
// StatefulSet, refuse one it cannot manage, let it roll freely under skipCheck, hold a new one until its
// revisions are known, then act on its revisions.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (reconcile.Result, error) {
	if found, err := r.readTarget(ctx, s); err != nil || !found {
		return reconcile.Result{}, err
	}
	if cannotManage(s) {
		return reconcile.Result{}, nil
	}
	s.pr.Status.CurrentRevision = s.sts.Status.CurrentRevision
	if skipCheck(s.pr) {
		return reconcile.Result{}, r.suspend(ctx, s)
	}
	if s.sts.Status.ObservedGeneration < s.sts.Generation || s.sts.Status.UpdateRevision == "" {
		// The StatefulSet controller has not yet computed the revisions of the latest spec.
		return reconcile.Result{RequeueAfter: time.Second}, r.holdIfNew(ctx, s)
	}
	return r.reconcileRevisions(ctx, s)
}

// readTarget reads the StatefulSet from the API server (not the cache: the partition decision depends
// on it) into the scope and reports whether it exists; a missing one is the phase ErrorSTSNotFound.
func (r *Reconciler) readTarget(ctx context.Context, s *scope) (bool, error) {
	pr := s.pr
	sts := &appsv1.StatefulSet{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: pr.Namespace, Name: pr.Spec.TargetRef}, sts); err != nil {
		if apierrors.IsNotFound(err) {
			s.setPhase(rolloutv1alpha1.PhaseErrorSTSNotFound, "StatefulSet %s not found in namespace %s", pr.Spec.TargetRef, pr.Namespace)
			pr.Status.RollingPodStatus = nil
			pr.Status.LastError = ""
			return false, nil
		}
		return false, fmt.Errorf("reading StatefulSet %s: %w", pr.Spec.TargetRef, err)
	}
	s.sts = sts
	s.replicas = ptr.Deref(sts.Spec.Replicas, 1)
	return true, nil
}

// cannotManage reports (phase ErrorCannotManage) a StatefulSet another PhasedRollout manages, or one
// whose updateStrategy is OnDelete (no partition to hold), and reports whether it did.
func cannotManage(s *scope) bool {
	pr, sts := s.pr, s.sts
	if owner, ok := sts.Annotations[rolloutv1alpha1.ManagedByAnnotation]; ok && owner != pr.Name {
		s.setPhase(rolloutv1alpha1.PhaseErrorCannotManage, "StatefulSet %s is managed by PhasedRollout %s", sts.Name, owner)
		pr.Status.RollingPodStatus = nil
		return true
	}
	if sts.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		if pr.Status.Phase != rolloutv1alpha1.PhaseErrorCannotManage {
			s.event(pr, corev1.EventTypeWarning, rolloutv1alpha1.EventCannotManage, "StatefulSet %s has updateStrategy OnDelete; only RollingUpdate can be managed", sts.Name)
		}
		s.setPhase(rolloutv1alpha1.PhaseErrorCannotManage, "StatefulSet %s has updateStrategy OnDelete; set it to RollingUpdate to manage it", sts.Name)
		pr.Status.RollingPodStatus = nil
		return true
	}
	return false
}

// skipCheck reports whether skipCheck or its alias standardRollingUpdate is true.
func skipCheck(pr *rolloutv1alpha1.PhasedRollout) bool {
	return ptr.Deref(pr.Spec.SkipCheck, false) || ptr.Deref(pr.Spec.StandardRollingUpdate, false)
}

// suspend lets the StatefulSet roll without checks (skipCheck): partition 0, phase Suspended.
func (r *Reconciler) suspend(ctx context.Context, s *scope) error {
	pr := s.pr
	if err := r.applyPartition(ctx, pr, s.sts, 0, true); err != nil {
		return err
	}
	if pr.Status.Phase != rolloutv1alpha1.PhaseSuspended {
		s.event(pr, corev1.EventTypeNormal, rolloutv1alpha1.EventSuspended, "skipCheck is true: the normal rolling update of StatefulSet %s is resumed (partition 0)", s.sts.Name)
	}
	s.setPhase(rolloutv1alpha1.PhaseSuspended, "skipCheck is true: the StatefulSet rolls without checks")
	pr.Status.RollingPodStatus = nil
	pr.Status.LastError = ""
	return nil
}

// holdIfNew freezes a StatefulSet that is not yet managed (partition = replicas) before its
// revisions are known, so that nothing rolls unchecked meanwhile.
func (r *Reconciler) holdIfNew(ctx context.Context, s *scope) error {
	if s.pr.Status.Phase == "" {
		return r.applyPartition(ctx, s.pr, s.sts, s.replicas, true)
	}
	return nil
}

// reconcileRevisions acts on the StatefulSet's revisions once they are known: a scale-up during a
// rollout, then the step under way, a retry after a failure, a new revision to roll, pods returning to
// the current revision, or idle.
func (r *Reconciler) reconcileRevisions(ctx context.Context, s *scope) (reconcile.Result, error) {
	pr, sts := s.pr, s.sts
	target := sts.Status.UpdateRevision
	inRollout := pr.Status.UpdateRevision == target &&
		(pr.Status.Phase == rolloutv1alpha1.PhaseRolling || pr.Status.Phase == rolloutv1alpha1.PhaseVerifying)
	if err := r.recordReplicas(ctx, s, inRollout); err != nil {
		return reconcile.Result{}, err
	}
	switch {
	case inRollout:
		return r.step(ctx, s)
	case pr.Status.UpdateRevision == target && pr.Status.Phase == rolloutv1alpha1.PhaseFailed && sts.Status.CurrentRevision != target:
		return r.retryFailed(ctx, s)
	case sts.Status.CurrentRevision != target:
		return r.startRollout(ctx, s)
	case !r.podsAllOn(ctx, sts, target):
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
// changed; then it runs the step again.
func (r *Reconciler) retryFailed(ctx context.Context, s *scope) (reconcile.Result, error) {
	pr := s.pr
	if pr.Status.ObservedGeneration == pr.Generation {
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
	pr.Status.LastQueryResult = ""
	pr.Status.LastError = ""
	s.setPhase(rolloutv1alpha1.PhaseRolling, "rolling StatefulSet %s to revision %s", sts.Name, target)
	s.event(pr, corev1.EventTypeNormal, rolloutv1alpha1.EventRolloutStarted, "rolling StatefulSet %s from revision %s to %s, one pod at a time", sts.Name, sts.Status.CurrentRevision, target)
	return r.step(ctx, s)
}

// awaitReturn waits for pods to return to the current revision: the template went back to it (a
// rollback, or a revert by the user), and the pods at or above the partition return to the revision
// every pod ran before, which needs no check. The partition is kept until they are back.
func awaitReturn(s *scope) reconcile.Result {
	pr, target := s.pr, s.sts.Status.UpdateRevision
	pr.Status.UpdateRevision = target
	pr.Status.RollingPodStatus = nil
	if pr.Status.Phase != rolloutv1alpha1.PhaseFailed {
		// Not Rolling: no check is needed and the partition must not move down.
		s.setPhase(rolloutv1alpha1.PhaseReady, "pods are returning to revision %s; the partition is held until they are back", target)
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
	// Failed stays visible until a retry or a new revision; Updated until a new revision.
	if pr.Status.Phase != rolloutv1alpha1.PhaseFailed && (pr.Status.Phase != rolloutv1alpha1.PhaseUpdated || pr.Status.UpdateRevision != target) {
		s.setPhase(rolloutv1alpha1.PhaseReady, "idle: partition held at %d, waiting for a new revision", s.replicas)
	}
	pr.Status.UpdateRevision = target
	pr.Status.RollingPodStatus = nil
	pr.Status.LastError = ""
	return reconcile.Result{}, nil
}
