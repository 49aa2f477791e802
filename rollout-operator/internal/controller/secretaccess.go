package controller

import (
	"context"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// The operator reads credentials Secrets only in the namespaces of PhasedRollouts that name one
// (shared/controllerutil SecretAccess): the manifest ships a ClusterRole granting `get` on Secrets
// that is bound nowhere, and the operator binds it, with a RoleBinding, in each namespace where a
// PhasedRollout has check.query.secretRef or check.webhook.secretRef (and deletes that RoleBinding when none is left). It may
// create such bindings because it holds `bind` on that one ClusterRole, and the manifest's admission
// policies (config/policy) admit from it only that RoleBinding, only in a namespace with a
// PhasedRollout; it holds no Secret permission of its own, and Secrets are read uncached (a Get per
// check), so there is no cluster-wide Secret list or watch either.
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=get;list;create;update;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=rollout-operator-secret-reader
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=selfsubjectreviews,verbs=create

const (
	// DefaultSecretReaderClusterRole is the ClusterRole of deploy/rollout-operator.yaml granting `get`
	// on Secrets; the operator binds it in the namespaces that need it.
	DefaultSecretReaderClusterRole = "rollout-operator-secret-reader"
	// SecretReaderRoleBinding is the name of the RoleBinding the operator keeps in those namespaces.
	SecretReaderRoleBinding = managedByValue + "-secret-reader"
	// managedByLabel and grantLabel, valued managedByValue, mark the RoleBindings the operator created.
	managedByLabel = opsutil.ManagedByLabel
	grantLabel     = opsutil.SecretAccessLabel
	managedByValue = "rollout-operator"
)

// SecretAccess keeps, in every namespace, a RoleBinding that lets the operator read Secrets exactly
// while a PhasedRollout there names a credentials Secret.
type SecretAccess = opsutil.SecretAccess

// newRolloutSecretAccess is the operator's SecretAccess, binding clusterRole to subject.
func newRolloutSecretAccess(c client.Client, apiReader client.Reader, clusterRole string, subject rbacv1.Subject) *SecretAccess {
	return &SecretAccess{
		Client: c, APIReader: apiReader, Operator: managedByValue, ClusterRole: clusterRole, Subject: subject,
		Purpose: "lets rollout-operator read the Secrets named by check.query.secretRef or check.webhook.secretRef of the PhasedRollouts in this namespace; deleted when none is left",
		Needed: func(ctx context.Context, namespace string) (bool, error) {
			var list rolloutv1alpha1.PhasedRolloutList
			if err := c.List(ctx, &list, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil { // read only
				return false, err
			}
			return slices.ContainsFunc(list.Items, func(pr rolloutv1alpha1.PhasedRollout) bool {
				return pr.DeletionTimestamp.IsZero() && namesSecret(&pr)
			}), nil
		},
	}
}

// namesSecret reports whether one of pr's checks reads a Secret: the query's or the webhook's
// secretRef of spec.check or of a spec.checks element (the same grant serves them all).
func namesSecret(pr *rolloutv1alpha1.PhasedRollout) bool {
	return slices.ContainsFunc(stepChecks(pr), func(c namedCheck) bool {
		return (c.spec.Query != nil && c.spec.Query.SecretRef != "") || (c.spec.Webhook != nil && c.spec.Webhook.SecretRef != "")
	})
}

// setupSecretAccess registers the controller that keeps the RoleBindings: it reconciles a namespace
// whenever a PhasedRollout there changes.
func setupSecretAccess(mgr ctrl.Manager, a *SecretAccess) error {
	return a.Setup(mgr, "phasedrollout-secretaccess", &rolloutv1alpha1.PhasedRollout{})
}
