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
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/source"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// A StatefulCluster's members: created, adopted (one metadata patch) and retired in any namespace, narrowed
// to those of a StatefulCluster outside the system namespaces by config/policy (admission).
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete;patch
// Each identity's claims: created from volumeClaimTemplates, labelled retired or (un)owned, deleted by the
// retention policy; the same admission policy applies.
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;delete;patch
// Node readiness (a member on a dead node is replaced) and zone labels (zoneSpread): read only.
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// The template history, as a StatefulSet's (update renumbers a revision the template went back to).
// +kubebuilder:rbac:groups=apps,resources=controllerrevisions,verbs=get;list;watch;create;update;delete
// The PersistentVolume controller says why a claim does not bind only in Events (stuck.go).
// +kubebuilder:rbac:groups="",resources=events,verbs=list

// indexPodNode indexes pods by node, to find the StatefulClusters a node's readiness concerns.
const indexPodNode = "spec.nodeName"

// indexPodController indexes the cached pods by the UID of their controller (podWithoutController for
// none), so that a reconcile copies out of the cache its own pods and the orphans it may adopt, not
// every labelled pod of the namespace: with 1,000 StatefulClusters in one namespace, listing and
// deep-copying all 1,000 pods at each reconcile was 56 % of the operator's CPU (BENCHMARKS.md).
const indexPodController = "metadata.controllerUID"

// podWithoutController is indexPodController's key for a pod that has no controller (a UID never is).
const podWithoutController = "none"

func podControllerKey(o client.Object) []string {
	if ref := metav1.GetControllerOf(o); ref != nil {
		return []string{string(ref.UID)}
	}
	return []string{podWithoutController}
}

// Reconciler reconciles StatefulClusters.
//
// Its Client writes pods, claims, revisions and status; its
// Cache holds StatefulClusters, pods, claims, revisions and nodes as CacheOptions scoped them; its
// APIReader confirms what a lagging cache cannot.
type Reconciler struct {
	opsutil.Access

	mem    *memory
	writes *ownWrites
}

// Options configure the controller; the zero value is what production runs.
type Options struct {
	opsutil.Overrides
}

// Setup registers the StatefulCluster controller with the manager, whose cache CacheOptions
// scoped (cache.go).
func (opts *Options) Setup(ctx context.Context, mgr ctrl.Manager) error {
	opsutil.RegisterMetrics(podsCreated, podsRetired, claimsRetired, createFailures, deleteFailures, replacementLatency)
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, indexPodNode, func(o client.Object) []string {
		return []string{o.(*corev1.Pod).Spec.NodeName}
	}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, indexPodController, podControllerKey); err != nil {
		return err
	}
	// Writes go through the manager's client, which has no client-side rate limit (controller-runtime's
	// default): the API server's priority and fairness is the limit, and a scale-up creates pods in
	// slow-start batches that stop at the first failure. A limit of 50 requests/s held a 0→500
	// scale-up to 62 pods/s where the API server allowed 283 (BENCHMARKS.md).
	r := &Reconciler{
		Access: opsutil.NewAccess(mgr, "cluster-operator", opts.Overrides),
		mem:    newMemory(),
		writes: newOwnWrites(),
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("statefulcluster").
		For(&clusterv1alpha1.StatefulCluster{}, builder.WithPredicates(r.clusterPredicate())).
		WatchesRawSource(source.Kind(mgr.GetCache(), &corev1.Pod{}, r.podHandler(), podPredicate())).
		WatchesRawSource(source.Kind(mgr.GetCache(), &corev1.PersistentVolumeClaim{}, claimHandler(), claimPredicate())).
		WatchesRawSource(source.Kind(mgr.GetCache(), &corev1.Node{}, r.nodeHandler(), nodePredicate())).
		WithOptions(controller.Options{MaxConcurrentReconciles: opsutil.Workers}).
		Complete(r)
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

// loadPods reads the pods of the StatefulCluster and the nodes they run on.
func (r *Reconciler) loadPods(ctx context.Context, s *scope) error {
	if err := s.loadMembers(ctx); err != nil {
		return err
	}
	return s.loadNodes(ctx)
}

// loadMembers reads the pods of the namespace, adopts matching orphans and keeps those this
// StatefulCluster controls, plus the ones it created that the cache does not show yet; oldest identity
// first.
func (s *scope) loadMembers(ctx context.Context) error {
	// Orphans are adopted only for a spec that is acted on (checkSpec); the pods this StatefulCluster
	// controls are its own whatever its selector.
	selector, err := metav1.LabelSelectorAsSelector(s.sc.Spec.Selector)
	adopting := err == nil && s.invalid == nil && !selector.Empty()
	if !adopting {
		selector = labels.Nothing()
	}
	// The orphans' round trip comes first, so that nothing slow runs between the cache's List and the
	// reads of this process's memory below (deletedByUs): a deletion event arriving in between would make
	// the memory forget a pod that the list still shows live (envtest: an over-deletion).
	var orphans []corev1.Pod
	if adopting {
		if orphans, err = s.unlabelledOrphans(ctx, selector); err != nil {
			return err
		}
	}
	// The expectations are read before the cache, never after: the pod event handler forgets a pod's
	// expectation (observed) once the cache shows the pod, and an event arriving between the List and
	// a later read would leave that pod counted neither from the list nor from the expectations, and
	// be created again (CI: 3 pods over 500 replicas under load). Read first, an expectation the
	// handler drops afterwards belongs to a pod the cache already holds, so the List shows it.
	pending := s.r.mem.pendingCreates(s.key, s.now)
	// The cache's own pods and, when adopting, its pods without a controller (labelled orphans, such as
	// those a deleted StatefulCluster left with --cascade=orphan); the lists return copies.
	controllers := []string{string(s.sc.UID)}
	if adopting {
		controllers = append(controllers, podWithoutController)
	}
	var list corev1.PodList
	for _, uid := range controllers {
		var part corev1.PodList
		if err := s.r.Cache.List(ctx, &part, client.InNamespace(s.sc.Namespace), client.MatchingFields{indexPodController: uid}); err != nil {
			return fmt.Errorf("listing pods: %w", err)
		}
		list.Items = append(list.Items, part.Items...)
	}
	list.Items = append(list.Items, orphans...)
	seen := map[string]bool{}
	for i := range list.Items {
		pod := &list.Items[i]
		if d, ours := s.r.mem.deletedByUs(pod.UID); ours && pod.DeletionTimestamp.IsZero() {
			// This process deleted the pod, and the cache has not shown that yet: it is terminating,
			// as deletePod left it for the reconcile that deleted it. Taken for live and not
			// terminating, it would be scaled down again, and with pods the previous reconcile could
			// not see now shown, the scale-down would pick others too (an over-deletion).
			pod.DeletionTimestamp = &metav1.Time{Time: d.at} // the cache's List returns copies
		}
		ref := metav1.GetControllerOf(pod)
		switch {
		case ref != nil && ref.UID == s.sc.UID:
		case ref == nil && selector.Matches(labels.Set(pod.Labels)) && pod.DeletionTimestamp.IsZero():
			if err := s.adopt(ctx, pod); err != nil {
				s.fail("adopting pod %s: %v", pod.Name, err)
				continue
			}
		default:
			continue // another controller's pod, or not ours: never touched
		}
		seen[pod.Name] = true
		if _, ok := pending[pod.Name]; ok {
			s.r.mem.observed(s.key, pod.Name)
		}
		n, _ := ordinalOf(s.sc.Name, pod.Name)
		s.pods = append(s.pods, &member{pod: pod, name: pod.Name, ordinal: n, revision: pod.Labels[clusterv1alpha1.RevisionLabel]})
	}
	for name, c := range pending {
		if !seen[name] {
			n, _ := ordinalOf(s.sc.Name, name)
			s.pods = append(s.pods, &member{name: name, ordinal: n, revision: c.revision, live: true})
		}
	}
	// Oldest identity first: by ordinal, or by creation for random names.
	slices.SortStableFunc(s.pods, func(a, b *member) int {
		if a.ordinal != b.ordinal {
			return int(a.ordinal - b.ordinal)
		}
		return podCreated(a).Compare(podCreated(b))
	})
	return nil
}

// unlabelledOrphans lists, uncached, the pods of the namespace that selector matches and that lack the
// operator's label and a controller: the orphans the cache does not hold (CacheOptions). The API server
// filters on the labels, so the answer holds only such orphans, never the StatefulCluster's own pods.
// It answers from its watch cache as it is (resourceVersion "0"): a consistent list would wait for the
// cache's progress notification (up to 100 ms) on every reconcile, and an orphan seen late is adopted
// by a later reconcile, one seen stale fails the adoption's resourceVersion precondition.
func (s *scope) unlabelledOrphans(ctx context.Context, selector labels.Selector) ([]corev1.Pod, error) {
	var list corev1.PodList
	sel := withoutOperatorLabel(selector)
	if err := s.r.APIReader.List(ctx, &list, client.InNamespace(s.sc.Namespace), client.MatchingLabelsSelector{Selector: sel}, opsutil.NotOlderThan("0")); err != nil {
		return nil, fmt.Errorf("listing orphan pods: %w", err)
	}
	return slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return metav1.GetControllerOf(&p) != nil }), nil
}

// loadNodes reads the nodes of the pods (nil for a node that is gone) and, with zoneSpread, all nodes.
func (s *scope) loadNodes(ctx context.Context) error {
	s.nodes = map[string]*corev1.Node{}
	for _, m := range s.pods {
		if m.pod == nil || m.pod.Spec.NodeName == "" {
			continue
		}
		if _, ok := s.nodes[m.pod.Spec.NodeName]; ok {
			continue
		}
		node := &corev1.Node{}
		if err := s.r.Cache.Get(ctx, client.ObjectKey{Name: m.pod.Spec.NodeName}, node); err != nil {
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("reading node %s: %w", m.pod.Spec.NodeName, err)
			}
			node = nil
		}
		s.nodes[m.pod.Spec.NodeName] = node
	}
	if s.sc.Spec.ZoneSpread != nil {
		var nodes corev1.NodeList
		if err := s.r.Cache.List(ctx, &nodes); err != nil {
			return fmt.Errorf("listing nodes: %w", err)
		}
		for i := range nodes.Items {
			s.allNodes = append(s.allNodes, &nodes.Items[i])
		}
	}
	return nil
}

func podCreated(m *member) time.Time {
	if m.pod == nil {
		return time.Now().Add(time.Hour) // not created yet as far as the cache knows: the newest
	}
	return m.pod.CreationTimestamp.Time
}

// judgePods decides, per pod, whether it counts toward replicas and whether it must be retired.
func (r *Reconciler) judgePods(ctx context.Context, s *scope) {
	claims := map[string]*corev1.PersistentVolumeClaim{}
	for i := range s.claims {
		claims[s.claims[i].Name] = &s.claims[i]
	}
	for _, m := range s.pods {
		if m.pod == nil {
			continue
		}
		pod := m.pod
		var node *corev1.Node
		if pod.Spec.NodeName != "" {
			node = s.nodes[pod.Spec.NodeName]
		}
		finished := pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded
		if !pod.DeletionTimestamp.IsZero() {
			m.terminating = true
			m.live = !finished && s.countTerminating(pod, node)
			continue
		}
		ready := opsutil.PodReady(pod)
		if ready {
			r.mem.markReady(pod.UID)
		}
		m.verdict = judge(s.sc, pod, node, r.mem.wasReady(pod.UID) || everReady(pod), s.now,
			func() *stuck { return s.whyStuck(ctx, pod, claims) })
		s.later(m.verdict.recheck)
		// A finished pod's containers have stopped: it no longer counts, even while it cannot be deleted.
		m.live = !finished
		m.ready = ready
		var at time.Time
		m.available, at = available(s.sc, pod, s.now)
		s.later(at)
	}
}

// countTerminating applies spec.replaceTerminating to a pod being deleted.
func (s *scope) countTerminating(pod *corev1.Pod, node *corev1.Node) bool {
	switch s.sc.Spec.ReplaceTerminating {
	case clusterv1alpha1.ReplaceTerminatingAlways:
		return false
	case clusterv1alpha1.ReplaceTerminatingNever:
		return true
	}
	if pod.Spec.NodeName == "" {
		return true
	}
	lost, _, at, _ := nodeLost(s.sc, node, s.now)
	s.later(at)
	return !lost
}

// retire deletes the pods the rules condemned, each on its own: a failed delete is recorded and the
// others proceed.
func (r *Reconciler) retire(ctx context.Context, s *scope) {
	for _, m := range s.pods {
		if m.verdict.reason == "" {
			continue
		}
		if err := s.deletePod(ctx, m, m.verdict.reason, m.verdict.message); err != nil {
			s.fail("retiring pod %s: %v", m.name, err)
			continue
		}
		s.retiring++
		m.retiredNow = true
		r.mem.pushLost(s.key, m.verdict.since)
	}
}

// deletePod deletes a pod (gracefully, with a UID precondition) and records the retirement.
func (s *scope) deletePod(ctx context.Context, m *member, reason clusterv1alpha1.RetirementReason, message string) error {
	pod := m.pod
	// Remembered before the call: the watch event of the deletion may arrive before it returns.
	s.r.mem.markDeleted(pod.UID, deletion{at: s.now, reason: reason, message: message})
	err := s.r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
	if err != nil && !apierrors.IsNotFound(err) {
		s.r.mem.unmarkDeleted(pod.UID)
		deleteFailures.WithLabelValues(s.sc.Namespace, s.sc.Name).Inc()
		s.r.Recorder.Eventf(s.sc, pod, corev1.EventTypeWarning, clusterv1alpha1.ReasonDeleteFailed, "Delete",
			"Failed to delete pod %s: %v", pod.Name, err)
		return err
	}
	log := ctrl.LoggerFrom(ctx)
	log.Info("Retired identity", "pod", pod.Name, "reason", reason, "message", message)
	podsRetired.WithLabelValues(s.sc.Namespace, s.sc.Name, string(reason)).Inc()
	eventType := corev1.EventTypeNormal
	if reason != clusterv1alpha1.RetiredScaledDown && reason != clusterv1alpha1.RetiredUpdated {
		eventType = corev1.EventTypeWarning
	}
	s.r.Recorder.Eventf(s.sc, pod, eventType, clusterv1alpha1.EventRetired, "Delete", "Retired identity %s (%s): %s", pod.Name, reason, message)
	s.record(pod.Name, pod, reason, message)
	dt := metav1.NewTime(s.now)
	pod.DeletionTimestamp = &dt
	m.terminating = true
	m.verdict = verdict{}
	m.live = m.live && s.countTerminating(pod, s.nodes[pod.Spec.NodeName]) && reason != clusterv1alpha1.RetiredFailed
	m.ready, m.available = false, false
	return nil
}

// liveMembers returns the pods counting toward replicas.
func (s *scope) liveMembers() []*member {
	var out []*member
	for _, m := range s.pods {
		if m.live {
			out = append(out, m)
		}
	}
	return out
}
