package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// scope is what one reconcile of a StatefulSingleton reads and decides: the object, the status written
// once when Reconcile returns, the pods the caches show, and where a release's time went.
type scope struct {
	ss       *singletonv1.StatefulSingleton
	status   *singletonv1.StatefulSingletonStatus // the status Reconcile writes (writeStatus) unless skipStatus
	deleting bool
	// invalidSelector is the parser's error for a selector that does not parse (an object created before
	// the CRD refused such selectors): nothing is observed or acted on, and deletion completes at once.
	invalidSelector error
	// winner is the older StatefulSingleton whose selector overlaps this one's and which manages the
	// pods, or "" when this one does; with a winner, pods is nil (nothing was observed).
	winner string
	pods   *classifiedPods // the singleton's pods, from the caches
	// skipStatus leaves the status unwritten: the finalizer was removed (deletion finished), or the API
	// server did not confirm an adoption (the reconcile its event queues decides anew).
	skipStatus bool
	// released is set once this reconcile released the candidate: it is no longer held.
	released bool
	timing   handoverTiming
}

// handoverTiming is where a reconcile that releases a pod spent its time, for the release's log line:
// when it began, how long its live list and its epoch reservation (run concurrently) took, and how long
// it then waited for the record of the exit reports it counted on (ExitReports).
type handoverTiming struct {
	began                     time.Time
	list, reserve, exitRecord time.Duration
}

// Reconcile applies the safety rules of the package documentation to one StatefulSingleton: get it
// (gone: forget it), keep its namespace labelled, build the scope, write the status once at the end, and
// reconcile its deletion or its pods. The finalizer is ensured or dropped by reconcilePods, which knows
// whether a pod is held.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (result reconcile.Result, reterr error) {
	began := r.Clock.Now()
	ss := &singletonv1.StatefulSingleton{}
	if err := r.Cache.Get(ctx, req.NamespacedName, ss); apierrors.IsNotFound(err) {
		return reconcile.Result{}, r.forget(ctx, req.NamespacedName, "") // deleted without the finalizer
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if ss.DeletionTimestamp.IsZero() {
		if err := r.ensureNamespaceLabel(ctx, ss.Namespace, true); err != nil {
			return reconcile.Result{}, err
		}
	}
	s, err := r.newScope(ctx, ss, began)
	if err != nil {
		return reconcile.Result{}, err
	}
	defer func() {
		if reterr == nil && !s.skipStatus {
			summarize(s.status, s.ss)
			reterr = r.writeStatus(ctx, s.ss, s.status)
		}
	}()
	if s.deleting {
		return r.reconcileDelete(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

// ensureFinalizer adds the finalizer before the operator acts on a held pod (singletonv1.Finalizer): from
// then on a deletion waits until no pod is held. It reports whether the finalizer is in place; when the
// write conflicts (the StatefulSingleton changed, e.g. it is being deleted) nothing may be acted on in
// this reconcile, and the newer version's event reconciles again.
func (r *Reconciler) ensureFinalizer(ctx context.Context, s *scope) (bool, error) {
	if s.deleting {
		return true, nil // it kept the finalizer (an object being deleted without it is gone)
	}
	if _, err := opsutil.EnsureFinalizer(ctx, r.Client, s.ss, singletonv1.Finalizer); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			s.skipStatus = true
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// dropFinalizer removes the finalizer of a StatefulSingleton that is not being deleted once the caches
// show no held pod: at rest it has none, so an uninstall that deletes the operator and the CRD together
// completes. A held pod created meanwhile gets it back before any action (ensureFinalizer).
func (r *Reconciler) dropFinalizer(ctx context.Context, s *scope) error {
	if s.deleting || s.pods != nil && len(s.pods.held)+len(s.pods.conditional) > 0 {
		return nil
	}
	_, err := opsutil.RemoveFinalizer(ctx, r.Client, s.ss, singletonv1.Finalizer)
	if apierrors.IsConflict(err) {
		s.skipStatus = true // the newer version's event reconciles again
		return nil
	}
	return err
}

// newScope reads what this reconcile decides on: whether an older StatefulSingleton manages the pods,
// and if not the singleton's pods from the caches.
func (r *Reconciler) newScope(ctx context.Context, ss *singletonv1.StatefulSingleton, began time.Time) (*scope, error) {
	s := &scope{ss: ss, status: ss.Status.DeepCopy(), deleting: !ss.DeletionTimestamp.IsZero(), timing: handoverTiming{began: began}}
	s.status.ObservedGeneration = ss.Generation
	s.status.Handover = nil // set again by handover while it waits for a terminating pod
	reportSpecConcerns(s)
	if _, err := metav1.LabelSelectorAsSelector(&ss.Spec.Selector); err != nil {
		s.invalidSelector = err
		return s, nil
	}
	var err error
	if s.winner, err = r.selectorWinner(ctx, ss); err != nil {
		return nil, err
	}
	if s.winner != "" {
		return s, nil
	}
	if s.pods, err = r.listPods(ctx, ss, false); err != nil {
		return nil, err
	}
	for _, pod := range s.pods.all {
		s.status.Epoch = max(s.status.Epoch, podEpoch(pod)) // the epoch never goes back, also if status was lost
	}
	return s, nil
}

// reconcileNormal reconciles a StatefulSingleton that is not being deleted: it reports an overlapping
// selector, or adopts the only pod, running without a start hold, or runs the pods' phases.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (reconcile.Result, error) {
	if s.invalidSelector != nil {
		reportInvalidSelector(s)
		return reconcile.Result{}, r.dropFinalizer(ctx, s)
	}
	if s.winner != "" {
		reportSelectorConflict(s)
		return reconcile.Result{}, r.dropFinalizer(ctx, s)
	}
	r.recordObservation(s)
	r.auditStrategy(ctx, s)
	if s.adoptable() && runs(s.pods.ungated[0]) {
		return r.adopt(ctx, s, s.pods.ungated[0])
	}
	return r.reconcilePods(ctx, s)
}

// reconcilePods runs the phases of a StatefulSingleton that manages its pods, also while it is being
// deleted (a transition in progress finishes first): the pods without a start hold, the active pod,
// then either the steady state or the transition to the held candidate.
func (r *Reconciler) reconcilePods(ctx context.Context, s *scope) (reconcile.Result, error) {
	if err := r.reconcileUngated(ctx, s); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.reconcileActive(ctx, s); err != nil {
		return reconcile.Result{}, err
	}
	if len(s.pods.conditional) > 0 {
		// A release on a predecessor's exit is completed before anything else: until then its pod may run
		// and blocks every other (a held candidate waits its turn).
		if ok, err := r.ensureFinalizer(ctx, s); !ok || err != nil {
			return reconcile.Result{}, err
		}
		return r.settleStartOnExit(ctx, s)
	}
	if s.pods.candidate == nil {
		reportSteady(s)
		return reconcile.Result{}, r.dropFinalizer(ctx, s)
	}
	if ok, err := r.ensureFinalizer(ctx, s); !ok || err != nil {
		return reconcile.Result{}, err
	}
	return r.transition(ctx, s)
}

// reportSelectorConflict reports that an older StatefulSingleton (s.winner) manages the pods.
func reportSelectorConflict(s *scope) {
	setCondition(s.status, s.ss, singletonv1.ConditionSelectorConflict, metav1.ConditionTrue, singletonv1.ReasonSelectorOverlap,
		fmt.Sprintf("the selector overlaps StatefulSingleton %s, which is older and manages the pods; this one does nothing", s.winner))
	setCondition(s.status, s.ss, singletonv1.ConditionReady, metav1.ConditionFalse, singletonv1.ReasonSelectorOverlap, "selector overlaps StatefulSingleton "+s.winner)
	s.status.Message = "selector overlaps StatefulSingleton " + s.winner + "; delete one of them"
}

// recordObservation records what the caches show: the held pods metric, the hold fallbacks, and several
// active pods (OverlapDetected).
func (r *Reconciler) recordObservation(s *scope) {
	meta.RemoveStatusCondition(&s.status.Conditions, singletonv1.ConditionSelectorConflict)
	pods := s.pods
	heldPods.WithLabelValues(s.ss.Namespace, s.ss.Name).Set(float64(len(pods.held)))
	r.reportHoldFallbacks(s.ss, pods.all)
	if len(pods.active) > 1 {
		overlaps.Inc()
		setCondition(s.status, s.ss, singletonv1.ConditionOverlapDetected, metav1.ConditionTrue, singletonv1.ReasonSeveralActivePods,
			fmt.Sprintf("pods %s are all released and not terminal", podNames(pods.active)))
	} else {
		meta.RemoveStatusCondition(&s.status.Conditions, singletonv1.ConditionOverlapDetected)
	}
}

// reconcileActive sets the readiness gate of the released pods (it follows the release) and records the
// active pod in status.
func (r *Reconciler) reconcileActive(ctx context.Context, s *scope) error {
	pods := s.pods
	for _, pod := range pods.active {
		if err := r.markReady(ctx, pod); err != nil {
			return err
		}
	}
	// While a pod awaits the completion of its release on exit, it is the active pod (releaseOnExit).
	if len(pods.active) != 1 || len(pods.conditional) > 0 {
		return nil
	}
	// A recorded active pod that vanished from a node that never confirmed its stop stays recorded until
	// the node is fenced (waitForFencing reads it), also when another pod is active meanwhile: e.g. a pod
	// released on its predecessor's exit, force-deleted from a partitioned node while the predecessor
	// was still terminating.
	if uid := s.status.ActivePodUID; uid != "" && uid != string(pods.active[0].UID) {
		if unfenced, err := r.vanishedUnfenced(ctx, pods.all, types.UID(uid), s.status.ActivePodNode); err != nil || unfenced {
			return err
		}
	}
	s.status.ActivePod, s.status.ActivePodUID = pods.active[0].Name, string(pods.active[0].UID)
	if pods.active[0].Spec.NodeName != "" {
		s.status.ActivePodNode = pods.active[0].Spec.NodeName
	}
	return nil
}

// reportHoldFallbacks records, once per pod (per operator process), an Event on each pod of a Wrapper
// singleton that the webhook admitted with the scheduling gate instead, saying why. The webhook cannot:
// the pod does not exist yet when it is admitted.
func (r *Reconciler) reportHoldFallbacks(ss *singletonv1.StatefulSingleton, pods []*corev1.Pod) {
	key := client.ObjectKeyFromObject(ss)
	r.mu.Lock()
	defer r.mu.Unlock()
	reported := map[types.UID]bool{} // only pods still there: the set stays as small as the singleton
	for _, pod := range pods {
		reason, ok := pod.Annotations[singletonv1.AnnotationHoldFallback]
		if !ok {
			continue
		}
		reported[pod.UID] = true
		if !r.fallback[key][pod.UID] {
			r.Recorder.Eventf(pod, ss, corev1.EventTypeWarning, singletonv1.ReasonHoldFallback, "Admit",
				"held with the scheduling gate instead of the wrapper: %s", reason)
		}
	}
	r.fallback[key] = reported
}
