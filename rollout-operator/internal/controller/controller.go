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
package controller

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=apps,resources=controllerrevisions,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get

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
}

// Options adjust Setup for tests.
type Options struct {
	// Checker replaces the Prometheus checker.
	Checker Checker
	// QueryTimeout bounds one check; zero means 10 seconds.
	QueryTimeout time.Duration
}

// Setup registers the PhasedRollout controller with the manager, with its defaults.
func Setup(ctx context.Context, mgr ctrl.Manager) error {
	return SetupWithOptions(ctx, mgr, Options{})
}

// SetupWithOptions registers the PhasedRollout controller with the manager. It watches
// PhasedRollouts (spec changes only: its own status writes do not trigger it), StatefulSets and
// their pods (mapped to the PhasedRollout whose targetRef names the StatefulSet).
func SetupWithOptions(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	registerMetrics()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &rolloutv1alpha1.PhasedRollout{}, indexTarget, func(o client.Object) []string {
		return []string{o.(*rolloutv1alpha1.PhasedRollout).Spec.TargetRef}
	}); err != nil {
		return err
	}
	r := &Reconciler{
		Client:       mgr.GetClient(),
		APIReader:    mgr.GetAPIReader(),
		Recorder:     mgr.GetEventRecorder("rollout-operator"),
		Checker:      opts.Checker,
		QueryTimeout: opts.QueryTimeout,
	}
	if r.Checker == nil {
		r.Checker = PromChecker{}
	}
	if r.QueryTimeout <= 0 {
		r.QueryTimeout = 10 * time.Second
	}
	byTarget := func(ctx context.Context, ns, sts string) []reconcile.Request {
		var list rolloutv1alpha1.PhasedRolloutList
		if err := mgr.GetClient().List(ctx, &list, client.InNamespace(ns), client.MatchingFields{indexTarget: sts}); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for _, pr := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pr.Namespace, Name: pr.Name}})
		}
		return reqs
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("phasedrollout").
		For(&rolloutv1alpha1.PhasedRollout{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, deletingPredicate()))).
		Watches(&appsv1.StatefulSet{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return byTarget(ctx, o.GetNamespace(), o.GetName())
		})).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			ref := metav1.GetControllerOf(o)
			if ref == nil || ref.Kind != "StatefulSet" {
				return nil
			}
			return byTarget(ctx, o.GetNamespace(), ref.Name)
		}), builder.WithPredicates(podReadinessOrRevisionChanged())).
		Complete(r)
}

// deletingPredicate passes updates that set a deletion timestamp (finalizer changes do not bump the
// generation).
func deletingPredicate() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return !e.ObjectNew.GetDeletionTimestamp().IsZero()
	}}
}

// podReadinessOrRevisionChanged passes pod events that can unblock or block a step.
func podReadinessOrRevisionChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		oldPod, ok1 := e.ObjectOld.(*corev1.Pod)
		newPod, ok2 := e.ObjectNew.(*corev1.Pod)
		if !ok1 || !ok2 {
			return true
		}
		return isReady(oldPod) != isReady(newPod) ||
			oldPod.Labels[appsv1.ControllerRevisionHashLabelKey] != newPod.Labels[appsv1.ControllerRevisionHashLabelKey] ||
			!newPod.DeletionTimestamp.IsZero()
	}}
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
	if !controllerutil.ContainsFinalizer(pr, rolloutv1alpha1.Finalizer) {
		orig := pr.DeepCopy()
		controllerutil.AddFinalizer(pr, rolloutv1alpha1.Finalizer)
		if err := r.Client.Patch(ctx, pr, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding the finalizer: %w", err)
		}
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
	if serr := r.Client.Status().Patch(ctx, pr, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); serr != nil {
		if err == nil {
			err = fmt.Errorf("writing the status: %w", serr)
		}
		return reconcile.Result{}, err
	}
	for _, e := range s.events {
		r.Recorder.Eventf(e.regarding, nil, e.kind, e.reason, e.reason, "%s", e.note)
	}
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
		// so no pod moves to the newest revision unchecked.
		if err := r.applyPartition(ctx, pr, sts, replicas, true); err != nil {
			return reconcile.Result{}, err
		}
		pr.Status.UpdateRevision = target
		pr.Status.RolloutStartTime = ptr.To(metav1.NewTime(s.now))
		pr.Status.RolloutEndTime = nil
		pr.Status.RollingPodStatus = &rolloutv1alpha1.RollingPodStatus{Partition: ptr.To(replicas)}
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
		// Idle: every pod is on the current revision; hold the partition at replicas.
		if err := r.applyPartition(ctx, pr, sts, replicas, true); err != nil {
			return reconcile.Result{}, err
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

// step runs the current rollout step: wait for the rolled pod, for all pods, for the delay, then
// check; move the partition after successThreshold consecutive passes.
func (r *Reconciler) step(ctx context.Context, s *scope, replicas int32) (reconcile.Result, error) {
	pr, sts := s.pr, s.sts
	check := pr.Spec.Check
	partition := int32(0) // an unset partition is 0
	if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		partition = min(*ru.Partition, replicas)
	}
	st := pr.Status.RollingPodStatus
	if st == nil || st.Partition == nil || *st.Partition != partition {
		// A step belongs to one partition value: a partition the status does not record (the operator
		// stopped between the two writes, or someone else moved it) starts a new step with no passes.
		st = &rolloutv1alpha1.RollingPodStatus{Partition: ptr.To(partition)}
		pr.Status.RollingPodStatus = st
	}
	start := int32(0)
	if sts.Spec.Ordinals != nil {
		start = sts.Spec.Ordinals.Start
	}
	// The pod the checks judge: the one rolled by the last partition move, or, before the first
	// move, the first one to roll.
	index := max(min(partition, replicas-1), 0)
	st.Pod = fmt.Sprintf("%s-%d", sts.Name, start+index)
	if partition == 0 {
		pr.Status.Phase = rolloutv1alpha1.PhaseVerifying
		pr.Status.Message = fmt.Sprintf("every pod is on revision %s; verifying the last pod %s", pr.Status.UpdateRevision, st.Pod)
	} else {
		pr.Status.Phase = rolloutv1alpha1.PhaseRolling
		pr.Status.Message = fmt.Sprintf("rolling StatefulSet %s to revision %s: partition %d", sts.Name, pr.Status.UpdateRevision, partition)
	}

	pods, err := r.pods(ctx, sts)
	if err != nil {
		return reconcile.Result{}, err
	}
	minReady := time.Duration(sts.Spec.MinReadySeconds) * time.Second
	resetAnalysis := func(state rolloutv1alpha1.RollingPodState) {
		st.Status = state
		st.AnalisysStartTime = nil
		st.ConsecutiveSuccessfulChecks = 0
	}
	if partition < replicas {
		p, ok := pods[st.Pod]
		if !ok || p.Labels[appsv1.ControllerRevisionHashLabelKey] != pr.Status.UpdateRevision || !available(p, minReady, s.now) {
			resetAnalysis(rolloutv1alpha1.StepWaitForPodToBeUpdated)
			return reconcile.Result{RequeueAfter: pollWhileWaiting}, nil
		}
	}
	availableCount := int32(0)
	for _, p := range pods {
		if available(p, minReady, s.now) {
			availableCount++
		}
	}
	if availableCount < replicas {
		resetAnalysis(rolloutv1alpha1.StepWaitForAllPodsToBeAvailable)
		return reconcile.Result{RequeueAfter: pollWhileWaiting}, nil
	}
	if st.AnalisysStartTime == nil {
		delay := time.Duration(ptr.Deref(check.InitialDelaySeconds, 60)) * time.Second
		st.AnalisysStartTime = ptr.To(metav1.NewTime(ceilSecond(s.now.Add(delay))))
	}
	if wait := st.AnalisysStartTime.Sub(s.now); wait > 0 {
		st.Status = rolloutv1alpha1.StepWaitForInitialDelay
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	period := time.Duration(max(check.PeriodSeconds, 1)) * time.Second
	if st.LastCheckTime != nil {
		if wait := st.LastCheckTime.Add(period).Sub(s.now); wait > 0 {
			if st.Status != rolloutv1alpha1.StepPrometheusError {
				st.Status = rolloutv1alpha1.StepWaitForChecks
			}
			return reconcile.Result{RequeueAfter: wait}, nil
		}
	}
	return r.runCheck(ctx, s, replicas, partition, start+index)
}

// runCheck runs one check of the current step and acts on its result.
func (r *Reconciler) runCheck(ctx context.Context, s *scope, replicas, partition, ordinal int32) (reconcile.Result, error) {
	pr, sts, st := s.pr, s.sts, s.pr.Status.RollingPodStatus
	check := pr.Spec.Check
	threshold := max(check.SuccessThreshold, 1)
	period := time.Duration(max(check.PeriodSeconds, 1)) * time.Second

	res := r.check(ctx, s, ordinal)
	checkedAt := time.Now()
	checksTotal.WithLabelValues(pr.Namespace, pr.Name, res.Verdict.String()).Inc()
	st.LastCheckTime = ptr.To(metav1.NewTime(ceilSecond(checkedAt)))
	st.TotalChecks++
	pr.Status.LastQueryResult = res.Message
	if res.Verdict == VerdictPass {
		st.ConsecutiveSuccessfulChecks++
		st.ConsecutiveFailedChecks = 0
		st.Status = rolloutv1alpha1.StepWaitForChecks
		pr.Status.LastError = ""
	} else {
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
	}

	if st.ConsecutiveSuccessfulChecks >= threshold {
		stepsTotal.WithLabelValues(pr.Namespace, pr.Name).Inc()
		if st.AnalisysStartTime != nil {
			stepDuration.WithLabelValues(pr.Namespace, pr.Name).Observe(checkedAt.Sub(st.AnalisysStartTime.Time).Seconds())
		}
		if partition == 0 {
			pr.Status.Phase = rolloutv1alpha1.PhaseUpdated
			pr.Status.Message = fmt.Sprintf("StatefulSet %s is on revision %s and its last pod passed its checks", sts.Name, pr.Status.UpdateRevision)
			pr.Status.RolloutEndTime = ptr.To(metav1.NewTime(checkedAt))
			pr.Status.RollingPodStatus = nil
			s.event(pr, corev1.EventTypeNormal, rolloutv1alpha1.EventRolloutCompleted, "StatefulSet %s rolled to revision %s; every step passed its checks", sts.Name, pr.Status.UpdateRevision)
			if sts.Status.CurrentRevision == pr.Status.UpdateRevision {
				// Idle again: hold the partition at replicas (otherwise the next event does it).
				return reconcile.Result{}, r.applyPartition(ctx, pr, sts, replicas, true)
			}
			return reconcile.Result{RequeueAfter: pollWhileWaiting}, nil
		}
		next := partition - 1
		if err := r.applyPartition(ctx, pr, sts, next, true); err != nil {
			return reconcile.Result{}, err
		}
		s.overheadStart = &checkedAt
		pr.Status.RollingPodStatus = &rolloutv1alpha1.RollingPodStatus{
			Partition: ptr.To(next),
			Status:    rolloutv1alpha1.StepWaitForPodToBeUpdated,
		}
		pr.Status.Message = fmt.Sprintf("rolling StatefulSet %s to revision %s: partition %d", sts.Name, pr.Status.UpdateRevision, next)
		return reconcile.Result{RequeueAfter: pollWhileWaiting}, nil
	}
	if check.MaxTries != nil && st.TotalChecks >= *check.MaxTries {
		return r.fail(ctx, s, partition)
	}
	return reconcile.Result{RequeueAfter: period}, nil
}

// check builds the query of the current step and runs it.
func (r *Reconciler) check(ctx context.Context, s *scope, ordinal int32) CheckResult {
	pr := s.pr
	q := pr.Spec.Check.Query
	if q == nil {
		return CheckResult{Verdict: VerdictError, Message: "spec.check.query is not set"}
	}
	query := Query{
		URL:                q.URL,
		Expr:               expandQuery(q.Expr, pr.Namespace, s.sts.Name, pr.Status.RollingPodStatus.Pod, ordinal, pr.Status.UpdateRevision),
		InsecureSkipVerify: q.InsecureSkipVerify,
		SuccessWhen:        pr.Spec.Check.SuccessWhen,
		Timeout:            r.QueryTimeout,
	}
	if q.SecretRef != "" {
		secret := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: pr.Namespace, Name: q.SecretRef}, secret); err != nil {
			msg := fmt.Sprintf("reading Secret %s (check.query.secretRef): %v", q.SecretRef, err)
			s.event(pr, corev1.EventTypeWarning, rolloutv1alpha1.EventPrometheusConfigError, "%s", msg)
			return CheckResult{Verdict: VerdictError, Message: msg}
		}
		query.Token = string(secret.Data[rolloutv1alpha1.SecretKeyToken])
		query.Username = string(secret.Data[rolloutv1alpha1.SecretKeyUsername])
		query.Password = string(secret.Data[rolloutv1alpha1.SecretKeyPassword])
	}
	if _, err := NormalizeURL(q.URL); err != nil {
		s.event(pr, corev1.EventTypeWarning, rolloutv1alpha1.EventPrometheusConfigError, "%v", err)
	}
	return r.Checker.Check(ctx, query)
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

// expandQuery substitutes the placeholders {{namespace}}, {{statefulset}}, {{pod}}, {{ordinal}} and
// {{revision}} of a query.
func expandQuery(expr, namespace, sts, pod string, ordinal int32, revision string) string {
	return strings.NewReplacer(
		"{{namespace}}", namespace,
		"{{statefulset}}", sts,
		"{{pod}}", pod,
		"{{ordinal}}", strconv.Itoa(int(ordinal)),
		"{{revision}}", revision,
	).Replace(expr)
}

// fail stops the rollout after maxTries: phase Failed, Event, partition unchanged; with onFailure
// Rollback the StatefulSet's template is set back to its current revision.
func (r *Reconciler) fail(ctx context.Context, s *scope, partition int32) (reconcile.Result, error) {
	pr, sts := s.pr, s.sts
	pr.Status.Phase = rolloutv1alpha1.PhaseFailed
	pr.Status.RolloutEndTime = ptr.To(metav1.NewTime(time.Now()))
	pr.Status.Message = fmt.Sprintf("step at partition %d (pod %s) used up maxTries=%d without %d consecutive passing checks; the partition stays at %d. Fix the cause and edit the PhasedRollout (or push a new revision) to retry",
		partition, pr.Status.RollingPodStatus.Pod, ptr.Deref(pr.Spec.Check.MaxTries, 0), max(pr.Spec.Check.SuccessThreshold, 1), partition)
	if pr.Spec.Check.OnFailure == rolloutv1alpha1.OnFailureRollback {
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

// finalize hands the StatefulSet back when the PhasedRollout is deleted: when idle the partition
// goes to 0 (the normal rolling update resumes); mid-rollout the partition stays, so no pod is
// released unchecked, and an Event on the StatefulSet says so.
func (r *Reconciler) finalize(ctx context.Context, pr *rolloutv1alpha1.PhasedRollout) error {
	if !controllerutil.ContainsFinalizer(pr, rolloutv1alpha1.Finalizer) {
		return nil
	}
	sts := &appsv1.StatefulSet{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: pr.Namespace, Name: pr.Spec.TargetRef}, sts)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("reading StatefulSet %s: %w", pr.Spec.TargetRef, err)
	case sts.Annotations[rolloutv1alpha1.ManagedByAnnotation] != pr.Name:
		// Never managed by this PhasedRollout: nothing to hand back.
	default:
		midRollout := sts.Status.UpdateRevision != sts.Status.CurrentRevision ||
			pr.Status.Phase == rolloutv1alpha1.PhaseRolling || pr.Status.Phase == rolloutv1alpha1.PhaseVerifying || pr.Status.Phase == rolloutv1alpha1.PhaseFailed
		partition := int32(0)
		if midRollout {
			if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
				partition = *ru.Partition
			}
		}
		if skipCheck(pr) {
			partition = 0
			midRollout = false
		}
		if err := r.applyPartition(ctx, pr, sts, partition, false); err != nil {
			return err
		}
		if midRollout {
			r.Recorder.Eventf(sts, nil, corev1.EventTypeWarning, rolloutv1alpha1.EventPartitionLeftOnDeletion, "Release",
				"PhasedRollout %s was deleted mid-rollout; the partition stays at %d so the remaining pods are not rolled unchecked. Set spec.updateStrategy.rollingUpdate.partition yourself to continue", pr.Name, partition)
		}
	}
	orig := pr.DeepCopy()
	controllerutil.RemoveFinalizer(pr, rolloutv1alpha1.Finalizer)
	if err := r.Client.Patch(ctx, pr, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the finalizer: %w", err)
	}
	return nil
}

// setConditions derives the conditions from the phase.
func setConditions(pr *rolloutv1alpha1.PhasedRollout) {
	gen := pr.Generation
	set := func(t string, ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&pr.Status.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	phase := pr.Status.Phase
	reason := string(phase)
	if reason == "" {
		reason = "Unknown"
	}
	msg := pr.Status.Message
	bad := phase == rolloutv1alpha1.PhaseFailed || phase == rolloutv1alpha1.PhaseErrorCannotManage || phase == rolloutv1alpha1.PhaseErrorSTSNotFound
	set(rolloutv1alpha1.ConditionReady, !bad && pr.Status.LastError == "", reason, msg)
	set(rolloutv1alpha1.ConditionUpdated, phase == rolloutv1alpha1.PhaseUpdated, reason, msg)
	set(rolloutv1alpha1.ConditionProgressing, phase == rolloutv1alpha1.PhaseRolling || phase == rolloutv1alpha1.PhaseVerifying, reason, msg)
	set(rolloutv1alpha1.ConditionDegraded, bad, reason, msg)
}
