// Package controller is the StatefulSingleton controller of singleton-operator: of the pods a
// StatefulSingleton selects, it lets at most one run its main process, releasing a held pod only once
// every other pod of the singleton is gone from the API or terminal.
//
// Safety rules, in the order Reconcile applies them:
//
//   - A pod is held (admitted by the webhook with a Wrapper or SchedulingGate hold), released (it carries
//     the epoch annotation), ungated (it matches but carries no hold: it may run) or terminal. Released
//     and ungated pods that are not terminal block every release; pods being deleted still block.
//   - Of several held pods only one is a candidate: the newest revision (Deployment: the ReplicaSet's
//     deployment.kubernetes.io/revision; StatefulSet: the update revision), then the newest pod, then
//     the smallest name.
//   - RollingUpdate handover: a Deployment's new pod is held while the old one is healthy, and the
//     Deployment waits for the new pod to be Ready — a deadlock. When the candidate is of a newer revision
//     than a blocking pod, the operator deletes that pod (graceful delete with a UID precondition) and
//     releases the candidate once the kubelet confirmed the stop. The old ReplicaSet may create a
//     replacement, which is admitted held and never chosen over the newer revision.
//   - Fencing: when the pod recorded in status.activePodUID vanished while its node (status.activePodNode)
//     is NotReady or Unknown, its stop was never confirmed: nothing is released until the node is Ready
//     again or carries node.kubernetes.io/out-of-service (condition FencingRequired, Event).
//   - An ungated pod is reported (condition UngatedPod, Event) and deleted while another pod is active.
//   - Before releasing, the pods are listed again from the API server (not the cache), so a stale cache
//     never releases a second pod. The epoch is reserved in status (optimistic lock) before the pod is
//     patched, so it only grows and is never reused, also across restarts.
//   - Past maxTransitionTime the transition is reported (phase Failed, TransitionTimedOut, Event
//     TransitionTimeout); nothing is released to meet a deadline.
//   - Deleting the StatefulSingleton keeps the finalizer until no pod is held: a transition in progress
//     finishes first, and the status says what deletion waits for.
//   - Overlapping selectors: the older StatefulSingleton (then the smaller name) manages the pods; the
//     other reports SelectorConflict and does nothing.
package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups="",resources=pods/status,verbs=patch;update
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=apps,resources=replicasets;statefulsets,verbs=get;list;watch

// revisionAnnotation is the Deployment controller's revision number on a ReplicaSet.
const revisionAnnotation = "deployment.kubernetes.io/revision"

// Reconciler reconciles StatefulSingletons.
type Reconciler struct {
	// Client writes pods, namespaces and StatefulSingletons.
	Client client.Client
	// Cache reads from the manager's cache.
	Cache client.Reader
	// APIReader lists pods from the API server right before a release.
	APIReader client.Reader
	// Recorder records events.k8s.io Events.
	Recorder events.EventRecorder
	// Clock is the operator's clock (a fake one in tests).
	Clock clock.PassiveClock

	mu     sync.Mutex
	goneAt map[types.NamespacedName]time.Time // when a pod of the singleton was last seen deleted
}

// Options adjust Setup for tests.
type Options struct {
	// Client replaces the manager's client for writes, e.g. to inject API errors.
	Client client.Client
	// Clock replaces the real clock.
	Clock clock.PassiveClock
}

// Setup registers the StatefulSingleton controller with the manager, with its defaults.
func Setup(ctx context.Context, mgr ctrl.Manager) error {
	return SetupWithOptions(ctx, mgr, Options{})
}

// SetupWithOptions registers the StatefulSingleton controller with the manager. Pods of every
// namespace are watched (an ungated pod carries none of the operator's labels); each maps to the
// StatefulSingletons of its namespace whose selector matches it.
func SetupWithOptions(_ context.Context, mgr ctrl.Manager, opts Options) error {
	registerMetrics()
	r := &Reconciler{
		Client:    opts.Client,
		Cache:     mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("singleton-operator"),
		Clock:     opts.Clock,
		goneAt:    map[types.NamespacedName]time.Time{},
	}
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("statefulsingleton").
		For(&singletonv1.StatefulSingleton{}).
		Watches(&corev1.Pod{}, r.podHandler()).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.singletonsOfNode)).
		Complete(r)
}

// podHandler enqueues the singletons selecting a pod and remembers when a pod was deleted (the start of
// the handover duration metric).
func (r *Reconciler) podHandler() handler.EventHandler {
	enqueue := func(ctx context.Context, obj client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request], deleted bool) {
		for _, req := range r.singletonsOfPod(ctx, obj) {
			if deleted {
				r.mu.Lock()
				r.goneAt[req.NamespacedName] = r.Clock.Now()
				r.mu.Unlock()
			}
			q.Add(req)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.Object, q, false)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.ObjectNew, q, terminal(e.ObjectNew.(*corev1.Pod)) && !terminal(e.ObjectOld.(*corev1.Pod)))
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.Object, q, true)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.Object, q, false)
		},
	}
}

func (r *Reconciler) singletonsOfPod(ctx context.Context, obj client.Object) []reconcile.Request {
	var list singletonv1.StatefulSingletonList
	if err := r.Cache.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		sel, err := metav1.LabelSelectorAsSelector(&list.Items[i].Spec.Selector)
		if err == nil && sel.Matches(labels.Set(obj.GetLabels())) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}

// singletonsOfNode enqueues the singletons whose last active pod ran on the node (fencing).
func (r *Reconciler) singletonsOfNode(ctx context.Context, obj client.Object) []reconcile.Request {
	var list singletonv1.StatefulSingletonList
	if err := r.Cache.List(ctx, &list); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if list.Items[i].Status.ActivePodNode == obj.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}

// view is what one reconcile found.
type view struct {
	pods      []*corev1.Pod // the singleton's pods, by name
	held      []*corev1.Pod // held pods, the candidate first
	blocking  []*corev1.Pod // released or ungated pods that are not terminal
	active    []*corev1.Pod // released pods that are not terminal
	ungated   []*corev1.Pod // ungated pods that are not terminal
	candidate *corev1.Pod
}

// Reconcile applies the safety rules of the package documentation to one StatefulSingleton.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ss := &singletonv1.StatefulSingleton{}
	if err := r.Cache.Get(ctx, req.NamespacedName, ss); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	deleting := !ss.DeletionTimestamp.IsZero()
	if !deleting {
		if !controllerutil.ContainsFinalizer(ss, singletonv1.Finalizer) {
			controllerutil.AddFinalizer(ss, singletonv1.Finalizer)
			if err := r.Client.Update(ctx, ss); err != nil {
				return reconcile.Result{}, err
			}
		}
		if err := r.ensureNamespaceLabel(ctx, ss.Namespace, true); err != nil {
			return reconcile.Result{}, err
		}
	}
	status := ss.Status.DeepCopy()
	status.ObservedGeneration = ss.Generation

	winner, err := r.selectorWinner(ctx, ss)
	if err != nil {
		return reconcile.Result{}, err
	}
	if winner != "" {
		setCondition(status, ss, singletonv1.ConditionSelectorConflict, metav1.ConditionTrue, "SelectorOverlap",
			fmt.Sprintf("the selector overlaps StatefulSingleton %s, which is older and manages the pods; this one does nothing", winner))
		setCondition(status, ss, singletonv1.ConditionReady, metav1.ConditionFalse, "SelectorOverlap", "selector overlaps StatefulSingleton "+winner)
		status.Message = "selector overlaps StatefulSingleton " + winner + "; delete one of them"
		if deleting {
			return reconcile.Result{}, r.finish(ctx, ss)
		}
		return reconcile.Result{}, r.writeStatus(ctx, ss, status)
	}
	meta.RemoveStatusCondition(&status.Conditions, singletonv1.ConditionSelectorConflict)

	v, err := r.observe(ctx, ss, r.Cache)
	if err != nil {
		return reconcile.Result{}, err
	}
	for _, pod := range v.pods {
		status.Epoch = max(status.Epoch, podEpoch(pod)) // the epoch never goes back, also if status was lost
	}
	heldPods.WithLabelValues(ss.Namespace, ss.Name).Set(float64(len(v.held)))
	if len(v.active) > 1 {
		overlaps.Inc()
		setCondition(status, ss, singletonv1.ConditionOverlapDetected, metav1.ConditionTrue, "SeveralActivePods",
			fmt.Sprintf("pods %s are all released and not terminal", podNames(v.active)))
	} else {
		meta.RemoveStatusCondition(&status.Conditions, singletonv1.ConditionOverlapDetected)
	}

	// Ungated pods: report, and delete them while another pod is active.
	if len(v.ungated) > 0 {
		reported := meta.IsStatusConditionTrue(status.Conditions, singletonv1.ConditionUngatedPod)
		setCondition(status, ss, singletonv1.ConditionUngatedPod, metav1.ConditionTrue, "PodWithoutHold",
			fmt.Sprintf("pods %s match the selector but carry no start hold (admitted around the webhook); they are never released", podNames(v.ungated)))
		for _, pod := range v.ungated {
			if !reported {
				r.Recorder.Eventf(ss, pod, corev1.EventTypeWarning, "UngatedPod", "Report", "pod %s matches the selector but carries no start hold", pod.Name)
			}
			if len(v.active) > 0 && pod.DeletionTimestamp.IsZero() {
				if err := r.deletePod(ctx, pod); err != nil {
					return reconcile.Result{}, err
				}
				r.Recorder.Eventf(ss, pod, corev1.EventTypeWarning, "UngatedPod", "Delete", "deleted pod %s: it carries no start hold while pod %s is active", pod.Name, v.active[0].Name)
			}
		}
	} else {
		meta.RemoveStatusCondition(&status.Conditions, singletonv1.ConditionUngatedPod)
	}

	// The readiness gate follows the release.
	for _, pod := range v.active {
		if err := r.markReady(ctx, pod); err != nil {
			return reconcile.Result{}, err
		}
	}
	if len(v.active) == 1 {
		status.ActivePod, status.ActivePodUID = v.active[0].Name, string(v.active[0].UID)
		if v.active[0].Spec.NodeName != "" {
			status.ActivePodNode = v.active[0].Spec.NodeName
		}
	}

	result := reconcile.Result{}
	if v.candidate == nil {
		meta.RemoveStatusCondition(&status.Conditions, singletonv1.ConditionTransitionTimedOut)
		meta.RemoveStatusCondition(&status.Conditions, singletonv1.ConditionFencingRequired)
		status.Phase = singletonv1.PhaseRunning
		if len(v.active) > 0 {
			status.Message = "pod " + v.active[0].Name + " is active"
			setCondition(status, ss, singletonv1.ConditionReady, metav1.ConditionTrue, singletonv1.ReasonActive, status.Message)
		} else {
			status.Message = "no pod to run"
			setCondition(status, ss, singletonv1.ConditionReady, metav1.ConditionFalse, singletonv1.ReasonNoPods, "no pod of the singleton is active or held")
		}
	} else {
		result, err = r.transition(ctx, ss, status, v)
		if err != nil {
			return reconcile.Result{}, err
		}
	}

	if deleting {
		if len(v.held) == 0 {
			return reconcile.Result{}, r.finish(ctx, ss)
		}
		status.Message = "deletion waits until no pod is held: " + status.Message
	}
	return result, r.writeStatus(ctx, ss, status)
}

// transition handles a held candidate: it releases it when safe, otherwise starts the handover, checks
// fencing and the deadline.
func (r *Reconciler) transition(ctx context.Context, ss *singletonv1.StatefulSingleton, status *singletonv1.StatefulSingletonStatus, v *view) (reconcile.Result, error) {
	now := r.Clock.Now()
	if status.Phase == singletonv1.PhaseRunning || status.Phase == "" || status.TransitionTimestamp == nil {
		status.TransitionTimestamp = &metav1.Time{Time: now}
		status.Phase = singletonv1.PhaseTransitioning
		from := "none"
		if len(v.blocking) > 0 {
			from = v.blocking[0].Name
		}
		r.Recorder.Eventf(ss, v.candidate, corev1.EventTypeNormal, singletonv1.ReasonPodTransition, "Hold",
			"transition from pod %s to pod %s started", from, v.candidate.Name)
	}

	if len(v.blocking) > 0 {
		// RollingUpdate handover: delete blocking pods of an older revision than the candidate.
		candRank := r.rank(ctx, v.candidate)
		for _, pod := range v.blocking {
			if pod.DeletionTimestamp.IsZero() && r.rank(ctx, pod) < candRank {
				if err := r.deletePod(ctx, pod); err != nil {
					return reconcile.Result{}, err
				}
				r.Recorder.Eventf(ss, pod, corev1.EventTypeNormal, singletonv1.ReasonPodTransition, "Handover",
					"deleted pod %s of an older revision so that held pod %s can start", pod.Name, v.candidate.Name)
			}
		}
		setCondition(status, ss, singletonv1.ConditionReady, metav1.ConditionFalse, singletonv1.ReasonWaitingForOldPod,
			fmt.Sprintf("pod %s is held until pods %s are gone", v.candidate.Name, podNames(v.blocking)))
		status.Message = fmt.Sprintf("pod %s is held until pods %s are gone", v.candidate.Name, podNames(v.blocking))
		return r.checkDeadline(ss, status, now), nil
	}

	// Fencing: did the last active pod vanish from a node that never confirmed the stop?
	if status.ActivePodUID != "" && status.ActivePodNode != "" && !slices.ContainsFunc(v.pods, func(p *corev1.Pod) bool { return string(p.UID) == status.ActivePodUID }) {
		node := &corev1.Node{}
		err := r.Cache.Get(ctx, client.ObjectKey{Name: status.ActivePodNode}, node)
		if apierrors.IsNotFound(err) {
			node = nil
		} else if err != nil {
			return reconcile.Result{}, err
		}
		if !nodeFenced(node) {
			msg := fmt.Sprintf("pod %s vanished from node %s, which is not Ready: its stop was never confirmed; pod %s is held until the node is Ready again or tainted %s",
				status.ActivePod, status.ActivePodNode, v.candidate.Name, corev1.TaintNodeOutOfService)
			if !meta.IsStatusConditionTrue(status.Conditions, singletonv1.ConditionFencingRequired) {
				r.Recorder.Eventf(ss, v.candidate, corev1.EventTypeWarning, singletonv1.ConditionFencingRequired, "Hold", msg)
			}
			setCondition(status, ss, singletonv1.ConditionFencingRequired, metav1.ConditionTrue, singletonv1.ReasonNodeNotReady, msg)
			setCondition(status, ss, singletonv1.ConditionReady, metav1.ConditionFalse, singletonv1.ReasonNodeNotReady, msg)
			status.Message = msg
			return r.checkDeadline(ss, status, now), nil
		}
	}

	// Confirm with the API server, not the cache, that nothing else may run.
	live, err := r.observe(ctx, ss, r.APIReader)
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(live.blocking) > 0 || live.candidate == nil || live.candidate.UID != v.candidate.UID {
		return reconcile.Result{RequeueAfter: time.Second}, nil // the cache is behind; look again
	}
	return reconcile.Result{}, r.release(ctx, ss, status, live.candidate, live.pods)
}

// release reserves the next epoch in status, then releases the pod in one patch under an optimistic
// lock. If the pod patch fails the epoch is skipped, never reused.
func (r *Reconciler) release(ctx context.Context, ss *singletonv1.StatefulSingleton, status *singletonv1.StatefulSingletonStatus, pod *corev1.Pod, others []*corev1.Pod) error {
	epoch := status.Epoch
	for _, p := range others {
		epoch = max(epoch, podEpoch(p))
	}
	epoch++
	reserve := ss.DeepCopy()
	reserve.Status.Epoch = epoch
	if err := r.Client.Status().Update(ctx, reserve); err != nil {
		return err
	}
	ss.ResourceVersion = reserve.ResourceVersion

	patch := client.MergeFromWithOptions(pod.DeepCopy(), client.MergeFromWithOptimisticLock{})
	released := pod.DeepCopy()
	if released.Annotations == nil {
		released.Annotations = map[string]string{}
	}
	value := strconv.FormatInt(epoch, 10)
	released.Annotations[singletonv1.AnnotationEpoch] = value
	if hasSchedulingGate(released) {
		released.Spec.SchedulingGates = slices.DeleteFunc(released.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
			return g.Name == singletonv1.SchedulingGate
		})
	} else {
		released.Annotations[singletonv1.AnnotationStartGranted] = value
	}
	if err := r.Client.Patch(ctx, released, patch); err != nil {
		status.Epoch = epoch
		return err
	}
	now := r.Clock.Now()
	transitions.Inc()
	r.mu.Lock()
	gone, ok := r.goneAt[client.ObjectKeyFromObject(ss)]
	r.mu.Unlock()
	if ok && status.TransitionTimestamp != nil && !gone.Before(status.TransitionTimestamp.Time) {
		d := now.Sub(gone)
		handoverSeconds.Observe(d.Seconds())
		status.LastTransitionDuration = &metav1.Duration{Duration: d}
	}
	status.Epoch = epoch
	status.ActivePod, status.ActivePodUID, status.ActivePodNode = pod.Name, string(pod.UID), pod.Spec.NodeName
	status.Phase = singletonv1.PhaseRunning
	status.Message = "pod " + pod.Name + " is active"
	meta.RemoveStatusCondition(&status.Conditions, singletonv1.ConditionTransitionTimedOut)
	meta.RemoveStatusCondition(&status.Conditions, singletonv1.ConditionFencingRequired)
	setCondition(status, ss, singletonv1.ConditionReady, metav1.ConditionTrue, singletonv1.ReasonActive, status.Message)
	r.Recorder.Eventf(ss, pod, corev1.EventTypeNormal, singletonv1.ReasonPodStarted, "Release", "released pod %s with epoch %d", pod.Name, epoch)
	return r.markReady(ctx, released)
}

// checkDeadline reports a transition older than maxTransitionTime and asks to be called at the deadline.
func (r *Reconciler) checkDeadline(ss *singletonv1.StatefulSingleton, status *singletonv1.StatefulSingletonStatus, now time.Time) reconcile.Result {
	deadline := status.TransitionTimestamp.Add(time.Duration(ss.Spec.MaxTransitionTime) * time.Second)
	if ss.Spec.MaxTransitionTime <= 0 || now.Before(deadline) {
		return reconcile.Result{RequeueAfter: deadline.Sub(now)}
	}
	msg := fmt.Sprintf("transition exceeded maxTransitionTime (%ds); the new pod stays held: %s", ss.Spec.MaxTransitionTime, status.Message)
	if status.Phase != singletonv1.PhaseFailed {
		r.Recorder.Eventf(ss, nil, corev1.EventTypeWarning, singletonv1.ReasonTransitionTimeout, "Hold", msg)
	}
	status.Phase = singletonv1.PhaseFailed
	status.Message = msg
	setCondition(status, ss, singletonv1.ConditionTransitionTimedOut, metav1.ConditionTrue, singletonv1.ReasonTransitionTimeout, msg)
	setCondition(status, ss, singletonv1.ConditionReady, metav1.ConditionFalse, singletonv1.ReasonTransitionTimeout, msg)
	return reconcile.Result{}
}

// observe lists and classifies the singleton's pods through reader.
func (r *Reconciler) observe(ctx context.Context, ss *singletonv1.StatefulSingleton, reader client.Reader) (*view, error) {
	sel, err := metav1.LabelSelectorAsSelector(&ss.Spec.Selector)
	if err != nil {
		return nil, err
	}
	var list corev1.PodList
	if err := reader.List(ctx, &list, client.InNamespace(ss.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	v := &view{}
	for i := range list.Items {
		pod := &list.Items[i]
		v.pods = append(v.pods, pod)
		switch classify(pod) {
		case stateHeld:
			v.held = append(v.held, pod)
		case stateReleased:
			v.blocking = append(v.blocking, pod)
			v.active = append(v.active, pod)
		case stateUngated:
			v.blocking = append(v.blocking, pod)
			v.ungated = append(v.ungated, pod)
		}
	}
	if len(v.held) > 0 {
		ranks := map[types.UID]int64{}
		for _, p := range v.held {
			ranks[p.UID] = r.rank(ctx, p)
		}
		slices.SortStableFunc(v.held, func(a, b *corev1.Pod) int {
			if ranks[a.UID] != ranks[b.UID] {
				return int(ranks[b.UID] - ranks[a.UID])
			}
			if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
				return b.CreationTimestamp.Compare(a.CreationTimestamp.Time)
			}
			return strings.Compare(a.Name, b.Name)
		})
		v.candidate = v.held[0]
	}
	return v, nil
}

// rank orders pods by revision: the Deployment revision of the pod's ReplicaSet; for a StatefulSet 1 for
// the update revision and 0 otherwise; 0 for anything else or when the owner cannot be read.
func (r *Reconciler) rank(ctx context.Context, pod *corev1.Pod) int64 {
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return 0
	}
	switch owner.Kind {
	case "ReplicaSet":
		rs := &metav1.PartialObjectMetadata{}
		rs.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
		if err := r.Cache.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: owner.Name}, rs); err != nil {
			return 0
		}
		n, _ := strconv.ParseInt(rs.Annotations[revisionAnnotation], 10, 64)
		return n
	case "StatefulSet":
		sts := &appsv1.StatefulSet{}
		if err := r.Cache.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: owner.Name}, sts); err != nil {
			return 0
		}
		if sts.Status.UpdateRevision != "" && pod.Labels[appsv1.ControllerRevisionHashLabelKey] == sts.Status.UpdateRevision {
			return 1
		}
	}
	return 0
}

// selectorWinner returns the name of an older StatefulSingleton of the namespace whose selector overlaps
// this one's, or "" when this one manages its pods. Two selectors overlap when one selects the other's
// matchLabels, or when a pod of the namespace matches both.
func (r *Reconciler) selectorWinner(ctx context.Context, ss *singletonv1.StatefulSingleton) (string, error) {
	var list singletonv1.StatefulSingletonList
	if err := r.Cache.List(ctx, &list, client.InNamespace(ss.Namespace)); err != nil {
		return "", err
	}
	mine, err := metav1.LabelSelectorAsSelector(&ss.Spec.Selector)
	if err != nil {
		return "", err
	}
	var pods *corev1.PodList
	for i := range list.Items {
		other := &list.Items[i]
		if other.UID == ss.UID || !older(other, ss) {
			continue
		}
		theirs, err := metav1.LabelSelectorAsSelector(&other.Spec.Selector)
		if err != nil {
			continue
		}
		if theirs.Matches(labels.Set(ss.Spec.Selector.MatchLabels)) && len(ss.Spec.Selector.MatchExpressions) == 0 ||
			mine.Matches(labels.Set(other.Spec.Selector.MatchLabels)) && len(other.Spec.Selector.MatchExpressions) == 0 {
			return other.Name, nil
		}
		if pods == nil {
			pods = &corev1.PodList{}
			if err := r.Cache.List(ctx, pods, client.InNamespace(ss.Namespace), client.MatchingLabelsSelector{Selector: mine}); err != nil {
				return "", err
			}
		}
		for j := range pods.Items {
			if theirs.Matches(labels.Set(pods.Items[j].Labels)) {
				return other.Name, nil
			}
		}
	}
	return "", nil
}

// older reports whether a was created before b (the smaller name first on a tie).
func older(a, b *singletonv1.StatefulSingleton) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// finish removes the finalizer of a StatefulSingleton being deleted, then the namespace label if no
// other StatefulSingleton is left in the namespace.
func (r *Reconciler) finish(ctx context.Context, ss *singletonv1.StatefulSingleton) error {
	heldPods.DeleteLabelValues(ss.Namespace, ss.Name)
	if controllerutil.RemoveFinalizer(ss, singletonv1.Finalizer) {
		if err := r.Client.Update(ctx, ss); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	var list singletonv1.StatefulSingletonList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(ss.Namespace)); err != nil {
		return err
	}
	for _, other := range list.Items {
		if other.UID != ss.UID && other.DeletionTimestamp.IsZero() {
			return nil
		}
	}
	return r.ensureNamespaceLabel(ctx, ss.Namespace, false)
}

// ensureNamespaceLabel puts (or removes) the label that scopes the pod webhook on the namespace.
func (r *Reconciler) ensureNamespaceLabel(ctx context.Context, name string, present bool) error {
	ns := &corev1.Namespace{}
	if err := r.Cache.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		return client.IgnoreNotFound(err)
	}
	if (ns.Labels[singletonv1.LabelNamespaceEnabled] == "true") == present {
		return nil
	}
	patch := client.MergeFrom(ns.DeepCopy())
	if present {
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[singletonv1.LabelNamespaceEnabled] = "true"
	} else {
		delete(ns.Labels, singletonv1.LabelNamespaceEnabled)
	}
	return client.IgnoreNotFound(r.Client.Patch(ctx, ns, patch))
}

// markReady sets the pod's readiness gate condition to True once it is released.
func (r *Reconciler) markReady(ctx context.Context, pod *corev1.Pod) error {
	if readinessGateTrue(pod) || !pod.DeletionTimestamp.IsZero() {
		return nil
	}
	patch := client.MergeFrom(pod.DeepCopy())
	ready := pod.DeepCopy()
	cond := corev1.PodCondition{Type: singletonv1.ReadinessGate, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now(), Reason: "Released"}
	i := slices.IndexFunc(ready.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == singletonv1.ReadinessGate })
	if i >= 0 {
		ready.Status.Conditions[i] = cond
	} else {
		ready.Status.Conditions = append(ready.Status.Conditions, cond)
	}
	return client.IgnoreNotFound(r.Client.Status().Patch(ctx, ready, patch))
}

// deletePod deletes the pod gracefully, only if it is still the pod that was observed.
func (r *Reconciler) deletePod(ctx context.Context, pod *corev1.Pod) error {
	return client.IgnoreNotFound(r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}))
}

// writeStatus writes the status if it changed.
func (r *Reconciler) writeStatus(ctx context.Context, ss *singletonv1.StatefulSingleton, status *singletonv1.StatefulSingletonStatus) error {
	status.StatusTimestamp = ss.Status.StatusTimestamp
	if equalStatus(&ss.Status, status) {
		return nil
	}
	status.StatusTimestamp = &metav1.Time{Time: r.Clock.Now()}
	updated := ss.DeepCopy()
	updated.Status = *status
	return r.Client.Status().Update(ctx, updated)
}

func equalStatus(a, b *singletonv1.StatefulSingletonStatus) bool {
	return equality.Semantic.DeepEqual(a, b)
}

func setCondition(status *singletonv1.StatefulSingletonStatus, ss *singletonv1.StatefulSingleton, typ string, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: ss.Generation})
}

func podNames(pods []*corev1.Pod) string {
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}
