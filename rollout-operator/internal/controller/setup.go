package controller

import (
	"context"
	"slices"
	"time"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// Options are the controller's settings: the binary sets SecretReaderClusterRole from its flags
// (AddFlags), tests replace the rest.
type Options struct {
	// Checker replaces the Prometheus checker.
	Checker Checker
	// QueryTimeout bounds one check; zero means 10 seconds.
	QueryTimeout time.Duration
	// SecretReaderClusterRole is the ClusterRole bound in the namespaces whose PhasedRollouts name a
	// credentials Secret; empty means DefaultSecretReaderClusterRole.
	SecretReaderClusterRole string
	// Subject is the operator's identity in those RoleBindings; nil means "ask the API server"
	// (SelfSubjectReview).
	Subject *rbacv1.Subject
	// SwitchoverTimeout bounds the wait for a StatefulSetLock to move its writer off a pod a step
	// rolls; zero means DefaultSwitchoverTimeout.
	SwitchoverTimeout time.Duration
}

// AddFlags registers the binary's flags for o on fs (main passes it to shared/manager).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.SecretReaderClusterRole, "secret-reader-cluster-role", DefaultSecretReaderClusterRole,
		"ClusterRole granting get on Secrets that the operator binds in the namespaces whose PhasedRollouts name a credentials Secret")
}

// Setup registers the PhasedRollout controller with the manager. It watches
// PhasedRollouts (spec changes only: its own status writes do not trigger it), StatefulSets and
// their pods (mapped to the PhasedRollout whose targetRef names the StatefulSet). StatefulSetLocks
// are not watched: their kind may not be served (writer.go).
func (opts *Options) Setup(ctx context.Context, mgr ctrl.Manager) error {
	opsutil.RegisterMetrics(stepsTotal, checksTotal, stepDuration, stepOverhead)
	if err := mgr.GetFieldIndexer().IndexField(ctx, &rolloutv1alpha1.PhasedRollout{}, indexTarget, func(o client.Object) []string {
		return o.(*rolloutv1alpha1.PhasedRollout).Spec.Targets()
	}); err != nil {
		return err
	}
	r := &Reconciler{
		Client:            mgr.GetClient(),
		APIReader:         mgr.GetAPIReader(),
		Recorder:          mgr.GetEventRecorder("rollout-operator"),
		Checker:           opts.Checker,
		QueryTimeout:      opts.QueryTimeout,
		SwitchoverTimeout: opts.SwitchoverTimeout,
	}
	if r.Checker == nil {
		r.Checker = PromChecker{}
	}
	if r.QueryTimeout <= 0 {
		r.QueryTimeout = 10 * time.Second
	}
	if r.SwitchoverTimeout <= 0 {
		r.SwitchoverTimeout = DefaultSwitchoverTimeout
	}
	access, err := newSecretAccess(ctx, mgr, *opts)
	if err != nil {
		return err
	}
	r.SecretAccess = access
	if err := setupSecretAccess(mgr, access); err != nil {
		return err
	}
	byTarget := rolloutsTargeting(mgr.GetClient())
	return ctrl.NewControllerManagedBy(mgr).
		Named("phasedrollout").
		WithOptions(controller.Options{MaxConcurrentReconciles: opsutil.Workers}).
		For(&rolloutv1alpha1.PhasedRollout{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, deletingPredicate()))).
		Watches(&appsv1.StatefulSet{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return withOwner(byTarget(ctx, o.GetNamespace(), o.GetName()), o)
		})).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			sts, ok := opsutil.ControllerOfKind(o, "StatefulSet")
			if !ok {
				return nil
			}
			return byTarget(ctx, sts.Namespace, sts.Name)
		}), builder.WithPredicates(podReadinessOrRevisionChanged())).
		Complete(r)
}

// newSecretAccess builds the controller's access to credentials Secrets from opts: the ClusterRole to
// bind and the operator's own identity in the RoleBindings.
func newSecretAccess(ctx context.Context, mgr ctrl.Manager, opts Options) (*SecretAccess, error) {
	clusterRole := opts.SecretReaderClusterRole
	if clusterRole == "" {
		clusterRole = DefaultSecretReaderClusterRole
	}
	if opts.Subject != nil {
		return newRolloutSecretAccess(mgr.GetClient(), mgr.GetAPIReader(), clusterRole, *opts.Subject), nil
	}
	// The manager's client does not read from its cache before it starts, and this one writes.
	subject, err := opsutil.SelfSubject(ctx, mgr.GetClient())
	if err != nil {
		return nil, err
	}
	return newRolloutSecretAccess(mgr.GetClient(), mgr.GetAPIReader(), clusterRole, subject), nil
}

// rolloutsTargeting returns the requests of the PhasedRollouts whose targetRef names a StatefulSet,
// from the cache's index (none when the list fails: the next event or resync maps again).
func rolloutsTargeting(c client.Reader) func(ctx context.Context, ns, sts string) []reconcile.Request {
	return func(ctx context.Context, ns, sts string) []reconcile.Request {
		var list rolloutv1alpha1.PhasedRolloutList
		if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingFields{indexTarget: sts}); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for _, pr := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pr.Namespace, Name: pr.Name}})
		}
		return reqs
	}
}

// withOwner adds to reqs the PhasedRollout a StatefulSet's ManagedByAnnotation names, when no
// PhasedRollout targeting it is that one: if it no longer exists (deleted while the operator was not
// running, or while it was uninstalled), its reconcile finds it gone and hands the StatefulSet back.
// The informer's initial list maps every annotated StatefulSet, so this also happens at start.
func withOwner(reqs []reconcile.Request, sts client.Object) []reconcile.Request {
	owner, ok := sts.GetAnnotations()[rolloutv1alpha1.ManagedByAnnotation]
	if !ok || owner == "" {
		return reqs
	}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: sts.GetNamespace(), Name: owner}}
	if slices.Contains(reqs, req) {
		return reqs
	}
	return append(reqs, req)
}

// deletingPredicate passes updates that set a deletion timestamp, so that a PhasedRollout still
// carrying the finalizer of earlier versions loses it (finalizer changes do not bump the generation).
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
		return opsutil.PodReady(oldPod) != opsutil.PodReady(newPod) ||
			oldPod.Labels[appsv1.ControllerRevisionHashLabelKey] != newPod.Labels[appsv1.ControllerRevisionHashLabelKey] ||
			!newPod.DeletionTimestamp.IsZero()
	}}
}
