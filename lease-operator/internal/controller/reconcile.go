package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// scope is what one reconcile of a StatefulSetLock reads and decides; its status is computed from it
// (applyStatus).
type scope struct {
	lock     *leasev1.StatefulSetLock
	deleting bool
	// orig is the lock as read: the base of the status patch and, the first time, of the waiting Event.
	orig     *leasev1.StatefulSetLock
	now      time.Time
	duration time.Duration // the Lease's duration

	// Read by the election.
	lease  *coordinationv1.Lease // the lock's Lease; nil when there is none
	holder Holder                // the writer as the Lease (or, without one, the status) records it
	pods   []corev1.Pod

	// Decided.
	decision   Decision
	leaseWrite leaseWrite
	renewAfter time.Duration // when the Lease of the writer is due for renewal
	result     reconcile.Result

	// The status. state is the reason of the Available condition: ReasonAvailable, ReasonNoReadyPods,
	// ReasonFailoverDelayed, or one of the error reasons (StatefulSetNotFound, LeaseConflict,
	// StatefulSetConflict, ReconcileError).
	state   string
	message string
	// known is whether writer and transitions were determined (false on errors before the election).
	known       bool
	writer      Holder
	transitions int32
	// switchoverPending says why a switchover the annotation asks for waits ("" when none waits).
	switchoverPending string
	// writerUnrouted says this reconcile emptied the writer's EndpointSlice (unrouteWriter): the cache
	// still shows what was there before.
	writerUnrouted bool
	// failoverReason is set when the writer changed in this reconcile.
	failoverReason string
	failoverTime   time.Time
	// steps is where the reconcile's time went, step by step (logged with a failover).
	steps   []any
	stepEnd time.Time
}

// step records the time since the previous step (or the reconcile's start) under name.
func (s *scope) step(now time.Time, name string) {
	s.steps = append(s.steps, name, now.Sub(s.stepEnd).String())
	s.stepEnd = now
}

func (r *Reconciler) newScope(lock *leasev1.StatefulSetLock) *scope {
	now := r.Clock.Now()
	return &scope{
		lock: lock, deleting: !lock.DeletionTimestamp.IsZero(), orig: lock.DeepCopy(), now: now, stepEnd: now,
		duration: time.Duration(lock.Spec.LeaseDurationSeconds) * time.Second,
	}
}

// wait ends the reconcile in a state in which the lock waits for something outside it.
func (s *scope) wait(state, message string, result reconcile.Result) {
	s.state, s.message, s.result = state, message, result
}

// Reconcile elects, labels and records the writer of one StatefulSetLock, or, when the lock no longer
// exists, removes what it left (reconcileGone).
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	lock := &leasev1.StatefulSetLock{}
	if err := r.Client.Get(ctx, req.NamespacedName, lock); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, r.reconcileGone(ctx, req.NamespacedName)
		}
		return reconcile.Result{}, err
	}
	return r.reconcileLock(ctx, lock)
}

// reconcileLock is the reconcile of a lock that exists.
func (r *Reconciler) reconcileLock(ctx context.Context, lock *leasev1.StatefulSetLock) (_ reconcile.Result, reterr error) {
	if removed, err := opsutil.RemoveFinalizer(ctx, r.Client, lock, leasev1.Finalizer); err != nil {
		return reconcile.Result{}, err
	} else if removed {
		r.writes.Wrote(lock) // a lock of an older version: see reconcileDelete for why it has none now
	}
	s := r.newScope(lock)
	defer func() { reterr = r.patchStatus(ctx, s, reterr) }()
	if s.deleting {
		return reconcile.Result{}, r.reconcileDelete(ctx, s)
	}
	if err := r.reconcileNormal(ctx, s); err != nil {
		return reconcile.Result{}, err
	}
	return s.result, nil
}

// patchStatus writes the status computed from the scope, the one status write of a reconcile, and
// records the waiting Event once it is written. err is the reconcile's error: a conflict writes
// nothing (someone, the kubelet or another writer, changed an object since it was read: the next
// reconcile decides again); any other error is the ReconcileError state.
func (r *Reconciler) patchStatus(ctx context.Context, s *scope, err error) error {
	if s.deleting {
		return err // a lock being deleted keeps its last status: nothing is decided for it any more
	}
	if apierrors.IsConflict(err) {
		return err
	}
	if err != nil {
		// What the election found before the error is not reported.
		s.state, s.message, s.known, s.failoverReason = leasev1.ReasonReconcileError, err.Error(), false, ""
	}
	applyStatus(s)
	written, serr := opsutil.PatchStatus(ctx, r.Client, s.lock, s.orig)
	if serr != nil {
		return cmp.Or(err, serr)
	}
	if written {
		r.writes.Wrote(s.lock)
	}
	r.waitingEvent(s.lock, r.written.swap(s.lock, s.orig.Status.Conditions))
	return err
}

// waitingEvent records an Event when the lock enters a state in which it has no working writer (no
// StatefulSet, no Ready pod, a failover delayed, a conflict, an error), once per entry: kubectl describe
// says why it waits. A Warning for the error states.
// before is the lock's conditions as this process last wrote them (or as read, the first time).
func (r *Reconciler) waitingEvent(lock *leasev1.StatefulSetLock, before []metav1.Condition) {
	eventType := corev1.EventTypeNormal
	if c := meta.FindStatusCondition(lock.Status.Conditions, leasev1.ConditionReady); c != nil && errorStates[c.Reason] {
		eventType = corev1.EventTypeWarning
	}
	opsutil.EventOnTransition(r.Recorder, lock, nil, before, lock.Status.Conditions, opsutil.Transition{
		Type: leasev1.ConditionReady, Status: metav1.ConditionFalse, EventType: eventType, Action: "Wait",
	})
	// A switchover that waits keeps a working writer (Ready stays True): its Event comes from the
	// Reconciling condition, whose other reasons are already announced by Ready above.
	if c := meta.FindStatusCondition(lock.Status.Conditions, leasev1.ConditionReconciling); c != nil && c.Reason == leasev1.ReasonSwitchoverPending {
		opsutil.EventOnTransition(r.Recorder, lock, nil, before, lock.Status.Conditions, opsutil.Transition{
			Type: leasev1.ConditionReconciling, Status: metav1.ConditionTrue, EventType: corev1.EventTypeNormal, Action: "Wait",
		})
	}
}

// reconcileNormal runs one election and makes the pods and the Lease agree with it, in the order that
// keeps one writer at every instant: demote, move the Lease, promote.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) error {
	if waiting, err := r.checkOwnership(ctx, s); err != nil || waiting {
		return err
	}
	if err := r.elect(ctx, s); err != nil {
		return err
	}
	s.step(r.Clock.Now(), "read")
	if waiting, err := r.fence(ctx, s); err != nil || waiting {
		return err
	}
	s.step(r.Clock.Now(), "fence")
	// Routing leaves the old writer before its label does (spec.services.endpoints: Operator).
	if err := r.unrouteWriter(ctx, s); err != nil {
		return err // nobody is demoted or promoted
	}
	if err := r.demotePods(ctx, s); err != nil {
		return err // nothing below runs: nobody is promoted
	}
	s.step(r.Clock.Now(), "demote")
	if err := r.moveLease(ctx, s); err != nil {
		return err
	}
	s.step(r.Clock.Now(), "lease")
	if err := r.promoteWriter(ctx, s); err != nil {
		return err
	}
	// Routing reaches the new writer once its label does, in the same step.
	if err := r.routeWriter(ctx, s); err != nil {
		return err
	}
	s.step(r.Clock.Now(), "promote")
	r.recordFailover(ctx, s)
	if err := r.endSwitchover(ctx, s); err != nil {
		return err
	}
	if err := r.reconcileServices(ctx, s.lock); err != nil {
		return err
	}
	if err := r.reconcileSlices(ctx, s); err != nil {
		return err
	}
	r.schedule(s)
	return nil
}

// checkOwnership reads the lock's StatefulSet and Lease and reports whether the lock must wait: an
// older lock manages the StatefulSet, the StatefulSet does not exist, or the Lease belongs to someone
// else.
func (r *Reconciler) checkOwnership(ctx context.Context, s *scope) (waiting bool, err error) {
	lock, retry := s.lock, reconcile.Result{RequeueAfter: s.duration}
	if older, err := r.olderLock(ctx, lock); err != nil {
		return false, err
	} else if older != "" {
		s.wait(leasev1.ReasonStatefulSetConflict,
			fmt.Sprintf("StatefulSetLock %s already manages StatefulSet %s; this lock leaves its pods alone", older, lock.Spec.StatefulSetName), retry)
		return true, nil
	}
	if err := r.Cache.Get(ctx, types.NamespacedName{Namespace: lock.Namespace, Name: lock.Spec.StatefulSetName}, statefulSetMeta("")); err != nil {
		if apierrors.IsNotFound(err) {
			s.wait(leasev1.ReasonStatefulSetNotFound, fmt.Sprintf("StatefulSet %s not found", lock.Spec.StatefulSetName), reconcile.Result{})
			return true, nil
		}
		return false, err
	}
	if s.lease, err = r.getLease(ctx, lock); err != nil {
		return false, err
	}
	if s.lease != nil && !ownedBy(s.lease, lock) {
		// The Warning Event is the waiting state's (waitingEvent).
		s.wait(leasev1.ReasonLeaseConflict,
			fmt.Sprintf("Lease %s exists and is not owned by this StatefulSetLock; it is left untouched", s.lease.Name), retry)
		return true, nil
	}
	return false, nil
}

// elect reads the pods and decides the writer and what the Lease must record.
func (r *Reconciler) elect(ctx context.Context, s *scope) error {
	lock := s.lock
	s.holder, s.leaseWrite.transitions = Holder{Name: lock.Status.WriterPod, UID: types.UID(lock.Status.WriterPodUID)}, lock.Status.LeaseTransitions
	if s.lease != nil {
		s.holder, s.leaseWrite.transitions = leaseHolder(s.lease), ptr.Deref(s.lease.Spec.LeaseTransitions, 0)
	}
	var err error
	if s.pods, err = r.listPods(ctx, lock); err != nil {
		return err
	}
	if s.lease == nil && s.holder.Name == "" {
		s.holder, s.leaseWrite.transitions = labelledWriter(s.pods, lock.Name, s.leaseWrite.transitions)
	}
	views, err := r.podViews(ctx, lock, s.pods, s.now)
	if err != nil {
		return err
	}
	s.decision = Decide(ElectionInput{
		Holder: s.holder, Pods: views, Now: s.now,
		FailoverDelay: time.Duration(lock.Spec.FailoverDelaySeconds) * time.Second,
		SwitchoverTo:  lock.Annotations[leasev1.SwitchoverAnnotation],
	})
	w := &s.leaseWrite
	w.holder = s.decision.Writer
	w.moved = w.holder.Name != s.holder.Name || (s.holder.UID != "" && w.holder.UID != s.holder.UID)
	if w.moved {
		w.transitions++
	}
	return nil
}

// fence makes sure, before the Lease is created or moved or a pod labelled writer, that no pod outside
// this election is still labelled writer for the lock's Lease (read from the API server, at least as
// fresh as the Lease read live, not from the cache): one labelled by another lock that exists makes
// this lock wait (LeaseConflict); one labelled by a lock that no longer exists (deleted while the
// operator was not running, or whose cleanup has not run yet) loses its role labels first. The pods of
// this lock are demoted by demotePods.
//
// It may list at the version of the lock's Lease it read live (a quorum read), instead of a
// consistent list that waits for the watch cache (opsutil.NotOlderThan; the fence's list was 64 of a
// failover's 115 ms at p50 on kwok): a pod labelled writer for that Lease name by another lock was
// labelled before that version. Another lock labels a writer only after its own write of the Lease
// succeeded, and this lock owns the Lease, which it only creates once no Lease exists (a lock's Lease is
// deleted with it) and then only updates under a resourceVersion precondition: any label of another
// lock precedes the creation, so any version since.
func (r *Reconciler) fence(ctx context.Context, s *scope) (waiting bool, err error) {
	writer := s.decision.Writer.Name
	if writer == "" {
		return false, nil // nothing is labelled writer, the Lease is not taken
	}
	i := slices.IndexFunc(s.pods, func(p corev1.Pod) bool { return p.Name == writer })
	if s.lease != nil && !s.leaseWrite.moved && hasRole(&s.pods[i], writerRole(s.lock, epochString(s.leaseWrite.transitions))) {
		return false, nil // the writer keeps its Lease and its labels: nothing is taken or labelled
	}
	writers, err := r.listWritersFor(ctx, s)
	if err != nil {
		return false, err
	}
	for i := range writers {
		pod := &writers[i]
		if pod.Annotations[leasev1.WriterLeaseAnnotation] != s.lock.Spec.LeaseName {
			continue
		}
		owner := pod.Labels[leasev1.LockLabel]
		if owner == s.lock.Name && slices.ContainsFunc(s.pods, func(p corev1.Pod) bool { return p.UID == pod.UID }) {
			continue // this lock's own pod: demotePods relabels it
		}
		if owner != s.lock.Name && owner != "" {
			exists, err := r.lockExists(ctx, s.lock.Namespace, owner)
			if err != nil {
				return false, err
			}
			if exists {
				s.wait(leasev1.ReasonLeaseConflict, fmt.Sprintf("Pod %s is the writer for Lease %s of StatefulSetLock %s; this lock labels no writer while it is",
					pod.Name, s.lock.Spec.LeaseName, owner), reconcile.Result{RequeueAfter: s.duration})
				return true, nil
			}
		}
		if err := r.removeRole(ctx, pod, s.lock); err != nil {
			return false, err
		}
	}
	return false, nil
}

// listWritersFor lists, live (fence), the pods of the lock's namespace labelled writer for its Lease
// (the writer-lease-key label), and those labelled writer by a version that did not write that label
// (none once every writer was labelled again): with 1,000 locks in a namespace, listing every writer
// and keeping those whose annotation names the Lease cost the fence 204 ms at p50 (TestBenchLeaseScale).
func (r *Reconciler) listWritersFor(ctx context.Context, s *scope) ([]corev1.Pod, error) {
	unkeyed, err := labels.NewRequirement(leasev1.WriterLeaseKeyLabel, selection.DoesNotExist, nil)
	if err != nil {
		return nil, err
	}
	writer, err := labels.NewRequirement(leasev1.RoleLabel, selection.Equals, []string{leasev1.RoleWriter})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, sel := range []client.ListOption{
		client.MatchingLabels{leasev1.RoleLabel: leasev1.RoleWriter, leasev1.WriterLeaseKeyLabel: leaseKey(s.lock.Spec.LeaseName)},
		client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*writer, *unkeyed)},
	} {
		var writers corev1.PodList
		opts := []client.ListOption{client.InNamespace(s.lock.Namespace), sel}
		if s.lease != nil {
			opts = append(opts, opsutil.NotOlderThan(s.lease.ResourceVersion))
		}
		if err := r.APIReader.List(ctx, &writers, opts...); err != nil {
			return nil, fmt.Errorf("listing writer pods: %w", err)
		}
		out = append(out, writers.Items...)
	}
	return out, nil
}

// demotePods labels every pod but the new writer reader. When the writer moves, the previous one (as
// the Lease and as the status record it) is demoted whatever the cache shows.
func (r *Reconciler) demotePods(ctx context.Context, s *scope) error {
	var force []string
	if s.leaseWrite.moved {
		force = []string{s.holder.Name}
		if s.lock.Status.WriterPod != s.holder.Name {
			force = append(force, s.lock.Status.WriterPod)
		}
	}
	demoted, err := r.demote(ctx, s.lock, s.pods, s.decision.Writer.Name, force)
	if err != nil {
		return err
	}
	for _, name := range demoted {
		r.Recorder.Eventf(s.lock, podRef(s.lock.Namespace, name), corev1.EventTypeNormal, leasev1.EventWriterDemoted, "Demote",
			"Pod %s is no longer the writer (%s)", name, cmp.Or(s.decision.Reason, "label corrected"))
	}
	return nil
}

// moveLease moves (or renews) the Lease under its resourceVersion precondition, when it records
// another state or the writer's renewal is due.
func (r *Reconciler) moveLease(ctx context.Context, s *scope) error {
	due := true
	s.renewAfter = s.duration / 2
	if s.lease != nil && s.decision.Writer.Name != "" {
		due, s.renewAfter = renewal(s.lease, s.duration, s.now)
	}
	if s.lease == nil && s.decision.Writer.Name == "" {
		return nil // a Lease exists only once there is a holder, as in the original operator
	}
	if leaseCurrent(s.lease, s.lock, s.leaseWrite) && (s.decision.Writer.Name == "" || !due) {
		return nil
	}
	lease, err := r.writeLease(ctx, s.lock, s.lease, s.leaseWrite, s.now)
	if err != nil {
		return err
	}
	s.lease, s.renewAfter = lease, s.duration/2
	return nil
}

// promoteWriter labels the writer with its fencing epoch; without a writer the lock has no Ready pod.
func (r *Reconciler) promoteWriter(ctx context.Context, s *scope) error {
	writer, epoch := s.decision.Writer, s.leaseWrite.transitions
	s.state, s.known, s.writer, s.transitions = leasev1.ReasonAvailable, true, writer, epoch
	if writer.Name == "" {
		s.state = leasev1.ReasonNoReadyPods
		return nil
	}
	i := slices.IndexFunc(s.pods, func(p corev1.Pod) bool { return p.Name == writer.Name })
	promoted, err := r.promote(ctx, &s.pods[i], writerRole(s.lock, epochString(epoch)))
	if err != nil {
		return err
	}
	if promoted {
		r.Recorder.Eventf(s.lock, podRef(s.lock.Namespace, writer.Name), corev1.EventTypeNormal, leasev1.EventWriterElected, "Elect",
			"Pod %s is the writer with epoch %d (%s)", writer.Name, epoch, cmp.Or(s.decision.Reason, "label restored"))
	}
	return nil
}

// recordFailover counts a change of writer and measures its latency from when the old writer was first
// seen unusable.
func (r *Reconciler) recordFailover(ctx context.Context, s *scope) {
	if !s.leaseWrite.moved {
		return
	}
	s.failoverReason, s.failoverTime = cmp.Or(s.decision.Reason, leasev1.FailoverReasonInitialElection), r.Clock.Now()
	failovers.WithLabelValues(s.failoverReason).Inc()
	queued := time.Duration(-1) // unknown: the old writer was never seen usable by this process
	if since, ok := r.obs.unusableSince(s.holder); ok {
		failoverLatency.WithLabelValues(s.failoverReason).Observe(r.Clock.Since(since).Seconds())
		r.obs.clear("pod/" + string(s.holder.UID))
		queued = s.now.Sub(since)
	}
	// Where the failover's time went: queued (old writer seen unusable → this reconcile began), then
	// each step of the reconcile.
	ctrl.LoggerFrom(ctx).Info("Moved the writer", append([]any{"from", s.holder.Name, "to", s.decision.Writer.Name,
		"reason", s.failoverReason, "epoch", s.leaseWrite.transitions, "queued", queued.String()}, s.steps...)...)
}

// endSwitchover removes the switchover annotation once the writer is its target; until then the
// switchover waits (for its target to be Ready, on a Ready node, not terminating) and says so.
func (r *Reconciler) endSwitchover(ctx context.Context, s *scope) error {
	target := s.lock.Annotations[leasev1.SwitchoverAnnotation]
	switch {
	case target == "":
		return nil
	case target == s.decision.Writer.Name:
		return r.clearSwitchover(ctx, s.lock)
	}
	s.switchoverPending = fmt.Sprintf("Switchover to pod %s waits until it is Ready, not terminating and on a Ready node; %s stays the writer",
		target, cmp.Or(s.decision.Writer.Name, "no pod"))
	return nil
}

// schedule sets when the lock is reconciled again: at the writer's renewal, or when a delayed failover
// is due.
//
// A renewal is queued behind every event (handler.LowPriority; controller-runtime's priority queue):
// it is due at half the Lease's duration, so the other half is its slack, while a failover has none.
// With 1,000 locks the renewals of locks created together come in bursts (730 in 10 s) that queued
// failovers for seconds (TestBenchLeaseScale). An event for the lock meanwhile raises it to the
// event's priority, and a due failover keeps the normal one.
func (r *Reconciler) schedule(s *scope) {
	if s.decision.Writer.Name != "" {
		s.result.RequeueAfter = s.renewAfter
		s.result.Priority = ptr.To(handler.LowPriority)
	}
	if s.decision.RetryAfter > 0 {
		s.state = leasev1.ReasonFailoverDelayed
		s.message = fmt.Sprintf("Writer %s is not Ready; failover in %s unless it recovers",
			s.decision.Writer.Name, s.decision.RetryAfter.Round(time.Millisecond))
		s.result.RequeueAfter = min(s.result.RequeueAfter, s.decision.RetryAfter)
		s.result.Priority = ptr.To(0)
	}
}

// reconcileDelete does nothing to the pods yet: a lock has no finalizer, and the labels go once the
// lock is gone (reconcileGone), whether the operator saw the deletion or learns of it later.
//
// Why no finalizer: the cleanup it guarded (removing the role labels, deleting the Lease) does not need
// to hold the lock. The Lease is owned by its lock (a controller ownerReference), so the garbage
// collector deletes it; the role labels are removed by reconcileGone, and until then no other lock
// labels a writer for the same Lease (fence). A finalizer instead wedged `kubectl delete -f
// deploy/lease-operator.yaml` (the operator is gone before the CRD's locks, which then keep its
// finalizer for ever).
//
// A lock being deleted reaches here only while another finalizer holds it (foreground deletion
// waiting for the garbage collector to delete its Lease); the finalizer of an older version was
// removed above.
func (r *Reconciler) reconcileDelete(_ context.Context, s *scope) error {
	r.forget(s.lock)
	return nil
}

// reconcileGone removes what a lock that no longer exists left behind, when the operator learns of it
// (the lock's deletion, or a pod that still names it, e.g. after a re-install): the role labels of every
// pod it labelled, one patch per pod (one that fails does not hold the others back), retried (the
// reconcile's error) until none is left, then its Lease if the garbage collector has not deleted it
// yet. The labels go first: a lock that shares the Lease waits for it, and fence checks the labels
// again before electing.
//
// During an uninstall (the StatefulSetLock CRD being deleted, or gone) nothing is removed: the locks go
// with their CRD while the operator is stopping, and its cleanup would be cut off half-way (by its own
// termination, by its RBAC being deleted); the labels are kept as they were, for every lock, as
// docs/lease.md (Uninstall) states, and the garbage collector deletes the Leases. A re-installed
// operator removes them (the pods still name their lock).
func (r *Reconciler) reconcileGone(ctx context.Context, key types.NamespacedName) error {
	if exists, err := r.lockExists(ctx, key.Namespace, key.Name); err != nil || exists {
		return err // the cache is behind a lock just created: its own event reconciles it
	}
	if uninstall, err := r.uninstalling(ctx); err != nil || uninstall {
		return err
	}
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.InNamespace(key.Namespace), client.MatchingLabels{leasev1.LockLabel: key.Name}); err != nil {
		return fmt.Errorf("listing the pods of deleted StatefulSetLock %s: %w", key.Name, err)
	}
	// The slices go first: the writer's never names a pod that is not labelled writer.
	if err := r.deleteGoneSlices(ctx, key); err != nil {
		return err
	}
	var errs []error // one pod that cannot be patched does not hold the others back
	for i := range pods.Items {
		errs = append(errs, r.removeRole(ctx, &pods.Items[i], nil))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := r.deleteGoneServices(ctx, key); err != nil {
		return err
	}
	var leases coordinationv1.LeaseList
	if err := r.APIReader.List(ctx, &leases, client.InNamespace(key.Namespace), client.MatchingLabels{leasev1.LockLabel: key.Name}); err != nil {
		return fmt.Errorf("listing the Leases of deleted StatefulSetLock %s: %w", key.Name, err)
	}
	for i := range leases.Items {
		lease := &leases.Items[i]
		if !controlledByLockNamed(lease, key.Name) {
			continue
		}
		err := r.Client.Delete(ctx, lease, client.Preconditions{UID: &lease.UID, ResourceVersion: &lease.ResourceVersion})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting Lease %s of deleted StatefulSetLock %s: %w", lease.Name, key.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("Deleted the Lease of a deleted StatefulSetLock", "lease", lease.Name)
	}
	return nil
}

// removeRole removes the role labels of a pod labelled by a lock that no longer exists, under the
// resourceVersion of the live copy read (a pod relabelled since by a lock that exists is not
// touched: the conflict makes the caller read again), and says so in an Event: regarding the lock
// that found it (by), or the pod itself.
func (r *Reconciler) removeRole(ctx context.Context, pod *corev1.Pod, by *leasev1.StatefulSetLock) error {
	gone, wasRole := pod.Labels[leasev1.LockLabel], pod.Labels[leasev1.RoleLabel]
	if err := r.setRole(ctx, pod, role{}, true); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("removing the role labels of pod %s: %w", pod.Name, err)
	}
	note := fmt.Sprintf("Removed the role %s of pod %s: StatefulSetLock %s that labelled it no longer exists", wasRole, pod.Name, cmp.Or(gone, "(unknown)"))
	if by != nil {
		r.Recorder.Eventf(by, podRef(pod.Namespace, pod.Name), corev1.EventTypeNormal, leasev1.EventRoleRemoved, "RemoveRole", note)
	} else {
		r.Recorder.Eventf(pod, nil, corev1.EventTypeNormal, leasev1.EventRoleRemoved, "RemoveRole", note)
	}
	ctrl.LoggerFrom(ctx).Info("Removed the role labels of a deleted lock's pod", "pod", pod.Name, "role", wasRole, "statefulSetLock", gone)
	return nil
}

// uninstalling reports whether the StatefulSetLock CRD is being deleted or is gone, read live.
func (r *Reconciler) uninstalling(ctx context.Context) (bool, error) {
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	err := r.APIReader.Get(ctx, types.NamespacedName{Name: r.lockCRD}, crd)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading CustomResourceDefinition %s: %w", r.lockCRD, err)
	}
	if !crd.DeletionTimestamp.IsZero() {
		ctrl.LoggerFrom(ctx).Info("The StatefulSetLock CRD is being deleted: the role labels of deleted locks are kept")
		return true, nil
	}
	return false, nil
}

// lockExists reads the lock from the API server: whether a lock exists decides whether labels are
// removed, and the cache may be behind.
func (r *Reconciler) lockExists(ctx context.Context, namespace, name string) (bool, error) {
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &leasev1.StatefulSetLock{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading StatefulSetLock %s: %w", name, err)
	}
	return true, nil
}

// forget drops what the process remembers about a lock that is going away.
func (r *Reconciler) forget(lock *leasev1.StatefulSetLock) {
	r.writes.Forget(lock)
	r.written.forget(lock)
}

// clearSwitchover removes the switchover annotation once the writer is its target.
func (r *Reconciler) clearSwitchover(ctx context.Context, lock *leasev1.StatefulSetLock) error {
	orig := lock.DeepCopy()
	delete(lock.Annotations, leasev1.SwitchoverAnnotation)
	if err := r.Client.Patch(ctx, lock, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("removing the %s annotation: %w", leasev1.SwitchoverAnnotation, err)
	}
	r.writes.Wrote(lock)
	return nil
}

// olderLock returns the name of another StatefulSetLock that names the same StatefulSet and was
// created first (ties broken by name) and is not being deleted: only that one manages the pods.
func (r *Reconciler) olderLock(ctx context.Context, lock *leasev1.StatefulSetLock) (string, error) {
	var locks leasev1.StatefulSetLockList
	if err := r.Cache.List(ctx, &locks, client.InNamespace(lock.Namespace), client.MatchingFields{indexLockStatefulSet: lock.Spec.StatefulSetName}); err != nil {
		return "", fmt.Errorf("listing StatefulSetLocks: %w", err)
	}
	for _, other := range locks.Items {
		if other.UID == lock.UID || !other.DeletionTimestamp.IsZero() {
			continue
		}
		if precedes(&other, lock) {
			return other.Name, nil
		}
	}
	return "", nil
}

// precedes reports whether lock a comes before lock b for the same StatefulSet: created first, or in
// the same second (creationTimestamp has second precision) with the smaller name. It is a strict total
// order over the locks of a namespace (names are unique there): of two locks that see each other exactly
// one yields, whichever is reconciled first.
func precedes(a, b *leasev1.StatefulSetLock) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// listPods returns the pods the lock's StatefulSet controls, from the cache.
func (r *Reconciler) listPods(ctx context.Context, lock *leasev1.StatefulSetLock) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := r.Cache.List(ctx, &pods, client.InNamespace(lock.Namespace), client.MatchingFields{indexPodStatefulSet: lock.Spec.StatefulSetName}); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	return pods.Items, nil
}

// podViews turns the pods into what the election reads, looking up their nodes' readiness.
func (r *Reconciler) podViews(ctx context.Context, lock *leasev1.StatefulSetLock, pods []corev1.Pod, now time.Time) ([]PodView, error) {
	views := make([]PodView, 0, len(pods))
	nodeReady := map[string]bool{}
	for i := range pods {
		pod := &pods[i]
		ready, known := nodeReady[pod.Spec.NodeName]
		if !known && pod.Spec.NodeName != "" {
			node := &corev1.Node{}
			err := r.Cache.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node)
			if err != nil && !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("reading node %s: %w", pod.Spec.NodeName, err)
			}
			ready = err == nil && opsutil.NodeReady(node)
			nodeReady[pod.Spec.NodeName] = ready
		}
		v := PodView{
			Name: pod.Name, UID: pod.UID, Ordinal: Ordinal(lock.Spec.StatefulSetName, pod.Name),
			Ready: opsutil.PodReady(pod), Terminating: !pod.DeletionTimestamp.IsZero(), NodeReady: ready,
		}
		if !v.Ready {
			v.NotReadySince = r.obs.notReadySince(pod.UID, now)
		}
		views = append(views, v)
	}
	return views, nil
}

func podRef(namespace, name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: namespace, Name: name}
}
