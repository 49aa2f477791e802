// Package controller is the StatefulSetLock controller of lease-operator: among the pods of a
// StatefulSet it labels one `sts-role=writer` and the others `sts-role=reader`, and records the
// election in a coordination.k8s.io/v1 Lease it owns.
//
// Safety: the old writer is labelled reader (and the Lease moved, under a resourceVersion
// precondition) before any other pod is labelled writer, so at no instant do two pods carry the
// writer label; if a demotion cannot be written nobody is promoted. The Lease is the source of truth
// and is read back after a restart, so the writer is sticky and the fencing epoch (the Lease's
// leaseTransitions) only grows.
package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete

// Field indexes.
const (
	indexPodStatefulSet  = "statefulSet"    // pod → name of the StatefulSet that controls it
	indexPodNode         = "spec.nodeName"  // pod → its node
	indexLockStatefulSet = "statefulSet"    // lock → spec.statefulSetName
	indexLockLease       = "spec.leaseName" // lock → spec.leaseName
)

// Reconciler reconciles StatefulSetLocks.
type Reconciler struct {
	// Client writes pods, Leases and locks.
	Client client.Client
	// Locks reads StatefulSetLocks (the manager's cache).
	Locks client.Reader
	// Cache reads pods, nodes, Leases and StatefulSet metadata from the operator's scoped cache.
	Cache client.Reader
	// APIReader reads Leases from the API server.
	APIReader client.Reader
	// Recorder records events.k8s.io Events.
	Recorder events.EventRecorder
	// Clock is the operator's clock (a fake one in tests).
	Clock clock.PassiveClock

	obs      *observations
	authored *authored
	written  *writtenConditions
}

// Options adjust Setup for tests.
type Options struct {
	// Client replaces the manager's client for writes, e.g. to inject API errors.
	Client client.Client
	// Clock replaces the real clock.
	Clock clock.PassiveClock
}

// Setup registers the StatefulSetLock controller with the manager, with its defaults.
func Setup(ctx context.Context, mgr ctrl.Manager) error {
	return SetupWithOptions(ctx, mgr, Options{})
}

// SetupWithOptions registers the StatefulSetLock controller with the manager.
//
// Pods, nodes, the operator's Leases and StatefulSet metadata live in a cache of their own, scoped so
// that memory does not grow with unrelated objects: pods carrying the label every StatefulSet pod has
// (statefulset.kubernetes.io/pod-name), Leases labelled by a lock, nodes and pods stripped to the
// fields the election reads, and StatefulSets as metadata only.
func SetupWithOptions(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	opsutil.RegisterMetrics(failovers, failoverLatency)
	podsOfStatefulSets, err := labels.NewRequirement(appsv1.StatefulSetPodNameLabel, selection.Exists, nil)
	if err != nil {
		return err
	}
	locksLeases, err := labels.NewRequirement(leasev1.LockLabel, selection.Exists, nil)
	if err != nil {
		return err
	}
	scoped, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(),
		Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:           {Label: labels.NewSelector().Add(*podsOfStatefulSets), Transform: opsutil.SlimPod},
			&coordinationv1.Lease{}: {Label: labels.NewSelector().Add(*locksLeases)},
			&corev1.Node{}:          {Transform: opsutil.SlimNode},
			statefulSetMeta(""):     {},
		},
		DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		return fmt.Errorf("creating the pod cache: %w", err)
	}
	if err := mgr.Add(scoped); err != nil {
		return err
	}
	if err := scoped.IndexField(ctx, &corev1.Pod{}, indexPodStatefulSet, func(o client.Object) []string {
		if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "StatefulSet" {
			return []string{ref.Name}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := scoped.IndexField(ctx, &corev1.Pod{}, indexPodNode, func(o client.Object) []string {
		return []string{o.(*corev1.Pod).Spec.NodeName}
	}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &leasev1.StatefulSetLock{}, indexLockStatefulSet, func(o client.Object) []string {
		return []string{o.(*leasev1.StatefulSetLock).Spec.StatefulSetName}
	}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &leasev1.StatefulSetLock{}, indexLockLease, func(o client.Object) []string {
		return []string{o.(*leasev1.StatefulSetLock).Spec.LeaseName}
	}); err != nil {
		return err
	}

	r := &Reconciler{
		Client:    opts.Client,
		Locks:     mgr.GetClient(),
		Cache:     scoped,
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("lease-operator"),
		Clock:     opts.Clock,
		obs:       newObservations(),
		authored:  newAuthored(),
		written:   newWrittenConditions(),
	}
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("statefulsetlock").
		For(&leasev1.StatefulSetLock{}, builder.WithPredicates(r.lockPredicate())).
		WatchesRawSource(source.Kind(scoped, &corev1.Pod{}, r.podHandler(), r.podPredicate())).
		WatchesRawSource(source.Kind(scoped, &coordinationv1.Lease{}, r.leaseHandler(), r.leasePredicate())).
		WatchesRawSource(source.Kind(scoped, statefulSetMeta(""), r.statefulSetHandler(), statefulSetPredicate())).
		WatchesRawSource(source.Kind(scoped, &corev1.Node{}, r.nodeHandler(), r.nodePredicate())).
		Complete(reconcile.AsReconciler(mgr.GetClient(), r))
}

// Reconcile elects, labels and records the writer of one StatefulSetLock, or cleans up after it.
func (r *Reconciler) Reconcile(ctx context.Context, lock *leasev1.StatefulSetLock) (reconcile.Result, error) {
	if !lock.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, r.finalize(ctx, lock)
	}
	if added, err := opsutil.EnsureFinalizer(ctx, r.Client, lock, leasev1.Finalizer); err != nil {
		return reconcile.Result{}, err
	} else if added {
		r.authored.record(lock)
	}
	orig := lock.DeepCopy()
	result, o, err := r.reconcileLock(ctx, lock)
	if err != nil {
		if apierrors.IsConflict(err) {
			// Someone (the kubelet, another writer) changed an object since it was read: decide again.
			return reconcile.Result{}, err
		}
		o = outcome{state: leasev1.ReasonReconcileError, message: err.Error()}
	}
	applyStatus(lock, o)
	if _, serr := opsutil.PatchStatus(ctx, r.Client, lock, orig); serr != nil {
		if err == nil {
			err = serr
		}
	} else {
		r.waitingEvent(lock, r.written.swap(lock, orig.Status.Conditions))
	}
	return result, err
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
}

// reconcileLock runs one election and makes the pods and the Lease agree with it.
func (r *Reconciler) reconcileLock(ctx context.Context, lock *leasev1.StatefulSetLock) (reconcile.Result, outcome, error) {
	log := ctrl.LoggerFrom(ctx)
	now := r.Clock.Now()
	duration := time.Duration(lock.Spec.LeaseDurationSeconds) * time.Second
	retry := reconcile.Result{RequeueAfter: duration}

	if older, err := r.olderLock(ctx, lock); err != nil {
		return reconcile.Result{}, outcome{}, err
	} else if older != "" {
		return retry, outcome{state: leasev1.ReasonStatefulSetConflict,
			message: fmt.Sprintf("StatefulSetLock %s already manages StatefulSet %s; this lock leaves its pods alone", older, lock.Spec.StatefulSetName)}, nil
	}
	if err := r.Cache.Get(ctx, types.NamespacedName{Namespace: lock.Namespace, Name: lock.Spec.StatefulSetName}, statefulSetMeta("")); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, outcome{state: leasev1.ReasonStatefulSetNotFound,
				message: fmt.Sprintf("StatefulSet %s not found", lock.Spec.StatefulSetName)}, nil
		}
		return reconcile.Result{}, outcome{}, err
	}
	lease, err := r.getLease(ctx, lock)
	if err != nil {
		return reconcile.Result{}, outcome{}, err
	}
	if lease != nil && !ownedBy(lease, lock) {
		// The Warning Event is the waiting state's (waitingEvent).
		return retry, outcome{state: leasev1.ReasonLeaseConflict,
			message: fmt.Sprintf("Lease %s exists and is not owned by this StatefulSetLock; it is left untouched", lease.Name)}, nil
	}

	holder, transitions := Holder{Name: lock.Status.WriterPod, UID: types.UID(lock.Status.WriterPodUID)}, lock.Status.LeaseTransitions
	if lease != nil {
		holder, transitions = leaseHolder(lease), ptr.Deref(lease.Spec.LeaseTransitions, 0)
	}
	pods, err := r.listPods(ctx, lock)
	if err != nil {
		return reconcile.Result{}, outcome{}, err
	}
	views, err := r.podViews(ctx, lock, pods, now)
	if err != nil {
		return reconcile.Result{}, outcome{}, err
	}
	decision := Decide(ElectionInput{
		Holder: holder, Pods: views, Now: now,
		FailoverDelay: time.Duration(lock.Spec.FailoverDelaySeconds) * time.Second,
		SwitchoverTo:  lock.Annotations[leasev1.SwitchoverAnnotation],
	})
	moved := decision.Writer.Name != holder.Name || (holder.UID != "" && decision.Writer.UID != holder.UID)
	w := leaseWrite{holder: decision.Writer, transitions: transitions, moved: moved}
	if moved {
		w.transitions++
	}

	// 1. Demote: every pod but the new writer becomes reader. Nothing below runs if this fails.
	var force []string
	if moved {
		force = []string{holder.Name}
		if lock.Status.WriterPod != holder.Name {
			force = append(force, lock.Status.WriterPod)
		}
	}
	demoted, err := r.demote(ctx, lock.Namespace, pods, decision.Writer.Name, force)
	if err != nil {
		return reconcile.Result{}, outcome{}, err
	}
	for _, name := range demoted {
		r.Recorder.Eventf(lock, podRef(lock.Namespace, name), corev1.EventTypeNormal, leasev1.EventWriterDemoted, "Demote",
			"Pod %s is no longer the writer (%s)", name, cmp.Or(decision.Reason, "label corrected"))
	}
	// 2. Move (or renew) the Lease under its resourceVersion precondition.
	due, renewAfter := true, duration/2
	if lease != nil && decision.Writer.Name != "" {
		due, renewAfter = renewal(lease, duration, now)
	}
	if !leaseCurrent(lease, lock, w) || (decision.Writer.Name != "" && due) {
		if lease, err = r.writeLease(ctx, lock, lease, w, now); err != nil {
			return reconcile.Result{}, outcome{}, err
		}
		renewAfter = duration / 2
	}
	// 3. Promote the writer with its fencing epoch.
	o := outcome{state: leasev1.ReasonAvailable, known: true, writer: decision.Writer, transitions: w.transitions}
	if decision.Writer.Name == "" {
		o.state = leasev1.ReasonNoReadyPods
	} else {
		i := slices.IndexFunc(pods, func(p corev1.Pod) bool { return p.Name == decision.Writer.Name })
		promoted, err := r.promote(ctx, &pods[i], epochString(w.transitions))
		if err != nil {
			return reconcile.Result{}, outcome{}, err
		}
		if promoted {
			r.Recorder.Eventf(lock, podRef(lock.Namespace, decision.Writer.Name), corev1.EventTypeNormal, leasev1.EventWriterElected, "Elect",
				"Pod %s is the writer with epoch %d (%s)", decision.Writer.Name, w.transitions, cmp.Or(decision.Reason, "label restored"))
		}
	}
	if moved {
		o.failoverReason, o.failoverTime = cmp.Or(decision.Reason, leasev1.FailoverReasonInitialElection), r.Clock.Now()
		failovers.WithLabelValues(o.failoverReason).Inc()
		if since, ok := r.obs.unusableSince(holder); ok {
			failoverLatency.WithLabelValues(o.failoverReason).Observe(r.Clock.Since(since).Seconds())
			r.obs.clear("pod/" + string(holder.UID))
		}
		log.Info("Moved the writer", "from", holder.Name, "to", decision.Writer.Name, "reason", o.failoverReason, "epoch", w.transitions)
	}
	if target := lock.Annotations[leasev1.SwitchoverAnnotation]; target != "" && target == decision.Writer.Name {
		if err := r.clearSwitchover(ctx, lock); err != nil {
			return reconcile.Result{}, outcome{}, err
		}
	}

	result := reconcile.Result{}
	if decision.Writer.Name != "" {
		result.RequeueAfter = renewAfter
	}
	if decision.RetryAfter > 0 {
		o.state = leasev1.ReasonFailoverDelayed
		o.message = fmt.Sprintf("Writer %s is not Ready; failover in %s unless it recovers", decision.Writer.Name, decision.RetryAfter.Round(time.Millisecond))
		result.RequeueAfter = min(result.RequeueAfter, decision.RetryAfter)
	}
	return result, o, nil
}

// finalize removes the role labels and the lock's Lease, then the finalizer. A lock that never
// managed the pods (conflict with another lock or a foreign Lease) leaves them alone.
func (r *Reconciler) finalize(ctx context.Context, lock *leasev1.StatefulSetLock) error {
	if !controllerutil.ContainsFinalizer(lock, leasev1.Finalizer) {
		return nil
	}
	older, err := r.olderLock(ctx, lock)
	if err != nil {
		return err
	}
	lease, err := r.getLease(ctx, lock)
	if err != nil {
		return err
	}
	if older == "" && (lease == nil || ownedBy(lease, lock)) {
		pods, err := r.listPods(ctx, lock)
		if err != nil {
			return err
		}
		if err := r.removeRoles(ctx, pods); err != nil {
			return err
		}
		if lease != nil {
			if err := r.deleteLease(ctx, lease); err != nil {
				return err
			}
		}
	}
	_, err = opsutil.RemoveFinalizer(ctx, r.Client, lock, leasev1.Finalizer)
	if err == nil {
		r.written.forget(lock)
	}
	return err
}

// clearSwitchover removes the switchover annotation once the writer is its target.
func (r *Reconciler) clearSwitchover(ctx context.Context, lock *leasev1.StatefulSetLock) error {
	orig := lock.DeepCopy()
	delete(lock.Annotations, leasev1.SwitchoverAnnotation)
	if err := r.Client.Patch(ctx, lock, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("removing the %s annotation: %w", leasev1.SwitchoverAnnotation, err)
	}
	r.authored.record(lock)
	return nil
}

// olderLock returns the name of another StatefulSetLock that names the same StatefulSet and was
// created first (ties broken by name): only that one manages the pods.
func (r *Reconciler) olderLock(ctx context.Context, lock *leasev1.StatefulSetLock) (string, error) {
	var locks leasev1.StatefulSetLockList
	if err := r.Locks.List(ctx, &locks, client.InNamespace(lock.Namespace), client.MatchingFields{indexLockStatefulSet: lock.Spec.StatefulSetName}); err != nil {
		return "", fmt.Errorf("listing StatefulSetLocks: %w", err)
	}
	for _, other := range locks.Items {
		if other.UID == lock.UID {
			continue
		}
		if other.CreationTimestamp.Before(&lock.CreationTimestamp) ||
			(other.CreationTimestamp.Equal(&lock.CreationTimestamp) && other.Name < lock.Name) {
			return other.Name, nil
		}
	}
	return "", nil
}

// listPods returns the pods the lock's StatefulSet controls, from the scoped cache.
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

// statefulSetMeta is a metadata-only StatefulSet: the operator needs to know that it exists, not its body.
func statefulSetMeta(name string) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name}}
	m.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("StatefulSet"))
	return m
}

func podRef(namespace, name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: namespace, Name: name}
}
