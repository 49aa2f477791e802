// Package controller is the PhasedRollout controller of rollout-operator: it rolls a StatefulSet to a
// new revision one pod at a time by owning spec.updateStrategy.rollingUpdate.partition (server-side
// apply, field manager "phasedrollout"), and moves the partition by one only after the step's
// Prometheus checks passed successThreshold times in a row.
//
// Safety: the PhasedRollout and the StatefulSet are read from the API server (not a cache) at every
// reconcile, the step's counters live in the PhasedRollout's status (written with a resourceVersion
// precondition), and a step belongs to the partition value it was started at: if the StatefulSet's
// partition differs from the step recorded in the status (the operator died between writing the
// partition and the status), a new step starts with no passes. The partition is written as an
// absolute value, so replaying a write never moves it twice. A check that cannot be evaluated is a
// failed check.
//
// Files: setup.go (options, flags, watches), controller.go (reconcile, revision decisions), step.go (the step machine and its
// checks), adopt_scale.go (adopting a rollout under way, scale-ups during a rollout), finalize.go
// (deletion), status.go (conditions), secretaccess.go (per-namespace Secret access through
// RoleBindings), prometheus.go (the Prometheus client), metrics.go.
package controller

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=apps,resources=controllerrevisions,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

const (
	indexTarget = "spec.targetRef" // PhasedRollout → the StatefulSet it manages
	// pollWhileWaiting bounds how long a step waits for pods without an event (watches usually
	// trigger sooner).
	pollWhileWaiting = 5 * time.Second
)

// Reconciler reconciles PhasedRollouts.
type Reconciler struct {
	// Client writes StatefulSets and PhasedRollout status.
	Client client.Client
	// APIReader reads PhasedRollouts, StatefulSets, pods and Secrets from the API server, so that a
	// decision to move the partition is never taken on a stale cache.
	APIReader client.Reader
	// Recorder records events.k8s.io Events.
	Recorder events.EventRecorder
	// Checker runs the Prometheus checks.
	Checker Checker
	// QueryTimeout bounds one check.
	QueryTimeout time.Duration
	// SecretAccess grants the operator read access to Secrets in a namespace before it reads one.
	SecretAccess *SecretAccess
}

// Reconcile drives one PhasedRollout one decision further.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pr := &rolloutv1alpha1.PhasedRollout{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, pr); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !pr.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, r.finalize(ctx, pr)
	}
	if _, err := opsutil.EnsureFinalizer(ctx, r.Client, pr, rolloutv1alpha1.Finalizer); err != nil {
		return reconcile.Result{}, err
	}
	orig := pr.DeepCopy()
	s := &scope{pr: pr, now: time.Now()}
	result, err := r.reconcileNormal(ctx, s)
	if err != nil {
		pr.Status.LastError = err.Error()
		if apierrors.IsConflict(err) {
			return reconcile.Result{}, err
		}
	}
	pr.Status.ObservedGeneration = pr.Generation
	setConditions(pr)
	// Written only when it changed (an idle rollout makes no API writes at rest), under an optimistic
	// lock: the partition decision recorded in it depends on the state read.
	if _, serr := opsutil.PatchStatus(ctx, r.Client, pr, orig, opsutil.WithOptimisticLock()); serr != nil {
		if err == nil {
			err = serr
		}
		return reconcile.Result{}, err
	}
	for _, e := range s.events {
		r.Recorder.Eventf(e.regarding, nil, e.kind, e.reason, e.reason, "%s", e.note)
	}
	r.waitingEvents(s, orig)
	if s.overheadStart != nil {
		stepOverhead.Observe(time.Since(*s.overheadStart).Seconds())
	}
	return result, err
}

// scope is one reconcile's state: the PhasedRollout being changed and the Events to record once
// its status is written.
type scope struct {
	pr            *rolloutv1alpha1.PhasedRollout
	sts           *appsv1.StatefulSet
	now           time.Time
	events        []pendingEvent
	overheadStart *time.Time
}

type pendingEvent struct {
	regarding client.Object
	kind      string
	reason    string
	note      string
}

func (s *scope) event(regarding client.Object, kind, reason, format string, args ...any) {
	s.events = append(s.events, pendingEvent{regarding: regarding, kind: kind, reason: reason, note: fmt.Sprintf(format, args...)})
}

// setPhase sets the phase and its message.
func (s *scope) setPhase(phase rolloutv1alpha1.PhasedRolloutPhase, format string, args ...any) {
	s.pr.Status.Phase = phase
	s.pr.Status.Message = fmt.Sprintf(format, args...)
}

// skipCheck reports whether skipCheck or its alias standardRollingUpdate is true.
func skipCheck(pr *rolloutv1alpha1.PhasedRollout) bool {
	return ptr.Deref(pr.Spec.SkipCheck, false) || ptr.Deref(pr.Spec.StandardRollingUpdate, false)
}

// reconcileNormal decides what the StatefulSet's partition must be and runs the current step.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (reconcile.Result, error) {
	pr := s.pr
	sts := &appsv1.StatefulSet{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: pr.Namespace, Name: pr.Spec.TargetRef}, sts); err != nil {
		if apierrors.IsNotFound(err) {
			s.setPhase(rolloutv1alpha1.PhaseErrorSTSNotFound, "StatefulSet %s not found in namespace %s", pr.Spec.TargetRef, pr.Namespace)
			pr.Status.RollingPodStatus = nil
			pr.Status.LastError = ""
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("reading StatefulSet %s: %w", pr.Spec.TargetRef, err)
	}
	s.sts = sts
	if owner, ok := sts.Annotations[rolloutv1alpha1.ManagedByAnnotation]; ok && owner != pr.Name {
		s.setPhase(rolloutv1alpha1.PhaseErrorCannotManage, "StatefulSet %s is managed by PhasedRollout %s", sts.Name, owner)
		pr.Status.RollingPodStatus = nil
		return reconcile.Result{}, nil
	}
	if sts.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		if pr.Status.Phase != rolloutv1alpha1.PhaseErrorCannotManage {
			s.event(pr, corev1.EventTypeWarning, rolloutv1alpha1.EventCannotManage, "StatefulSet %s has updateStrategy OnDelete; only RollingUpdate can be managed", sts.Name)
		}
		s.setPhase(rolloutv1alpha1.PhaseErrorCannotManage, "StatefulSet %s has updateStrategy OnDelete; set it to RollingUpdate to manage it", sts.Name)
		pr.Status.RollingPodStatus = nil
		return reconcile.Result{}, nil
	}
	replicas := ptr.Deref(sts.Spec.Replicas, 1)
	pr.Status.CurrentRevision = sts.Status.CurrentRevision
	if skipCheck(pr) {
		if err := r.applyPartition(ctx, pr, sts, 0, true); err != nil {
			return reconcile.Result{}, err
		}
		if pr.Status.Phase != rolloutv1alpha1.PhaseSuspended {
			s.event(pr, corev1.EventTypeNormal, rolloutv1alpha1.EventSuspended, "skipCheck is true: the normal rolling update of StatefulSet %s is resumed (partition 0)", sts.Name)
		}
		s.setPhase(rolloutv1alpha1.PhaseSuspended, "skipCheck is true: the StatefulSet rolls without checks")
		pr.Status.RollingPodStatus = nil
		pr.Status.LastError = ""
		return reconcile.Result{}, nil
	}
	if sts.Status.ObservedGeneration < sts.Generation || sts.Status.UpdateRevision == "" {
		// The StatefulSet controller has not yet computed the revisions of the latest spec.
		return reconcile.Result{RequeueAfter: time.Second}, r.holdIfNew(ctx, s, replicas)
	}
	target := sts.Status.UpdateRevision
	inRollout := pr.Status.UpdateRevision == target &&
		(pr.Status.Phase == rolloutv1alpha1.PhaseRolling || pr.Status.Phase == rolloutv1alpha1.PhaseVerifying)
	prevReplicas := pr.Status.Replicas
	pr.Status.Replicas = ptr.To(replicas)
	if prevReplicas != nil && replicas > *prevReplicas && pr.Status.UpdateRevision == target && sts.Status.CurrentRevision != target &&
		(inRollout || pr.Status.Phase == rolloutv1alpha1.PhaseFailed) {
		if err := r.scaledUp(ctx, s, *prevReplicas, replicas); err != nil {
			return reconcile.Result{}, err
		}
	}
	switch {
	case inRollout:
		return r.step(ctx, s, replicas)
	case pr.Status.UpdateRevision == target && pr.Status.Phase == rolloutv1alpha1.PhaseFailed && sts.Status.CurrentRevision != target:
		if pr.Status.ObservedGeneration == pr.Generation {
			// Stay stopped; the partition stays where it is. Editing the PhasedRollout retries.
			return reconcile.Result{}, nil
		}
		s.setPhase(rolloutv1alpha1.PhaseRolling, "retrying after the PhasedRollout was changed")
		pr.Status.RolloutEndTime = nil
		pr.Status.RollingPodStatus = nil
		return r.step(ctx, s, replicas)
	case sts.Status.CurrentRevision != target:
		// A new revision (or a second update during a rollout): start over from the highest ordinal,
		// so no pod moves to the newest revision unchecked. A PhasedRollout created during a rollout
		// the StatefulSet controller already started freezes it where it is instead.
		partition := replicas
		if pr.Status.Phase == "" {
			adopted, err := r.adoptablePartition(ctx, sts, replicas, target)
			if err != nil {
				return reconcile.Result{}, err
			}
			if adopted < replicas {
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
		return r.step(ctx, s, replicas)
	case !podsAllOn(ctx, r, sts, target):
		// The template went back to the current revision (a rollback, or a revert by the user): the
		// pods at or above the partition return to the revision every pod ran before, which needs no
		// check. Keep the partition until they are back.
		pr.Status.UpdateRevision = target
		pr.Status.RollingPodStatus = nil
		if pr.Status.Phase != rolloutv1alpha1.PhaseFailed {
			// Not Rolling: no check is needed and the partition must not move down.
			s.setPhase(rolloutv1alpha1.PhaseReady, "pods are returning to revision %s; the partition is held until they are back", target)
		}
		return reconcile.Result{RequeueAfter: pollWhileWaiting}, nil
	default:
		// Idle: every pod is on the current revision; hold the partition at replicas (written only when
		// it is not held yet, so an idle rollout makes no API writes at rest).
		if !partitionHeld(sts, pr, replicas) {
			if err := r.applyPartition(ctx, pr, sts, replicas, true); err != nil {
				return reconcile.Result{}, err
			}
		}
		// Failed stays visible until a retry or a new revision; Updated until a new revision.
		if pr.Status.Phase != rolloutv1alpha1.PhaseFailed && (pr.Status.Phase != rolloutv1alpha1.PhaseUpdated || pr.Status.UpdateRevision != target) {
			s.setPhase(rolloutv1alpha1.PhaseReady, "idle: partition held at %d, waiting for a new revision", replicas)
		}
		pr.Status.UpdateRevision = target
		pr.Status.RollingPodStatus = nil
		pr.Status.LastError = ""
		return reconcile.Result{}, nil
	}
}

// holdIfNew freezes a StatefulSet that is not yet managed (partition = replicas) before its
// revisions are known, so that nothing rolls unchecked meanwhile.
func (r *Reconciler) holdIfNew(ctx context.Context, s *scope, replicas int32) error {
	if s.pr.Status.Phase == "" {
		return r.applyPartition(ctx, s.pr, s.sts, replicas, true)
	}
	return nil
}

// podsAllOn reports whether every pod of the StatefulSet is on revision rev (a rollout that ended
// outside the operator's sight, e.g. a revert to the current revision).
func podsAllOn(ctx context.Context, r *Reconciler, sts *appsv1.StatefulSet, rev string) bool {
	pods, err := r.pods(ctx, sts)
	if err != nil {
		return false
	}
	for _, p := range pods {
		if p.Labels[appsv1.ControllerRevisionHashLabelKey] != rev {
			return false
		}
	}
	return true
}

// pods returns the StatefulSet's pods by name.
func (r *Reconciler) pods(ctx context.Context, sts *appsv1.StatefulSet) (map[string]*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("StatefulSet %s has an invalid selector: %w", sts.Name, err)
	}
	var list corev1.PodList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(sts.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing the pods of StatefulSet %s: %w", sts.Name, err)
	}
	pods := make(map[string]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		p := &list.Items[i]
		if ref := metav1.GetControllerOf(p); ref != nil && ref.UID == sts.UID {
			pods[p.Name] = p
		}
	}
	return pods, nil
}

// isReady reports the pod's Ready condition.
func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// available reports whether the pod is Ready since at least minReady and not being deleted.
func available(p *corev1.Pod, minReady time.Duration, now time.Time) bool {
	if !p.DeletionTimestamp.IsZero() {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue && (minReady == 0 || !c.LastTransitionTime.Add(minReady).After(now))
		}
	}
	return false
}

// partitionHeld reports whether the StatefulSet already has the partition and names pr as its manager.
func partitionHeld(sts *appsv1.StatefulSet, pr *rolloutv1alpha1.PhasedRollout, partition int32) bool {
	ru := sts.Spec.UpdateStrategy.RollingUpdate
	return ru != nil && ru.Partition != nil && *ru.Partition == partition && sts.Annotations[rolloutv1alpha1.ManagedByAnnotation] == pr.Name
}

// applyPartition server-side applies the partition (and the managed-by annotation when annotate)
// under the operator's field manager, forcing ownership of these two fields only.
func (r *Reconciler) applyPartition(ctx context.Context, pr *rolloutv1alpha1.PhasedRollout, sts *appsv1.StatefulSet, partition int32, annotate bool) error {
	ac := appsv1ac.StatefulSet(sts.Name, sts.Namespace).
		WithUID(sts.UID).
		WithSpec(appsv1ac.StatefulSetSpec().WithUpdateStrategy(appsv1ac.StatefulSetUpdateStrategy().
			WithRollingUpdate(appsv1ac.RollingUpdateStatefulSetStrategy().WithPartition(partition))))
	if annotate {
		ac.WithAnnotations(map[string]string{rolloutv1alpha1.ManagedByAnnotation: pr.Name})
	}
	if err := r.Client.Apply(ctx, ac, client.FieldOwner(rolloutv1alpha1.FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("setting the partition of StatefulSet %s to %d: %w", sts.Name, partition, err)
	}
	if sts.Spec.UpdateStrategy.RollingUpdate == nil {
		sts.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{}
	}
	sts.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To(partition)
	return nil
}
