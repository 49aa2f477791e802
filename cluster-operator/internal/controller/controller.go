// Package controller is the StatefulCluster controller of cluster-operator: it runs stateful pods like
// a StatefulSet, with one promise a StatefulSet does not make: a pod identity (its name and its
// claims) is used by exactly one pod, ever. A lost, failed or unhealthy pod is deleted (never
// force-deleted) and replaced by a pod with a new identity and new claims.
//
// Safety: identity names come from a high-water mark written, under a resourceVersion precondition,
// before the pods are created; pods this process created count as live until its cache shows them
// (expectations), and pod names are deterministic, so a lagging cache neither reuses a name nor
// creates more pods than wanted.
package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=controllerrevisions,verbs=get;list;watch;create;update;delete
// The PersistentVolume controller says why a claim does not bind only in Events (stuck.go).
// +kubebuilder:rbac:groups="",resources=events,verbs=list

// indexPodNode indexes pods by node, to find the StatefulClusters a node's readiness concerns.
const indexPodNode = "spec.nodeName"

// Reconciler reconciles StatefulClusters.
type Reconciler struct {
	// Client writes pods, claims, revisions and status.
	Client client.Client
	// Clusters reads StatefulClusters (the manager's cache).
	Clusters client.Reader
	// Cache reads pods, claims, revisions and nodes from the operator's scoped cache.
	Cache client.Reader
	// APIReader reads from the API server, to confirm what a lagging cache cannot.
	APIReader client.Reader
	// Recorder records events.k8s.io Events.
	Recorder events.EventRecorder
	// Clock is the operator's clock (a fake one in tests).
	Clock clock.PassiveClock

	mem *memory
}

// Options adjust Setup for tests.
type Options struct {
	// Client replaces the client for writes, e.g. to inject API errors.
	Client client.Client
	// Clock replaces the real clock.
	Clock clock.PassiveClock
}

// Setup registers the StatefulCluster controller with the manager, with its defaults.
func Setup(ctx context.Context, mgr ctrl.Manager) error {
	return SetupWithOptions(ctx, mgr, Options{})
}

// SetupWithOptions registers the StatefulCluster controller with the manager.
//
// Pods, claims, revisions and nodes live in a cache of their own: claims and revisions only when they
// carry the operator's label, nodes stripped to readiness and taints, everything without managedFields.
// Pods are cached in every namespace (orphans that match a selector are adopted), other controllers'
// pods slim (cache.go).
func SetupWithOptions(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	opsutil.RegisterMetrics(podsCreated, podsRetired, claimsRetired, createFailures, deleteFailures, replacementLatency)
	ours, err := labels.NewRequirement(clusterv1alpha1.ClusterNameLabel, selection.Exists, nil)
	if err != nil {
		return err
	}
	scoped, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(),
		Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:                   podCache(), // other controllers' pods slim (cache.go)
			&corev1.PersistentVolumeClaim{}: {Label: labels.NewSelector().Add(*ours)},
			&appsv1.ControllerRevision{}:    {Label: labels.NewSelector().Add(*ours)},
			&corev1.Node{}:                  {Transform: opsutil.SlimNode},
		},
		DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		return fmt.Errorf("creating the cache: %w", err)
	}
	if err := mgr.Add(scoped); err != nil {
		return err
	}
	if err := scoped.IndexField(ctx, &corev1.Pod{}, indexPodNode, func(o client.Object) []string {
		return []string{o.(*corev1.Pod).Spec.NodeName}
	}); err != nil {
		return err
	}
	r := &Reconciler{
		Client:    opts.Client,
		Clusters:  mgr.GetClient(),
		Cache:     scoped,
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("cluster-operator"),
		Clock:     opts.Clock,
		mem:       newMemory(),
	}
	if r.Client == nil {
		// Writes get a client of their own with the rate limits of kube-controller-manager's workload
		// controllers, so a 0→500 scale-up is not throttled at client-go's default 20 QPS.
		cfg := rest.CopyConfig(mgr.GetConfig())
		cfg.QPS, cfg.Burst = 50, 100
		if r.Client, err = client.New(cfg, client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()}); err != nil {
			return err
		}
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("statefulcluster").
		For(&clusterv1alpha1.StatefulCluster{}, builder.WithPredicates(clusterPredicate())).
		WatchesRawSource(source.Kind(scoped, &corev1.Pod{}, r.podHandler(), podPredicate())).
		WatchesRawSource(source.Kind(scoped, &corev1.PersistentVolumeClaim{}, claimHandler(), claimPredicate())).
		WatchesRawSource(source.Kind(scoped, &corev1.Node{}, r.nodeHandler(), nodePredicate())).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(reconcile.AsReconciler(mgr.GetClient(), r))
}

// Reconcile makes the pods of one StatefulCluster match its spec and writes its status.
func (r *Reconciler) Reconcile(ctx context.Context, sc *clusterv1alpha1.StatefulCluster) (reconcile.Result, error) {
	sc = r.mem.latest(sc)
	if !sc.DeletionTimestamp.IsZero() {
		// Pods (and, with whenDeleted=Delete, claims) are owned by the StatefulCluster: the garbage
		// collector removes them. Nothing is created any more.
		r.mem.forget(key(sc))
		return reconcile.Result{}, nil
	}
	orig := sc.DeepCopy()
	w := &work{r: r, sc: sc, orig: orig, now: r.Clock.Now(), key: key(sc)}
	err := w.run(ctx)
	if errors.Is(err, errConflict) {
		// The object or a pod changed since it was read (or the cache lags our own write): decide again.
		return reconcile.Result{Requeue: true}, nil
	}
	w.applyStatus(err)
	if serr := w.patchStatus(ctx, false); serr != nil {
		if apierrors.IsConflict(serr) {
			return reconcile.Result{Requeue: true}, nil
		}
		err = errors.Join(err, serr)
	} else {
		w.waitingEvents(orig.Status.Conditions)
	}
	if err == nil && len(w.failures) > 0 {
		// Retried with the workqueue's backoff; the other steps of this reconcile were done.
		err = fmt.Errorf("%d step(s) failed, first: %s", len(w.failures), w.failures[0])
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	return w.result(), nil
}

// errConflict means a write met a changed object: the reconcile starts again from fresh reads.
var errConflict = errors.New("conflict")

// work is one reconcile of one StatefulCluster.
type work struct {
	r         *Reconciler
	sc, orig  *clusterv1alpha1.StatefulCluster
	now       time.Time
	key       types.NamespacedName
	revs      *revisionSet
	pods      []*member // owned pods (and pods created but not yet cached)
	nodes     map[string]*corev1.Node
	allNodes  []*corev1.Node // read only with zoneSpread
	claims    []corev1.PersistentVolumeClaim
	recheck   time.Time
	failures  []string // what could not be written, for ReplicaFailure
	progress  string   // the reason of Progressing, when something is under way
	scaledUp  int
	retiring  int
	toUpdate  int
	updateRun bool
	// holdCreates is set while a failing membership hook (failurePolicy Fail) holds new pods back.
	holdCreates bool
	hookMu      sync.Mutex
	hookFailure string
}

// member is one pod of the StatefulCluster as this reconcile sees it.
type member struct {
	pod      *corev1.Pod // nil for a pod created but not yet in the cache
	name     string
	ordinal  int64
	revision string
	// live: counts toward replicas. terminating: being deleted. ready/available: as in a StatefulSet.
	live, terminating, ready, available bool
	verdict                             verdict
	// retiredNow: retired by this reconcile (its zone is refilled first). zone: the zone a pod created
	// by this reconcile was pinned to.
	retiredNow bool
	zone       string
}

func key(sc *clusterv1alpha1.StatefulCluster) types.NamespacedName {
	return types.NamespacedName{Namespace: sc.Namespace, Name: sc.Name}
}

func (w *work) later(t time.Time) {
	if !t.IsZero() && (w.recheck.IsZero() || t.Before(w.recheck)) {
		w.recheck = t
	}
}

func (w *work) fail(format string, args ...any) {
	w.failures = append(w.failures, fmt.Sprintf(format, args...))
}

// result requeues at the moment the next threshold expires, if any (never sleeps in the reconcile).
func (w *work) result() reconcile.Result {
	if w.recheck.IsZero() {
		return reconcile.Result{}
	}
	return reconcile.Result{RequeueAfter: max(w.recheck.Sub(w.now), 100*time.Millisecond)}
}

// run is the reconcile, step by step. A failure on one pod or claim is recorded and the other steps
// still run: one bad pod never blocks the rest.
func (w *work) run(ctx context.Context) error {
	var err error
	if w.revs, err = w.r.syncRevisions(ctx, w.sc); err != nil {
		return err
	}
	if err := w.loadPods(ctx); err != nil {
		return err
	}
	if err := w.loadClaims(ctx); err != nil {
		return err
	}
	w.judgePods(ctx)
	w.recordGone()
	w.retire(ctx)
	w.rollingUpdate(ctx)
	w.holdCreates = !w.runRetireHooks(ctx)
	if err := w.scale(ctx); err != nil {
		return err
	}
	w.ensureClaims(ctx)
	w.retireClaims(ctx)
	w.ownClaims(ctx)
	used := map[string]bool{}
	for _, m := range w.pods {
		used[m.revision] = true
	}
	if err := w.r.truncateHistory(ctx, w.sc, w.revs, used); err != nil {
		w.fail("%v", err)
	}
	return nil
}

// loadPods reads the pods of the namespace, adopts matching orphans and keeps those this
// StatefulCluster controls, plus the ones it created that the cache does not show yet.
func (w *work) loadPods(ctx context.Context) error {
	selector, err := metav1.LabelSelectorAsSelector(w.sc.Spec.Selector)
	if err != nil {
		return fmt.Errorf("spec.selector: %w", err)
	}
	var list corev1.PodList
	if err := w.r.Cache.List(ctx, &list, client.InNamespace(w.sc.Namespace)); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	pending := w.r.mem.pendingCreates(w.key, w.now)
	seen := map[string]bool{}
	for i := range list.Items {
		pod := &list.Items[i]
		ref := metav1.GetControllerOf(pod)
		switch {
		case ref != nil && ref.UID == w.sc.UID:
		case ref == nil && selector.Matches(labels.Set(pod.Labels)) && pod.DeletionTimestamp.IsZero():
			if err := w.adopt(ctx, pod); err != nil {
				w.fail("adopting pod %s: %v", pod.Name, err)
				continue
			}
		default:
			continue // another controller's pod, or not ours: never touched
		}
		seen[pod.Name] = true
		if _, ok := pending[pod.Name]; ok {
			w.r.mem.observed(w.key, pod.Name)
		}
		n, _ := ordinalOf(w.sc.Name, pod.Name)
		w.pods = append(w.pods, &member{pod: pod, name: pod.Name, ordinal: n, revision: pod.Labels[clusterv1alpha1.RevisionLabel]})
	}
	for name, c := range pending {
		if !seen[name] {
			n, _ := ordinalOf(w.sc.Name, name)
			w.pods = append(w.pods, &member{name: name, ordinal: n, revision: c.revision, live: true})
		}
	}
	w.nodes = map[string]*corev1.Node{}
	for _, m := range w.pods {
		if m.pod == nil || m.pod.Spec.NodeName == "" {
			continue
		}
		if _, ok := w.nodes[m.pod.Spec.NodeName]; ok {
			continue
		}
		node := &corev1.Node{}
		if err := w.r.Cache.Get(ctx, client.ObjectKey{Name: m.pod.Spec.NodeName}, node); err != nil {
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("reading node %s: %w", m.pod.Spec.NodeName, err)
			}
			node = nil
		}
		w.nodes[m.pod.Spec.NodeName] = node
	}
	if w.sc.Spec.ZoneSpread != nil {
		var nodes corev1.NodeList
		if err := w.r.Cache.List(ctx, &nodes); err != nil {
			return fmt.Errorf("listing nodes: %w", err)
		}
		for i := range nodes.Items {
			w.allNodes = append(w.allNodes, &nodes.Items[i])
		}
	}
	// Oldest identity first: by ordinal, or by creation for random names.
	slices.SortStableFunc(w.pods, func(a, b *member) int {
		if a.ordinal != b.ordinal {
			return int(a.ordinal - b.ordinal)
		}
		return podCreated(a).Compare(podCreated(b))
	})
	return nil
}

func podCreated(m *member) time.Time {
	if m.pod == nil {
		return time.Now().Add(time.Hour) // not created yet as far as the cache knows: the newest
	}
	return m.pod.CreationTimestamp.Time
}

// judgePods decides, per pod, whether it counts toward replicas and whether it must be retired.
func (w *work) judgePods(ctx context.Context) {
	claims := map[string]*corev1.PersistentVolumeClaim{}
	for i := range w.claims {
		claims[w.claims[i].Name] = &w.claims[i]
	}
	for _, m := range w.pods {
		if m.pod == nil {
			continue
		}
		pod := m.pod
		var node *corev1.Node
		if pod.Spec.NodeName != "" {
			node = w.nodes[pod.Spec.NodeName]
		}
		finished := pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded
		if !pod.DeletionTimestamp.IsZero() {
			m.terminating = true
			m.live = !finished && w.countTerminating(pod, node)
			continue
		}
		ready := opsutil.PodReady(pod)
		if ready {
			w.r.mem.markReady(pod.UID)
		}
		m.verdict = judge(w.sc, pod, node, w.r.mem.wasReady(pod.UID) || everReady(pod), w.now,
			func() *stuck { return w.whyStuck(ctx, pod, claims) })
		w.later(m.verdict.recheck)
		// A finished pod's containers have stopped: it no longer counts, even while it cannot be deleted.
		m.live = !finished
		m.ready = ready
		var at time.Time
		m.available, at = available(w.sc, pod, w.now)
		w.later(at)
	}
}

// countTerminating applies spec.replaceTerminating to a pod being deleted.
func (w *work) countTerminating(pod *corev1.Pod, node *corev1.Node) bool {
	switch w.sc.Spec.ReplaceTerminating {
	case clusterv1alpha1.ReplaceTerminatingAlways:
		return false
	case clusterv1alpha1.ReplaceTerminatingNever:
		return true
	}
	if pod.Spec.NodeName == "" {
		return true
	}
	lost, _, at, _ := nodeLost(w.sc, node, w.now)
	w.later(at)
	return !lost
}

// retire deletes the pods the rules condemned, each on its own: a failed delete is recorded and the
// others proceed.
func (w *work) retire(ctx context.Context) {
	for _, m := range w.pods {
		if m.verdict.reason == "" {
			continue
		}
		if err := w.deletePod(ctx, m, m.verdict.reason, m.verdict.message); err != nil {
			w.fail("retiring pod %s: %v", m.name, err)
			continue
		}
		w.retiring++
		m.retiredNow = true
		w.r.mem.pushLost(w.key, m.verdict.since)
	}
}

// deletePod deletes a pod (gracefully, with a UID precondition) and records the retirement.
func (w *work) deletePod(ctx context.Context, m *member, reason clusterv1alpha1.RetirementReason, message string) error {
	pod := m.pod
	// Remembered before the call: the watch event of the deletion may arrive before it returns.
	w.r.mem.markDeleted(pod.UID, deletion{at: w.now, reason: reason, message: message})
	err := w.r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
	if err != nil && !apierrors.IsNotFound(err) {
		w.r.mem.unmarkDeleted(pod.UID)
		deleteFailures.WithLabelValues(w.sc.Namespace, w.sc.Name).Inc()
		w.r.Recorder.Eventf(w.sc, pod, corev1.EventTypeWarning, clusterv1alpha1.ReasonDeleteFailed, "Delete",
			"Failed to delete pod %s: %v", pod.Name, err)
		return err
	}
	log := ctrl.LoggerFrom(ctx)
	log.Info("Retired identity", "pod", pod.Name, "reason", reason, "message", message)
	podsRetired.WithLabelValues(w.sc.Namespace, w.sc.Name, string(reason)).Inc()
	eventType := corev1.EventTypeNormal
	if reason != clusterv1alpha1.RetiredScaledDown && reason != clusterv1alpha1.RetiredUpdated {
		eventType = corev1.EventTypeWarning
	}
	w.r.Recorder.Eventf(w.sc, pod, eventType, "Retired", "Delete", "Retired identity %s (%s): %s", pod.Name, reason, message)
	w.record(pod.Name, pod, reason, message)
	dt := metav1.NewTime(w.now)
	pod.DeletionTimestamp = &dt
	m.terminating = true
	m.verdict = verdict{}
	m.live = m.live && w.countTerminating(pod, w.nodes[pod.Spec.NodeName]) && reason != clusterv1alpha1.RetiredFailed
	m.ready, m.available = false, false
	return nil
}

// liveMembers returns the pods counting toward replicas.
func (w *work) liveMembers() []*member {
	var out []*member
	for _, m := range w.pods {
		if m.live {
			out = append(out, m)
		}
	}
	return out
}
