package controllerutil

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// An operator that reads Secrets only in the namespaces of the objects that name one holds no Secret
// permission of its own: its manifest ships a ClusterRole granting Secret reads that is bound nowhere,
// plus `bind` on that one ClusterRole, and SecretAccess binds it to the operator, with a RoleBinding,
// in each namespace that needs it (and deletes that RoleBinding when none is left). The manifest's
// admission policies (config/policy of rollout-operator and extended-operator) admit from the
// operator's ServiceAccount only the RoleBinding RoleBinding returns.

const (
	// ManagedByLabel marks the RoleBindings SecretAccess created (value: the operator), so it never
	// deletes someone else's.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// SecretAccessLabel marks the RoleBinding as the operator's Secret grant (value: the operator): the
	// admission policy that requires a namespace to hold the operator's objects selects RoleBindings by
	// it, and the policy on the RoleBinding's shape makes every RoleBinding the operator writes carry it.
	SecretAccessLabel = "sts.plus/secret-access"
)

// SecretAccess keeps, in every namespace, a RoleBinding that lets the operator read Secrets exactly
// while Needed says the namespace needs it.
type SecretAccess struct {
	// Client lists the operator's objects (cached) and writes RoleBindings.
	Client client.Client
	// APIReader reads RoleBindings from the API server (RoleBindings are not cached: no cluster-wide
	// RoleBinding watch is needed).
	APIReader client.Reader
	// Operator is the operator's name: the labels' value, and the RoleBinding is <Operator>-secret-reader.
	Operator string
	// ClusterRole is the ClusterRole the RoleBindings refer to.
	ClusterRole string
	// Subject is the operator's own identity, the RoleBindings' subject.
	Subject rbacv1.Subject
	// Purpose is the RoleBinding's sts.plus/purpose annotation, for whoever finds it.
	Purpose string
	// Needed says whether the namespace needs Secret access now.
	Needed func(ctx context.Context, namespace string) (bool, error)
	// Changed, when set, is called after each reconcile of a namespace with whether the operator holds
	// Secret access there now (so it can start or stop reading Secrets there).
	Changed func(ctx context.Context, namespace string, granted bool)
}

// RoleBindingName is the name of the RoleBinding the operator keeps in the namespaces that need it.
func (a *SecretAccess) RoleBindingName() string { return a.Operator + "-secret-reader" }

// SelfSubject returns the identity the client authenticates as, as a RoleBinding subject (a
// ServiceAccount when it is one), from a SelfSubjectReview: it is the ServiceAccount of the
// operator's pod, or the impersonated user of a local run.
func SelfSubject(ctx context.Context, c client.Client) (rbacv1.Subject, error) {
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return rbacv1.Subject{}, fmt.Errorf("asking the API server who the operator is (SelfSubjectReview): %w", err)
	}
	return SubjectOf(review.Status.UserInfo.Username)
}

// SubjectOf turns a user name into a RoleBinding subject.
func SubjectOf(username string) (rbacv1.Subject, error) {
	if username == "" {
		return rbacv1.Subject{}, errors.New("the API server returned no user name for the operator")
	}
	if rest, ok := strings.CutPrefix(username, "system:serviceaccount:"); ok {
		if ns, name, ok := strings.Cut(rest, ":"); ok && ns != "" && name != "" {
			return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}, nil
		}
	}
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: username}, nil
}

// Setup registers the controller that keeps the RoleBindings, named name: it reconciles a namespace
// (a request with an empty name) whenever an object of watched's kind there changes.
func (a *SecretAccess) Setup(mgr ctrl.Manager, name string, watched client.Object) error {
	// Events do not reach a namespace whose last object was deleted while the operator was down: once
	// elected, sweep the namespaces that still hold one of its RoleBindings.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return nil
		}
		return a.sweep(ctx)
	})); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(name).
		Watches(watched, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace()}}}
		}), builder.WithPredicates(neededMayChange())).
		Complete(a)
}

// neededMayChange passes the events of a watched object that can change Needed's answer: its creation
// and deletion, a spec change (the generation) and the start of its deletion. Not its status writes:
// each queued its namespace, whose reconcile lists every object there (1,000 PhasedRollouts in one
// namespace, rolling at once, spent 22 % of rollout-operator's CPU on it; TestBenchRolloutScale's profile).
func neededMayChange() predicate.Predicate {
	return predicate.Or(predicate.GenerationChangedPredicate{}, predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
		},
	})
}

// Reconcile creates the namespace's RoleBinding when Needed says so, and deletes it (if the operator
// made it) otherwise.
func (a *SecretAccess) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	need, err := a.Needed(ctx, req.Namespace)
	if err != nil {
		return reconcile.Result{}, err
	}
	if need {
		err := a.Ensure(ctx, req.Namespace)
		if err == nil && a.Changed != nil {
			a.Changed(ctx, req.Namespace, true)
		}
		return reconcile.Result{}, err
	}
	if a.Changed != nil {
		// Stop reading first: the grant goes next.
		a.Changed(ctx, req.Namespace, false)
	}
	rb := &rbacv1.RoleBinding{}
	err = a.APIReader.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: a.RoleBindingName()}, rb)
	if apierrors.IsNotFound(err) {
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if rb.Labels[ManagedByLabel] != a.Operator {
		return reconcile.Result{}, nil
	}
	if err := a.Client.Delete(ctx, rb, client.Preconditions{UID: &rb.UID}); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("deleting RoleBinding %s/%s: %w", req.Namespace, rb.Name, err)
	}
	log.FromContext(ctx).Info("nothing in the namespace needs a Secret any more: Secret access revoked", "namespace", req.Namespace)
	return reconcile.Result{}, nil
}

// sweep reconciles every namespace holding a RoleBinding the operator made, so one left behind while
// the operator was down is deleted. A failure is logged, not fatal: the next event in that namespace
// retries.
func (a *SecretAccess) sweep(ctx context.Context) error {
	var list rbacv1.RoleBindingList
	if err := a.APIReader.List(ctx, &list, client.MatchingLabels{ManagedByLabel: a.Operator}); err != nil {
		log.FromContext(ctx).Error(err, "listing the operator's Secret-access RoleBindings")
		return nil
	}
	for _, rb := range list.Items {
		if rb.Name != a.RoleBindingName() {
			continue
		}
		if _, err := a.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: rb.Namespace}}); err != nil {
			log.FromContext(ctx).Error(err, "revoking stale Secret access", "namespace", rb.Namespace)
		}
	}
	return nil
}

// Ensure makes sure the namespace's RoleBinding exists and binds the ClusterRole to the operator. The
// operator calls it before reading a Secret, so the first read does not wait for this controller.
func (a *SecretAccess) Ensure(ctx context.Context, namespace string) error {
	want := a.RoleBinding(namespace)
	rb := &rbacv1.RoleBinding{}
	err := a.APIReader.Get(ctx, client.ObjectKeyFromObject(want), rb)
	switch {
	case apierrors.IsNotFound(err):
		if err := a.Client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating RoleBinding %s/%s (Secret access): %w", namespace, want.Name, err)
		}
		log.FromContext(ctx).Info("Secret access granted", "namespace", namespace, "roleBinding", want.Name, "clusterRole", a.ClusterRole)
		return nil
	case err != nil:
		return fmt.Errorf("reading RoleBinding %s/%s: %w", namespace, want.Name, err)
	case rb.RoleRef != want.RoleRef:
		// roleRef is immutable: replace the binding.
		if err := a.Client.Delete(ctx, rb, client.Preconditions{UID: &rb.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("replacing RoleBinding %s/%s: %w", namespace, want.Name, err)
		}
		return a.Client.Create(ctx, want)
	case !slices.Equal(rb.Subjects, want.Subjects) || rb.Labels[ManagedByLabel] != a.Operator || rb.Labels[SecretAccessLabel] != a.Operator:
		rb.Subjects = want.Subjects
		if rb.Labels == nil {
			rb.Labels = map[string]string{}
		}
		rb.Labels[ManagedByLabel] = a.Operator
		rb.Labels[SecretAccessLabel] = a.Operator
		return a.Client.Update(ctx, rb)
	}
	return nil
}

// RoleBinding is the namespace's RoleBinding as the operator writes it (and its admission policies
// admit it).
func (a *SecretAccess) RoleBinding(namespace string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{
			Name: a.RoleBindingName(), Namespace: namespace,
			Labels:      map[string]string{ManagedByLabel: a.Operator, SecretAccessLabel: a.Operator},
			Annotations: map[string]string{"sts.plus/purpose": a.Purpose},
		},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: a.ClusterRole},
		Subjects: []rbacv1.Subject{a.Subject},
	}
}
