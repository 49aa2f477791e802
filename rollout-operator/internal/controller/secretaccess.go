package controller

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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// The operator reads credentials Secrets only in the namespaces of PhasedRollouts that name one: the
// manifest ships a ClusterRole granting `get` on Secrets that is bound nowhere, and the operator binds
// it, with a RoleBinding, in each namespace where a PhasedRollout has check.query.secretRef (and
// deletes that RoleBinding when none is left). It may create such bindings because it holds `bind` on
// that one ClusterRole; it holds no Secret permission of its own, and Secrets are read uncached (a Get
// per check), so there is no cluster-wide Secret list or watch either.
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=get;list;create;update;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=rollout-operator-secret-reader
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=selfsubjectreviews,verbs=create

const (
	// DefaultSecretReaderClusterRole is the ClusterRole of deploy/rollout-operator.yaml granting `get`
	// on Secrets; the operator binds it in the namespaces that need it.
	DefaultSecretReaderClusterRole = "rollout-operator-secret-reader"
	// SecretReaderRoleBinding is the name of the RoleBinding the operator keeps in those namespaces.
	SecretReaderRoleBinding = "rollout-operator-secret-reader"
	// managedByLabel marks the RoleBindings the operator created, so it never deletes someone else's.
	managedByLabel = "app.kubernetes.io/managed-by"
	managedByValue = "rollout-operator"
	// grantLabel marks the RoleBinding as the operator's Secret grant: the admission policy
	// config/policy/rolebinding_namespace.yaml selects the RoleBindings carrying it (and
	// rolebinding_shape.yaml makes every RoleBinding the operator writes carry it).
	grantLabel = "sts.plus/secret-access"
)

// SecretAccess keeps, in every namespace, a RoleBinding that lets the operator read Secrets exactly
// while a PhasedRollout there names a credentials Secret.
type SecretAccess struct {
	// Client lists PhasedRollouts (cached) and writes RoleBindings.
	Client client.Client
	// APIReader reads RoleBindings from the API server (RoleBindings are not cached: no cluster-wide
	// RoleBinding watch is needed).
	APIReader client.Reader
	// ClusterRole is the ClusterRole the RoleBindings refer to.
	ClusterRole string
	// Subject is the operator's own identity, the RoleBindings' subject.
	Subject rbacv1.Subject
}

// Self returns the identity the client authenticates as, as a RoleBinding subject (a ServiceAccount
// when it is one), from a SelfSubjectReview: it is the ServiceAccount of the operator's pod, or the
// impersonated user of a local run.
func Self(ctx context.Context, c client.Client) (rbacv1.Subject, error) {
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return rbacv1.Subject{}, fmt.Errorf("asking the API server who the operator is (SelfSubjectReview): %w", err)
	}
	return subjectOf(review.Status.UserInfo.Username)
}

// subjectOf turns a user name into a RoleBinding subject.
func subjectOf(username string) (rbacv1.Subject, error) {
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

// setupSecretAccess registers the controller that keeps the RoleBindings: it reconciles a namespace
// (a request with an empty name) whenever a PhasedRollout there changes.
func setupSecretAccess(mgr ctrl.Manager, a *SecretAccess) error {
	// PhasedRollout events do not reach a namespace whose last PhasedRollout was deleted while the
	// operator was down: once elected, sweep the namespaces that still hold one of its RoleBindings.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return nil
		}
		return a.sweep(ctx)
	})); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("phasedrollout-secretaccess").
		Watches(&rolloutv1alpha1.PhasedRollout{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace()}}}
		})).
		Complete(a)
}

// Reconcile creates the namespace's RoleBinding when a PhasedRollout there has a secretRef, and
// deletes it (if the operator made it) when none has.
func (a *SecretAccess) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var list rolloutv1alpha1.PhasedRolloutList
	if err := a.Client.List(ctx, &list, client.InNamespace(req.Namespace)); err != nil {
		return reconcile.Result{}, err
	}
	need := slices.ContainsFunc(list.Items, func(pr rolloutv1alpha1.PhasedRollout) bool {
		return pr.DeletionTimestamp.IsZero() && pr.Spec.Check.Query != nil && pr.Spec.Check.Query.SecretRef != ""
	})
	if need {
		return reconcile.Result{}, a.Ensure(ctx, req.Namespace)
	}
	rb := &rbacv1.RoleBinding{}
	err := a.APIReader.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: SecretReaderRoleBinding}, rb)
	if apierrors.IsNotFound(err) {
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if rb.Labels[managedByLabel] != managedByValue {
		return reconcile.Result{}, nil
	}
	if err := a.Client.Delete(ctx, rb, client.Preconditions{UID: &rb.UID}); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("deleting RoleBinding %s/%s: %w", req.Namespace, SecretReaderRoleBinding, err)
	}
	log.FromContext(ctx).Info("no PhasedRollout names a Secret any more: Secret access revoked", "namespace", req.Namespace)
	return reconcile.Result{}, nil
}

// sweep reconciles every namespace holding a RoleBinding the operator made, so one left behind
// while the operator was down is deleted. A failure is logged, not fatal: the next PhasedRollout
// event in that namespace retries.
func (a *SecretAccess) sweep(ctx context.Context) error {
	var list rbacv1.RoleBindingList
	if err := a.APIReader.List(ctx, &list, client.MatchingLabels{managedByLabel: managedByValue}); err != nil {
		log.FromContext(ctx).Error(err, "listing the operator's Secret-access RoleBindings")
		return nil
	}
	for _, rb := range list.Items {
		if rb.Name != SecretReaderRoleBinding {
			continue
		}
		if _, err := a.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: rb.Namespace}}); err != nil {
			log.FromContext(ctx).Error(err, "revoking stale Secret access", "namespace", rb.Namespace)
		}
	}
	return nil
}

// Ensure makes sure the namespace's RoleBinding exists and binds the ClusterRole to the operator. The
// step machine calls it before reading a Secret, so the first check does not wait for this
// controller.
func (a *SecretAccess) Ensure(ctx context.Context, namespace string) error {
	want := a.roleBinding(namespace)
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
	case !slices.Equal(rb.Subjects, want.Subjects) || rb.Labels[managedByLabel] != managedByValue || rb.Labels[grantLabel] != managedByValue:
		rb.Subjects = want.Subjects
		if rb.Labels == nil {
			rb.Labels = map[string]string{}
		}
		rb.Labels[managedByLabel] = managedByValue
		rb.Labels[grantLabel] = managedByValue
		return a.Client.Update(ctx, rb)
	}
	return nil
}

func (a *SecretAccess) roleBinding(namespace string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{
			Name: SecretReaderRoleBinding, Namespace: namespace,
			Labels: map[string]string{managedByLabel: managedByValue, grantLabel: managedByValue},
			Annotations: map[string]string{
				"sts.plus/purpose": "lets rollout-operator read the Secrets named by check.query.secretRef of the PhasedRollouts in this namespace; deleted when none is left",
			},
		},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: a.ClusterRole},
		Subjects: []rbacv1.Subject{a.Subject},
	}
}
