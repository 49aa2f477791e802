package controller

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// orphanRecheck is how often a held orphan looks again at its workload's other pods. They may carry no
// managed label (outside the manager's cache), so their going away wakes nothing; orphans are rare.
const orphanRecheck = 5 * time.Second

// orphans releases held pods that no StatefulSingleton selects any more (package documentation, rule
// "Orphaned held pods"): deleted while the operator was stopped, or in the instant before it added the
// finalizer. Without it such a pod would stay held for ever.
type orphans struct {
	*Reconciler
	reportedMu sync.Mutex
	reported   map[types.UID]bool // held orphans whose wait was recorded as an Event
}

// setupOrphans registers the orphaned-pod controller: managed pods that are held, and the held pods of
// a namespace whenever one of its StatefulSingletons is deleted.
func setupOrphans(mgr ctrl.Manager, r *Reconciler) error {
	o := &orphans{Reconciler: r, reported: map[types.UID]bool{}}
	isHeld := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		pod, ok := obj.(*corev1.Pod)
		return ok && awaitsRelease(pod)
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("orphanedpods").
		For(&corev1.Pod{}, builder.WithPredicates(isHeld)).
		Watches(&singletonv1.StatefulSingleton{}, handler.EnqueueRequestsFromMapFunc(o.heldPodsOfNamespace),
			builder.WithPredicates(predicate.Funcs{
				CreateFunc:  func(_ event.CreateEvent) bool { return false },
				UpdateFunc:  func(_ event.UpdateEvent) bool { return false },
				DeleteFunc:  func(_ event.DeleteEvent) bool { return true },
				GenericFunc: func(_ event.GenericEvent) bool { return false },
			})).
		Complete(o)
}

// heldPodsOfNamespace enqueues the held pods of the deleted StatefulSingleton's namespace.
func (o *orphans) heldPodsOfNamespace(ctx context.Context, obj client.Object) []reconcile.Request {
	var list corev1.PodList
	if err := o.Cache.List(ctx, &list, client.InNamespace(obj.GetNamespace()), client.UnsafeDisableDeepCopy); err != nil { // read only
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if awaitsRelease(&list.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}

// Reconcile releases a held pod that no StatefulSingleton selects once every other pod of its workload
// is gone or terminal, and it is the workload's newest held pod.
func (o *orphans) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	if err := o.Cache.Get(ctx, req.NamespacedName, pod); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !awaitsRelease(pod) {
		o.forgetOrphan(pod.UID)
		return reconcile.Result{}, nil
	}
	// The cache first: a held pod that a cached StatefulSingleton selects is that one's controller's to
	// handle (every held pod until its release, so the common case), and answering it from the cache
	// spares a live list of the whole namespace's StatefulSingletons at each of its events (at 1,000 in
	// one namespace, 19 % of the operator's CPU; TestBenchSingletonScale's profile). Only the answer "no
	// one selects it" must be live before the pod is released as an orphan. A cached StatefulSingleton
	// deleted meanwhile re-queues the namespace's held pods once the cache sees it go (heldPodsOfNamespace).
	var cached singletonv1.StatefulSingletonList
	if err := o.Cache.List(ctx, &cached, client.InNamespace(pod.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, err
	}
	if selectedBy(&cached, pod) {
		o.forgetOrphan(pod.UID)
		return reconcile.Result{}, nil
	}
	// Live, not cached: a StatefulSingleton the cache has not seen yet must not lose its pod.
	var singletons singletonv1.StatefulSingletonList
	if err := o.APIReader.List(ctx, &singletons, client.InNamespace(pod.Namespace)); err != nil {
		return reconcile.Result{}, err
	}
	if selectedBy(&singletons, pod) {
		o.forgetOrphan(pod.UID)
		return reconcile.Result{}, nil // its StatefulSingleton's controller handles it
	}
	var list corev1.PodList
	if err := o.APIReader.List(ctx, &list, client.InNamespace(pod.Namespace)); err != nil {
		return reconcile.Result{}, err
	}
	owners, err := o.replicaSetOwners(ctx, pod.Namespace)
	if err != nil {
		return reconcile.Result{}, err
	}
	mine := workloadOf(pod, owners)
	var epoch int64
	var blocking []*corev1.Pod
	for i := range list.Items {
		other := &list.Items[i]
		if other.UID == pod.UID || !siblings(pod, mine, other, owners) {
			continue
		}
		epoch = max(epoch, podEpoch(other))
		switch classify(other) {
		case stateTerminal:
		case stateHeld:
			if newerHeld(other, pod, owners) {
				blocking = append(blocking, other) // only the newest held pod of a workload is released
			}
		default:
			blocking = append(blocking, other)
		}
	}
	if len(blocking) > 0 {
		o.reportOrphan(pod, blocking)
		return reconcile.Result{RequeueAfter: orphanRecheck}, nil
	}
	released, patch, err := releasePatch(pod, epoch+1)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := o.Client.Patch(ctx, released, patch); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil // it changed; its event reconciles again
		}
		return reconcile.Result{}, err
	}
	o.forgetOrphan(pod.UID)
	logf.FromContext(ctx).Info("Released an orphaned held pod", "pod", pod.Name, "epoch", epoch+1)
	o.Recorder.Eventf(pod, nil, corev1.EventTypeNormal, singletonv1.ReasonOrphanReleased, "Release",
		"no StatefulSingleton selects this pod and no other pod of its workload runs: released with epoch %d", epoch+1)
	return reconcile.Result{}, o.markReady(ctx, released)
}

// reportOrphan records, once per pod (per operator process), why an orphaned pod stays held.
func (o *orphans) reportOrphan(pod *corev1.Pod, blocking []*corev1.Pod) {
	o.reportedMu.Lock()
	defer o.reportedMu.Unlock()
	if o.reported[pod.UID] {
		return
	}
	o.reported[pod.UID] = true
	o.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, singletonv1.ReasonOrphanHeld, "Hold",
		"no StatefulSingleton selects this pod; it stays held until pods %s of its workload are gone or terminal", podNames(blocking))
}

func (o *orphans) forgetOrphan(uid types.UID) {
	o.reportedMu.Lock()
	delete(o.reported, uid)
	o.reportedMu.Unlock()
}

// replicaSet is what orphans read of a ReplicaSet: its controller ("Deployment/<name>") and its
// Deployment revision.
type replicaSet struct {
	owner    string
	revision int64
}

// replicaSetOwners maps each ReplicaSet of the namespace to its controller and revision, read live.
func (o *orphans) replicaSetOwners(ctx context.Context, namespace string) (map[string]replicaSet, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(revisionMeta().GroupVersionKind())
	list.Kind += "List"
	if err := o.APIReader.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	owners := map[string]replicaSet{}
	for i := range list.Items {
		rs := &list.Items[i]
		info := replicaSet{}
		info.revision, _ = strconv.ParseInt(rs.Annotations[revisionAnnotation], 10, 64)
		if c := metav1.GetControllerOf(rs); c != nil {
			info.owner = c.Kind + "/" + c.Name
		}
		owners[rs.Name] = info
	}
	return owners, nil
}

// workloadOf names the workload a pod belongs to: its controller, a ReplicaSet's own controller (the
// Deployment) instead of the ReplicaSet, or "" for a pod without a controller.
func workloadOf(pod *corev1.Pod, rsOwners map[string]replicaSet) string {
	c := metav1.GetControllerOf(pod)
	if c == nil {
		return ""
	}
	if c.Kind == "ReplicaSet" {
		if rs := rsOwners[c.Name]; rs.owner != "" {
			return rs.owner
		}
	}
	return c.Kind + "/" + c.Name
}

// siblings reports whether other belongs to the same workload as pod (mine), or was admitted for the same
// StatefulSingleton (its singleton label): either may be the process pod must not run beside.
func siblings(pod *corev1.Pod, mine string, other *corev1.Pod, rsOwners map[string]replicaSet) bool {
	if mine != "" && workloadOf(other, rsOwners) == mine {
		return true
	}
	if v := pod.Labels[singletonv1.LabelSingleton]; v != "" {
		return other.Labels[singletonv1.LabelSingleton] == v
	}
	// Neither a controller nor the webhook's singleton label (created by hand): any pod of the namespace
	// the operator managed may be the other instance.
	_, released := other.Annotations[singletonv1.AnnotationEpoch]
	return mine == "" && (released || other.Labels[singletonv1.LabelManaged] == "true")
}

// newerHeld reports whether held pod a goes before b as the one to release, as candidates are ordered
// (sortCandidates): the newer Deployment revision, then the newer pod, then the smaller name.
func newerHeld(a, b *corev1.Pod, rsOwners map[string]replicaSet) bool {
	if ra, rb := podRevision(a, rsOwners), podRevision(b, rsOwners); ra != rb {
		return ra > rb
	}
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return b.CreationTimestamp.Before(&a.CreationTimestamp)
	}
	return strings.Compare(a.Name, b.Name) < 0
}

// podRevision is the Deployment revision of the pod's ReplicaSet, 0 for any other pod.
func podRevision(pod *corev1.Pod, rsOwners map[string]replicaSet) int64 {
	if c := metav1.GetControllerOf(pod); c != nil && c.Kind == "ReplicaSet" {
		return rsOwners[c.Name].revision
	}
	return 0
}

// selectedBy reports whether a StatefulSingleton of the list (being deleted or not) selects the pod.
func selectedBy(list *singletonv1.StatefulSingletonList, pod *corev1.Pod) bool {
	return slices.ContainsFunc(list.Items, func(ss singletonv1.StatefulSingleton) bool {
		sel, err := metav1.LabelSelectorAsSelector(&ss.Spec.Selector)
		return err == nil && !sel.Empty() && sel.Matches(labels.Set(pod.Labels))
	})
}
