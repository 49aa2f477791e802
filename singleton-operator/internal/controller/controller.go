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
//     releases the candidate once the kubelet confirmed the stop. A Wrapper candidate must run first
//     (every container started, the wrapper waiting), so the gap is the old pod's stop, not also the new
//     pod's start. The old ReplicaSet may create a replacement, which is admitted held and never chosen
//     over the newer revision.
//   - Fencing: when the pod recorded in status.activePodUID vanished while its node (status.activePodNode)
//     is NotReady or Unknown, its stop was never confirmed: nothing is released until the node is Ready
//     again or carries node.kubernetes.io/out-of-service (condition FencingRequired, Event).
//   - Adoption: an ungated pod that runs and is the only pod of the singleton that is not terminal (none
//     held, none released) becomes the active pod: confirmed with a live list, it gets a reserved epoch
//     and the adopted annotation, and is then a released pod in every respect (Event Adopted). With two
//     or more ungated pods nothing is adopted (UngatedPod reason SeveralPodsWithoutHold, Event).
//   - An ungated pod that is not adopted is reported (condition UngatedPod, Event) and deleted while
//     another pod is active.
//   - Every waiting state (Ready=False, by reason) is recorded as an Event when it begins.
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
	"encoding/json"
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
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/shared/podmutation"
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
	// caches holds, per StatefulSingleton selector, the pods of that selector Cache leaves out (no
	// managed label), and per namespace holding a StatefulSingleton the ReplicaSets and StatefulSets
	// that rank pods (caches.go).
	caches *namespaceCaches
	// Recorder records events.k8s.io Events.
	Recorder events.EventRecorder
	// Clock is the operator's clock (a fake one in tests).
	Clock clock.PassiveClock

	mu       sync.Mutex
	goneAt   map[types.NamespacedName]time.Time          // when a pod of the singleton was last seen deleted
	fallback map[types.NamespacedName]map[types.UID]bool // per singleton: pods whose hold fallback was reported
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

// SetupWithOptions registers the StatefulSingleton controller with the manager. Managed pods come from
// the manager's cache (scoped by CacheOptions), the other pods a StatefulSingleton selects from the cache
// of its selector (caches.go); each pod maps to the StatefulSingletons of its namespace whose selector
// matches it.
func SetupWithOptions(_ context.Context, mgr ctrl.Manager, opts Options) error {
	registerMetrics()
	caches := newNamespaceCaches(mgr)
	if err := mgr.Add(caches); err != nil {
		return err
	}
	r := &Reconciler{
		Client:    opts.Client,
		Cache:     mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		caches:    caches,
		Recorder:  mgr.GetEventRecorder("singleton-operator"),
		Clock:     opts.Clock,
		goneAt:    map[types.NamespacedName]time.Time{},
		fallback:  map[types.NamespacedName]map[types.UID]bool{},
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
		WatchesRawSource(source.Channel(caches.events, r.podHandler())).
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
	ctx = context.WithValue(ctx, handoverTimingKey{}, &handoverTiming{began: r.Clock.Now()})
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

	v, err := r.observe(ctx, ss, false)
	if err != nil {
		return reconcile.Result{}, err
	}
	for _, pod := range v.pods {
		status.Epoch = max(status.Epoch, podEpoch(pod)) // the epoch never goes back, also if status was lost
	}
	heldPods.WithLabelValues(ss.Namespace, ss.Name).Set(float64(len(v.held)))
	r.reportHoldFallbacks(ss, v.pods)
	if len(v.active) > 1 {
		overlaps.Inc()
		setCondition(status, ss, singletonv1.ConditionOverlapDetected, metav1.ConditionTrue, "SeveralActivePods",
			fmt.Sprintf("pods %s are all released and not terminal", podNames(v.active)))
	} else {
		meta.RemoveStatusCondition(&status.Conditions, singletonv1.ConditionOverlapDetected)
	}

	// Pods without a start hold (ungated): the only pod of the singleton is adopted as the active pod
	// once it runs; otherwise they are reported, and deleted while another pod is active.
	adoptable := !deleting && len(v.ungated) == 1 && len(v.blocking) == 1 && len(v.held) == 0
	if adoptable && runs(v.ungated[0]) {
		return r.adopt(ctx, ss, status, v.ungated[0])
	}
	if len(v.ungated) > 0 {
		reported := meta.IsStatusConditionTrue(status.Conditions, singletonv1.ConditionUngatedPod)
		reason, msg := ungatedReport(v, adoptable)
		setCondition(status, ss, singletonv1.ConditionUngatedPod, metav1.ConditionTrue, reason, msg)
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
			if v.active[0].Annotations[singletonv1.AnnotationAdopted] == "true" {
				status.Message += " (adopted: it was running without a start hold)"
			}
			setCondition(status, ss, singletonv1.ConditionReady, metav1.ConditionTrue, singletonv1.ReasonActive, status.Message)
		} else if c := meta.FindStatusCondition(status.Conditions, singletonv1.ConditionUngatedPod); c != nil {
			status.Message = c.Message
			setCondition(status, ss, singletonv1.ConditionReady, metav1.ConditionFalse, c.Reason, c.Message)
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
		// RollingUpdate handover: delete blocking pods of an older revision than the candidate — in
		// Wrapper mode only once the candidate runs (its containers started, the wrapper waiting for the
		// grant), so the old process is stopped when the new one can start at once, not while the new
		// pod is still being created; and a new pod that cannot start never stops the old one.
		candRank := r.rank(ctx, v.candidate)
		prepared := startPrepared(v.candidate)
		msg := fmt.Sprintf("pod %s is held until pods %s are gone", v.candidate.Name, podNames(v.blocking))
		for _, pod := range v.blocking {
			if !pod.DeletionTimestamp.IsZero() || r.rank(ctx, pod) >= candRank {
				continue
			}
			if !prepared {
				msg = fmt.Sprintf("pod %s of a newer revision is held and starting; pod %s will be stopped once it runs and waits for its grant", v.candidate.Name, pod.Name)
				continue
			}
			if err := r.deletePod(ctx, pod); err != nil {
				return reconcile.Result{}, err
			}
			r.Recorder.Eventf(ss, pod, corev1.EventTypeNormal, singletonv1.ReasonPodTransition, "Handover",
				"deleted pod %s of an older revision so that held pod %s can start", pod.Name, v.candidate.Name)
		}
		setCondition(status, ss, singletonv1.ConditionReady, metav1.ConditionFalse, singletonv1.ReasonWaitingForOldPod, msg)
		status.Message = msg
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

	live, epoch, err := r.reserveAndList(ctx, ss, status)
	if err != nil || live == nil {
		return reconcile.Result{}, err
	}
	if len(live.blocking) > 0 || live.candidate == nil || live.candidate.UID != v.candidate.UID ||
		slices.ContainsFunc(live.pods, func(p *corev1.Pod) bool { return podEpoch(p) >= epoch }) {
		return reconcile.Result{RequeueAfter: time.Second}, nil // the cache is behind; look again (the epoch is skipped)
	}
	return reconcile.Result{}, r.release(ctx, ss, status, live.candidate, epoch)
}

// reserveAndList confirms with the API server, not the cache, what may run, and meanwhile reserves the
// next epoch in status (optimistic lock) before any pod carries it. The reservation does not depend on
// the list's answer: an epoch reserved for a release (or adoption) the list then refuses is skipped,
// never reused. So the two round trips overlap instead of adding up on the handover's critical path.
// It returns the live view and the reserved epoch, or a nil view when the reservation conflicted (the
// newer StatefulSingleton's event reconciles again; nothing was released).
func (r *Reconciler) reserveAndList(ctx context.Context, ss *singletonv1.StatefulSingleton, status *singletonv1.StatefulSingletonStatus) (*view, int64, error) {
	epoch := status.Epoch + 1 // status.Epoch is already at least the epoch of every cached pod
	type listed struct {
		view *view
		err  error
		took time.Duration
	}
	done := make(chan listed, 1)
	go func() {
		start := r.Clock.Now()
		lv, err := r.observe(ctx, ss, true)
		done <- listed{lv, err, r.Clock.Now().Sub(start)}
	}()
	reserveStart := r.Clock.Now()
	reserve := ss.DeepCopy()
	reserve.Status.Epoch = epoch
	reserveErr := r.Client.Status().Update(ctx, reserve)
	reserveTook := r.Clock.Now().Sub(reserveStart)
	l := <-done
	if reserveErr != nil {
		return nil, 0, ignoreConflict(reserveErr)
	}
	ss.ResourceVersion = reserve.ResourceVersion
	status.Epoch = epoch // the status written at the end of this reconcile keeps the reservation
	if l.err != nil {
		return nil, 0, l.err
	}
	if timing, ok := ctx.Value(handoverTimingKey{}).(*handoverTiming); ok {
		timing.list, timing.reserve = l.took, reserveTook
	}
	return l.view, epoch, nil
}

// adopt makes pod the active pod: it runs without a start hold and is the only pod of the singleton
// that is not terminal, so nothing else can run beside it. Like a release, adoption is confirmed with
// the API server and stamps a reserved epoch on the pod (with the adopted annotation, in one patch that
// carries the pod's UID); from then on the pod is released in every respect: it blocks every release,
// and the next rollout or deletion hands over from it.
func (r *Reconciler) adopt(ctx context.Context, ss *singletonv1.StatefulSingleton, status *singletonv1.StatefulSingletonStatus, pod *corev1.Pod) (reconcile.Result, error) {
	live, epoch, err := r.reserveAndList(ctx, ss, status)
	if err != nil || live == nil {
		return reconcile.Result{}, err
	}
	if len(live.held) > 0 || len(live.blocking) != 1 || live.blocking[0].UID != pod.UID ||
		classify(live.blocking[0]) != stateUngated || !runs(live.blocking[0]) ||
		slices.ContainsFunc(live.pods, func(p *corev1.Pod) bool { return podEpoch(p) >= epoch }) {
		return reconcile.Result{RequeueAfter: time.Second}, nil // the cache is behind; look again (the epoch is skipped)
	}
	value := strconv.FormatInt(epoch, 10)
	// The singleton label too, as the webhook puts it on the pods it admits: the anti-affinity of the
	// next pods then steers them away from the adopted pod's node, and tools that group pods by
	// singleton see it.
	raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": pod.UID,
		"labels":      map[string]string{singletonv1.LabelSingleton: podmutation.SingletonLabelValue(ss.Name)},
		"annotations": map[string]string{singletonv1.AnnotationEpoch: value, singletonv1.AnnotationAdopted: "true"}}})
	if err != nil {
		return reconcile.Result{}, err
	}
	adopted := live.blocking[0].DeepCopy()
	if err := r.Client.Patch(ctx, adopted, client.RawPatch(types.MergePatchType, raw)); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err) // the epoch is skipped; a pod gone is reconciled again
	}
	logf.FromContext(ctx).Info("Adopted pod", "pod", pod.Name, "epoch", epoch)
	status.ActivePod, status.ActivePodUID, status.ActivePodNode = pod.Name, string(pod.UID), pod.Spec.NodeName
	status.Phase = singletonv1.PhaseRunning
	status.Message = "pod " + pod.Name + " is active (adopted: it was running without a start hold)"
	meta.RemoveStatusCondition(&status.Conditions, singletonv1.ConditionUngatedPod)
	meta.RemoveStatusCondition(&status.Conditions, singletonv1.ConditionTransitionTimedOut)
	meta.RemoveStatusCondition(&status.Conditions, singletonv1.ConditionFencingRequired)
	setCondition(status, ss, singletonv1.ConditionReady, metav1.ConditionTrue, singletonv1.ReasonActive, status.Message)
	r.Recorder.Eventf(ss, pod, corev1.EventTypeNormal, singletonv1.ReasonAdopted, "Adopt",
		"adopted running pod %s as the active pod with epoch %d; its start was not held (it was created without a start hold, e.g. before the namespace was labelled for the pod webhook); the next rollout or deletion hands over from it", pod.Name, epoch)
	if err := r.markReady(ctx, adopted); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, r.writeStatus(ctx, ss, status)
}

// ungatedReport is the UngatedPod condition's reason and message for the view's pods without a start
// hold, which were not adopted.
func ungatedReport(v *view, adoptable bool) (string, string) {
	var staying, going []*corev1.Pod // blocking pods: not being deleted, being deleted
	for _, p := range v.blocking {
		if p.DeletionTimestamp.IsZero() {
			staying = append(staying, p)
		} else {
			going = append(going, p)
		}
	}
	names := podNames(v.ungated)
	switch {
	case adoptable:
		return singletonv1.ReasonWaitingToAdopt, fmt.Sprintf("pod %s carries no start hold and does not run yet (phase %s); it is adopted as the active pod once it runs", names, v.ungated[0].Status.Phase)
	case len(v.held) == 0 && len(staying) == 1 && classify(staying[0]) == stateUngated:
		return singletonv1.ReasonWaitingToAdopt, fmt.Sprintf("pod %s carries no start hold; it is adopted as the active pod once pods %s, being deleted, are gone", staying[0].Name, podNames(going))
	case len(v.held) == 0 && len(v.active) == 0 && len(staying) > 1:
		return singletonv1.ReasonSeveralPodsWithoutHold, fmt.Sprintf("pods %s carry no start hold (created before the namespace was labelled for the pod webhook, or around it), so none is adopted: only a singleton's only pod is. Scale the workload to one replica or delete all but one of these pods; pods created from now on are held", podNames(staying))
	default:
		return singletonv1.ReasonPodWithoutHold, fmt.Sprintf("pods %s match the selector but carry no start hold (admitted around the webhook); a pod without a hold is adopted only when it is the singleton's only pod, and it is deleted while another pod is active", names)
	}
}

// runs reports whether the pod runs on a node and is not being deleted (adoption's precondition).
func runs(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodRunning && pod.Spec.NodeName != "" && pod.DeletionTimestamp.IsZero()
}

// release releases the pod with the epoch reserved in status, in one patch. If the patch fails the
// epoch is skipped, never reused.
func (r *Reconciler) release(ctx context.Context, ss *singletonv1.StatefulSingleton, status *singletonv1.StatefulSingletonStatus, pod *corev1.Pod, epoch int64) error {
	// A gated pod is patched under an optimistic lock (its gate list is rewritten, and nothing else
	// writes it while it is gated). A Wrapper pod runs: its kubelet updates its status all the time, so
	// a resourceVersion lock would fail most releases and cost a retry with a fresh epoch each; the patch
	// only adds annotations and carries the pod's UID, so it can only ever release this pod instance (a
	// pod recreated under the same name has another UID, which the API server refuses to change).
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
		raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": pod.UID, "annotations": map[string]string{
			singletonv1.AnnotationEpoch: value, singletonv1.AnnotationStartGranted: value}}})
		if err != nil {
			return err
		}
		patch = client.RawPatch(types.MergePatchType, raw)
	}
	patchStart := r.Clock.Now()
	if err := r.Client.Patch(ctx, released, patch); err != nil {
		status.Epoch = epoch
		return err
	}
	now := r.Clock.Now()
	transitions.Inc()
	r.mu.Lock()
	gone, ok := r.goneAt[client.ObjectKeyFromObject(ss)]
	r.mu.Unlock()
	sinceGone := time.Duration(-1) // unknown: no pod of the singleton went away during this transition
	if ok && status.TransitionTimestamp != nil && !gone.Before(status.TransitionTimestamp.Time) {
		sinceGone = now.Sub(gone)
		handoverSeconds.Observe(sinceGone.Seconds())
		status.LastTransitionDuration = &metav1.Duration{Duration: sinceGone}
	}
	// Where the handover's time went: queued (old pod gone → this reconcile began), the live list and
	// the epoch reservation (concurrent), the release patch.
	queued, list, reserveTook := time.Duration(-1), time.Duration(-1), time.Duration(-1)
	if timing, ok := ctx.Value(handoverTimingKey{}).(*handoverTiming); ok {
		list, reserveTook = timing.list, timing.reserve
		if sinceGone >= 0 {
			queued = timing.began.Sub(gone)
		}
	}
	logf.FromContext(ctx).Info("Released pod", "pod", pod.Name, "epoch", epoch, "sinceOldPodGone", sinceGone.String(),
		"queued", queued.String(), "liveList", list.String(), "reserveEpoch", reserveTook.String(), "releasePatch", now.Sub(patchStart).String())
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

// observe lists and classifies the singleton's pods: from the caches, or with live from the API server.
func (r *Reconciler) observe(ctx context.Context, ss *singletonv1.StatefulSingleton, live bool) (*view, error) {
	sel, err := metav1.LabelSelectorAsSelector(&ss.Spec.Selector)
	if err != nil {
		return nil, err
	}
	var list corev1.PodList
	if live {
		err = r.APIReader.List(ctx, &list, client.InNamespace(ss.Namespace), client.MatchingLabelsSelector{Selector: sel})
	} else {
		list.Items, err = r.cachedPods(ctx, ss.Namespace, sel)
	}
	if err != nil {
		return nil, err
	}
	// By name, so that messages list pods in a stable order (the caches' lists have none).
	slices.SortFunc(list.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
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

// cachedPods lists the pods of namespace matching sel (a StatefulSingleton's selector) from the caches:
// the managed ones from the manager's cache, the others from the cache of sel, which holds only those.
// It also starts the namespace's ranking cache, so that rank finds it synced when a pod is held.
func (r *Reconciler) cachedPods(ctx context.Context, namespace string, sel labels.Selector) ([]corev1.Pod, error) {
	var managed, unmanaged corev1.PodList
	if err := r.Cache.List(ctx, &managed, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	podCache, err := r.caches.podReader(ctx, namespace, sel)
	if err != nil {
		return nil, err
	}
	if err := podCache.List(ctx, &unmanaged, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	if _, err := r.caches.reader(ctx, namespace); err != nil {
		return nil, err
	}
	return append(managed.Items, unmanaged.Items...), nil
}

// rank orders pods by revision: the Deployment revision of the pod's ReplicaSet; for a StatefulSet 1 for
// the update revision and 0 otherwise; 0 for anything else or when the owner cannot be read.
func (r *Reconciler) rank(ctx context.Context, pod *corev1.Pod) int64 {
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return 0
	}
	nsCache, err := r.caches.reader(ctx, pod.Namespace)
	if err != nil {
		return 0
	}
	switch owner.Kind {
	case "ReplicaSet":
		rs := revisionMeta()
		if err := nsCache.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: owner.Name}, rs); err != nil {
			return 0
		}
		n, _ := strconv.ParseInt(rs.Annotations[revisionAnnotation], 10, 64)
		return n
	case "StatefulSet":
		sts := &appsv1.StatefulSet{}
		if err := nsCache.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: owner.Name}, sts); err != nil {
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
	var pods []corev1.Pod
	listed := false
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
		if !listed {
			if pods, err = r.cachedPods(ctx, ss.Namespace, mine); err != nil {
				return "", err
			}
			listed = true
		}
		for j := range pods {
			if theirs.Matches(labels.Set(pods[j].Labels)) {
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

// finish removes the finalizer of a StatefulSingleton being deleted and stops the caches that the
// StatefulSingletons left in the namespace (listed from the API server; those being deleted do not count)
// do not need: the cache of its selector unless another one uses it, and with the last one the
// namespace's ranking cache and its namespace label.
func (r *Reconciler) finish(ctx context.Context, ss *singletonv1.StatefulSingleton) error {
	heldPods.DeleteLabelValues(ss.Namespace, ss.Name)
	r.mu.Lock()
	delete(r.fallback, client.ObjectKeyFromObject(ss))
	r.mu.Unlock()
	if controllerutil.RemoveFinalizer(ss, singletonv1.Finalizer) {
		if err := r.Client.Update(ctx, ss); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	var list singletonv1.StatefulSingletonList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(ss.Namespace)); err != nil {
		return err
	}
	left := 0
	var selectors []labels.Selector
	for i := range list.Items {
		other := &list.Items[i]
		if other.UID == ss.UID || !other.DeletionTimestamp.IsZero() {
			continue
		}
		left++
		// A selector that does not parse never got a cache (cachedPods fails first).
		if sel, err := metav1.LabelSelectorAsSelector(&other.Spec.Selector); err == nil {
			selectors = append(selectors, sel)
		}
	}
	r.caches.retain(ctx, ss.Namespace, selectors)
	if left > 0 {
		return nil
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
	if err := r.Client.Status().Update(ctx, updated); err != nil {
		return ignoreConflict(err)
	}
	r.reportWaiting(ss, &ss.Status, status)
	return nil
}

// reportWaiting records an Event when the singleton starts waiting, or waits for another reason: the
// Ready condition turned False or changed its reason. So `kubectl describe` shows why it waits, once per
// change, not once per reconcile. Reasons whose Events are recorded where they arise
// (TransitionTimeout, NodeNotReady) are left out.
func (r *Reconciler) reportWaiting(ss *singletonv1.StatefulSingleton, before, after *singletonv1.StatefulSingletonStatus) {
	now := meta.FindStatusCondition(after.Conditions, singletonv1.ConditionReady)
	if now == nil || now.Status != metav1.ConditionFalse {
		return
	}
	if prev := meta.FindStatusCondition(before.Conditions, singletonv1.ConditionReady); prev != nil && prev.Status == now.Status && prev.Reason == now.Reason {
		return
	}
	eventType := corev1.EventTypeNormal
	switch now.Reason {
	case singletonv1.ReasonTransitionTimeout, singletonv1.ReasonNodeNotReady:
		return
	case "SelectorOverlap", singletonv1.ReasonSeveralPodsWithoutHold:
		eventType = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(ss, nil, eventType, now.Reason, "Wait", "%s", now.Message)
}

// ignoreConflict drops a conflict of a StatefulSingleton write. A conflict means the cache is behind the
// API server (typically our own previous status write): the newer version's watch event queues another
// reconcile anyway, right away, whereas an error would add the rate limiter's growing back-off to the
// next handover.
func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
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

// handoverTiming is where a reconcile that releases a pod spent its time, for the release's log line:
// when it began, and how long its live list and its epoch reservation (run concurrently) took.
type handoverTiming struct {
	began         time.Time
	list, reserve time.Duration
}

// handoverTimingKey carries a reconcile's *handoverTiming in its context.
type handoverTimingKey struct{}
