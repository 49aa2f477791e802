// Package controller is the StatefulSetLock controller of lease-operator: among the pods of a
// StatefulSet it labels one `sts-role=writer` and the others `sts-role=reader`, and records the
// election in a coordination.k8s.io/v1 Lease it owns.
//
// Safety: the old writer is labelled reader (and the Lease moved, under a resourceVersion
// precondition) before any other pod is labelled writer, so at no instant do two pods carry the
// writer label; if a demotion cannot be written nobody is promoted. The Lease is the source of truth
// and is read back after a restart, so the writer is sticky and the fencing epoch (the Lease's
// leaseTransitions) only grows.
//
// Fencing across locks: a pod is labelled writer for Lease L only when no other pod of the namespace
// is still labelled writer for L. Every pod the operator labels carries the lock it acts for (label
// app.anukkrit.me/statefulsetlock) and the writer also the Lease's name (annotation
// app.anukkrit.me/writer-lease, and label app.anukkrit.me/writer-lease-key). Before creating or taking L
// or labelling a writer (fence), the namespace's writer pods for L (by that label, and those an earlier
// version labelled without it) are listed live from the API server: a writer for L labelled by another lock
// that exists makes the lock wait (LeaseConflict); one labelled by a lock that no longer exists loses its
// role labels first. When the operator finds a lock gone (its deletion, or a pod still naming it after a
// re-install: reconcileGone), it removes the role labels of every pod that lock labelled, one patch per
// pod, retried until none is left, and deletes its Lease if the garbage collector has not. A lock has no
// finalizer: its deletion never waits for the operator (docs/lease.md, Uninstall), and the finalizer an
// older version set is removed on sight.
package controller

import (
	"cmp"
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// The pods of a lock's StatefulSet: read for the election, patched for their role labels and
// annotations only (config/policy/pods.yaml refuses any other change for this ServiceAccount).
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// Nodes: a pod on a node that is not Ready is not elected writer.
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// The lock's StatefulSet: its selector and replicas name the candidate pods.
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch
// A lock's Lease lives in the lock's namespace, any namespace: RBAC cannot narrow it further, so
// config/policy/leases.yaml admits only Leases labelled and controlled by a StatefulSetLock (and the
// leader-election Lease), never in kube-system or kube-node-lease.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// Its own CRD, read only to tell an uninstall from the deletion of one lock (reconcileGone).
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,resourceNames=statefulsetlocks.app.anukkrit.me,verbs=get

// Field indexes.
const (
	indexPodStatefulSet  = "statefulSet"    // pod → name of the StatefulSet that controls it
	indexPodNode         = "spec.nodeName"  // pod → its node
	indexLockStatefulSet = "statefulSet"    // lock → spec.statefulSetName
	indexLockLease       = "spec.leaseName" // lock → spec.leaseName
)

// Reconciler reconciles StatefulSetLocks.
//
// Its Client writes pods, Leases, locks and the locks' Services and EndpointSlices; its Cache holds
// StatefulSetLocks, pods, nodes, Leases, the locks' Services and EndpointSlices and StatefulSet metadata
// as CacheOptions scoped them; its APIReader reads Leases.
type Reconciler struct {
	opsutil.Access

	obs *observations
	// writes remembers the operator's own writes (pods, Leases, the lock), so that the watch event
	// each causes does not wake the controller: quiet at rest, a Lease renewal is not news.
	writes  *opsutil.WriteTracker
	written *writtenConditions
	// lockCRD is the name of the StatefulSetLock CRD: while it is being deleted (an uninstall), the
	// labels of the locks it takes with it are kept (reconcileGone).
	lockCRD string
}

// Options configure the controller; the zero value is what production runs.
type Options struct {
	opsutil.Overrides
	// LockCRD overrides the name of the StatefulSetLock CRD the controller checks for an uninstall
	// (tests: a CRD that does not exist reads as an uninstall).
	LockCRD string
}

// lockCRDName is the StatefulSetLock CRD's name.
var lockCRDName = "statefulsetlocks." + leasev1.GroupVersion.Group

// Setup registers the StatefulSetLock controller with the manager, whose cache CacheOptions
// scopes.
func (opts *Options) Setup(ctx context.Context, mgr ctrl.Manager) error {
	opsutil.RegisterMetrics(failovers, failoverLatency)
	if err := indexFields(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	r := &Reconciler{
		Access:  opsutil.NewAccess(mgr, "lease-operator", opts.Overrides),
		obs:     newObservations(),
		writes:  opsutil.NewWriteTracker(),
		written: newWrittenConditions(),
		lockCRD: cmp.Or(opts.LockCRD, lockCRDName),
	}
	cached := mgr.GetCache()
	return ctrl.NewControllerManagedBy(mgr).
		Named("statefulsetlock").
		For(&leasev1.StatefulSetLock{}, builder.WithPredicates(r.forgetDeleted(), opsutil.IgnoreOwnWrites[client.Object](r.writes), lockChanged())).
		WatchesRawSource(source.Kind(cached, &corev1.Pod{}, r.podHandler(), opsutil.IgnoreOwnWrites[*corev1.Pod](r.writes), podChanged())).
		// Someone else's change of a Lease, or its deletion, is news; the operator's own writes are not.
		WatchesRawSource(source.Kind(cached, &coordinationv1.Lease{}, r.leaseHandler(), opsutil.IgnoreOwnWrites[*coordinationv1.Lease](r.writes))).
		WatchesRawSource(source.Kind(cached, statefulSetMeta(""), r.statefulSetHandler(), statefulSetPredicate())).
		// A change or deletion of a lock's Service by someone else puts it back (spec.services).
		WatchesRawSource(source.Kind(cached, &corev1.Service{}, handler.TypedEnqueueRequestForOwner[*corev1.Service](
			mgr.GetScheme(), mgr.GetRESTMapper(), &leasev1.StatefulSetLock{}, handler.OnlyControllerOwner()),
			opsutil.IgnoreOwnWrites[*corev1.Service](r.writes))).
		// Likewise for its EndpointSlices (spec.services.endpoints: Operator).
		WatchesRawSource(source.Kind(cached, &discoveryv1.EndpointSlice{}, handler.TypedEnqueueRequestForOwner[*discoveryv1.EndpointSlice](
			mgr.GetScheme(), mgr.GetRESTMapper(), &leasev1.StatefulSetLock{}, handler.OnlyControllerOwner()),
			opsutil.IgnoreOwnWrites[*discoveryv1.EndpointSlice](r.writes))).
		WatchesRawSource(source.Kind(cached, &corev1.Node{}, r.nodeHandler(), r.nodePredicate())).
		// A lock's deletion wakes the younger locks naming its StatefulSet (StatefulSetConflict): the
		// next in line takes over at once, not at its next retry.
		WatchesRawSource(source.Kind(cached, &leasev1.StatefulSetLock{}, r.siblingHandler(), lockDeleted())).
		WithOptions(controller.Options{MaxConcurrentReconciles: opsutil.Workers}).
		Complete(r)
}

// indexFields adds the field indexes the map functions and the reconcile list by: pods by StatefulSet
// and by node, locks by StatefulSet and by Lease.
func indexFields(ctx context.Context, indexer client.FieldIndexer) error {
	for _, ix := range []struct {
		obj     client.Object
		field   string
		extract client.IndexerFunc
	}{
		{&corev1.Pod{}, indexPodStatefulSet, func(o client.Object) []string {
			if sts, ok := opsutil.ControllerOfKind(o, "StatefulSet"); ok {
				return []string{sts.Name}
			}
			return nil
		}},
		{&corev1.Pod{}, indexPodNode, func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }},
		{&leasev1.StatefulSetLock{}, indexLockStatefulSet, func(o client.Object) []string {
			return []string{o.(*leasev1.StatefulSetLock).Spec.StatefulSetName}
		}},
		{&leasev1.StatefulSetLock{}, indexLockLease, func(o client.Object) []string {
			return []string{o.(*leasev1.StatefulSetLock).Spec.LeaseName}
		}},
	} {
		if err := indexer.IndexField(ctx, ix.obj, ix.field, ix.extract); err != nil {
			return fmt.Errorf("indexing %T by %s: %w", ix.obj, ix.field, err)
		}
	}
	return nil
}
