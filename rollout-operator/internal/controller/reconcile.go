package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// scope is what one reconcile of a PhasedRollout reads and decides: the object (whose status is written
// once when Reconcile returns) and its status as read, the StatefulSet and its replicas as read from the
// API server, and the Events to record once the status is written.
type scope struct {
	pr   *rolloutv1alpha1.PhasedRollout
	orig *rolloutv1alpha1.PhasedRollout // as read: the status patch's base
	now  time.Time
	sts  *appsv1.StatefulSet // nil until readTarget found it
	// targets are the StatefulSets of spec.targetRefs as read (nil: not found); sts is the active
	// one. Unset with spec.targetRef.
	targets  []*appsv1.StatefulSet
	replicas int32 // sts's spec.replicas (default 1)
	events   []pendingEvent
	// invalid is what in the spec the operator can never act on (checkSpec): the PhasedRollout is
	// Stalled and nothing is done to the StatefulSet until the spec changes.
	invalid *specProblem
	// overheadStart is when the last passing check of a step ended, set when the step moved the
	// partition: the status write ends the step's overhead (stepOverhead).
	overheadStart *time.Time
	// dropPromote is set when the promote annotation's promotion is spent (control.go): the
	// annotation is removed once the status is written.
	dropPromote bool
	// waitingForSwitchover is set when writerGate held the partition above a StatefulSetLock's
	// writer: the step's state says so.
	waitingForSwitchover bool
}

type pendingEvent struct {
	regarding client.Object
	kind      string
	reason    string
	note      string
}

// newScope starts the scope of one reconcile of pr.
func newScope(pr *rolloutv1alpha1.PhasedRollout, now time.Time) *scope {
	return &scope{pr: pr, orig: pr.DeepCopy(), now: now}
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

// Reconcile drives one PhasedRollout one decision further: get it from the API server (gone: hand its
// StatefulSets back, reconcileDelete), drop the finalizer earlier versions added, build the scope, then
// reconcile its StatefulSet's partition, with one status write when that returns (writeStatus). A
// PhasedRollout being deleted (another finalizer holds it) is left alone: it is handed back once gone.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (result reconcile.Result, reterr error) {
	pr := &rolloutv1alpha1.PhasedRollout{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, pr); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, r.reconcileDelete(ctx, req.NamespacedName)
		}
		return reconcile.Result{}, err
	}
	if _, err := opsutil.RemoveFinalizer(ctx, r.Client, pr, rolloutv1alpha1.LegacyFinalizer); err != nil || !pr.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, err
	}
	s := newScope(pr, time.Now())
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
	setCheckConditions(pr)
	setControlStatus(s)
	setInvalidSpec(pr, s.invalid)
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
	r.afterStatus(ctx, s)
	if s.overheadStart != nil {
		stepOverhead.Observe(time.Since(*s.overheadStart).Seconds())
	}
	return result, err
}

// reconcileNormal decides what the StatefulSet's partition must be and runs the current step: read the
// StatefulSet, refuse one it cannot manage, let it roll freely under skipCheck, hold a new one until its
// revisions are known, then act on its revisions.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (reconcile.Result, error) {
	if s.invalid = checkSpec(s.pr); s.invalid != nil {
		// Before reading the StatefulSet: an invalid spec changes nothing on it (a rollout under way
		// stays frozen where it is); the spec's next update reconciles again.
		return reconcile.Result{}, nil
	}
	if len(s.pr.Spec.TargetRefs) > 0 {
		return r.reconcileTargets(ctx, s)
	}
	if found, err := r.readTarget(ctx, s); err != nil || !found {
		return reconcile.Result{}, err
	}
	if refused, err := r.cannotManage(ctx, s); err != nil || refused {
		return reconcile.Result{}, err
	}
	if skipCheck(s.pr) {
		s.pr.Status.CurrentRevision = s.sts.Status.CurrentRevision
		return reconcile.Result{}, r.suspend(ctx, s)
	}
	return r.reconcileTarget(ctx, s)
}

// reconcileTarget runs the rollout of the StatefulSet in the scope (spec.targetRef, or the active one
// of spec.targetRefs): hold a new one until its revisions are known, then act on its revisions.
func (r *Reconciler) reconcileTarget(ctx context.Context, s *scope) (reconcile.Result, error) {
	s.pr.Status.CurrentRevision = s.sts.Status.CurrentRevision
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
// whose updateStrategy is OnDelete (no partition to hold, so nothing to take over either), and reports
// whether it did. A stale ownership annotation is taken over (takeOverStale).
func (r *Reconciler) cannotManage(ctx context.Context, s *scope) (bool, error) {
	pr, sts := s.pr, s.sts
	if sts.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		msg := fmt.Sprintf("StatefulSet %s has updateStrategy OnDelete; set it to RollingUpdate to manage it", sts.Name)
		if pr.Status.Phase != rolloutv1alpha1.PhaseErrorCannotManage || pr.Status.Message != msg {
			s.event(pr, corev1.EventTypeWarning, rolloutv1alpha1.EventCannotManage, "StatefulSet %s has updateStrategy OnDelete; only RollingUpdate can be managed", sts.Name)
		}
		s.setPhase(rolloutv1alpha1.PhaseErrorCannotManage, "%s", msg)
		pr.Status.RollingPodStatus = nil
		return true, nil
	}
	if owner, ok := sts.Annotations[rolloutv1alpha1.ManagedByAnnotation]; ok && owner != pr.Name {
		stale, err := r.takeOverStale(ctx, s, owner)
		if err != nil || stale {
			return false, err
		}
		msg := fmt.Sprintf("StatefulSet %s is managed by PhasedRollout %s", sts.Name, owner)
		if pr.Status.Phase != rolloutv1alpha1.PhaseErrorCannotManage || pr.Status.Message != msg {
			s.event(pr, corev1.EventTypeWarning, rolloutv1alpha1.EventCannotManage, "%s; delete that PhasedRollout or this one", msg)
		}
		s.setPhase(rolloutv1alpha1.PhaseErrorCannotManage, "%s", msg)
		pr.Status.RollingPodStatus = nil
		return true, nil
	}
	return false, nil
}

// takeOverStale takes over a StatefulSet whose ManagedByAnnotation names owner, a PhasedRollout that
// no longer exists (the hand-back of reconcileDelete has not happened yet: the two race, either
// outcome leaves this PhasedRollout managing it) or that targets another StatefulSet, which would
// never hand it back. It rewrites the annotation
// with the partition the StatefulSet has (its default 0 when unset), so the StatefulSet rolls exactly
// as before until this PhasedRollout decides, and reports whether it took it over. An owner that
// exists and targets this StatefulSet keeps it.
func (r *Reconciler) takeOverStale(ctx context.Context, s *scope, owner string) (bool, error) {
	pr, sts := s.pr, s.sts
	other := &rolloutv1alpha1.PhasedRollout{}
	why := ""
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: pr.Namespace, Name: owner}, other); {
	case apierrors.IsNotFound(err):
		why = "does not exist"
	case err != nil:
		return false, fmt.Errorf("reading PhasedRollout %s, named by StatefulSet %s's %s annotation: %w", owner, sts.Name, rolloutv1alpha1.ManagedByAnnotation, err)
	case !slices.Contains(other.Spec.Targets(), sts.Name):
		why = fmt.Sprintf("targets StatefulSet %s", strings.Join(other.Spec.Targets(), ", "))
	default:
		return false, nil
	}
	partition := int32(0)
	if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		partition = *ru.Partition
	}
	if err := r.applyPartition(ctx, pr, sts, partition, true); err != nil {
		return false, err
	}
	sts.Annotations[rolloutv1alpha1.ManagedByAnnotation] = pr.Name
	log.FromContext(ctx).Info("took over a StatefulSet with stale ownership", "statefulSet", sts.Name, "previousOwner", owner, "reason", why)
	s.event(pr, corev1.EventTypeNormal, rolloutv1alpha1.EventOwnershipTakenOver, "StatefulSet %s was marked as managed by PhasedRollout %s, which %s; PhasedRollout %s takes it over (partition left at %d)", sts.Name, owner, why, pr.Name, partition)
	return true, nil
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
// revisions are known, so that nothing rolls unchecked meanwhile, and says so once (a PhasedRollout
// under way waits for a moment after each template change, silently).
func (r *Reconciler) holdIfNew(ctx context.Context, s *scope) error {
	pr := s.pr
	if pr.Status.Phase != "" {
		return nil
	}
	if err := r.applyPartition(ctx, pr, s.sts, s.replicas, true); err != nil {
		return err
	}
	msg := fmt.Sprintf("waiting for the StatefulSet controller to compute the revisions of StatefulSet %s; the partition is held at %d meanwhile", s.sts.Name, s.replicas)
	if pr.Status.Message != msg {
		s.event(pr, corev1.EventTypeNormal, rolloutv1alpha1.EventWaitForStatefulSetController, "%s", msg)
	}
	pr.Status.Message = msg
	return nil
}
