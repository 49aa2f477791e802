//go:build integration

package controller

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

const (
	operatorNamespace = "lease-operator-system"
	operatorUser      = "system:serviceaccount:" + operatorNamespace + ":lease-operator-controller-manager"
)

// installShippedPermissions applies deploy/lease-operator.yaml's RBAC and admission policies and
// returns a client that impersonates the operator's ServiceAccount, once the policies are enforced.
func installShippedPermissions(t *testing.T) client.Client {
	t.Helper()
	suite.ApplyManifest(t, filepath.Join("..", "..", "..", "deploy", "lease-operator.yaml"),
		"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
	as := suite.As(t, operatorUser, testsupport.ServiceAccountGroups(operatorNamespace)...)
	// The API server enforces a policy a moment after it is created: wait for the first refusal.
	probe := foreignLease("kube-system", "policy-probe", nil)
	require.Eventually(t, func() bool {
		err := as.Create(t.Context(), probe.DeepCopy(), client.DryRunAll)
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err)
	}, testsupport.PolicyWait, 200*time.Millisecond, "the lease-writes policy is never enforced")
	return as
}

// foreignLease is a Lease; lock, when set, makes it one the lock owns (label and controller reference).
func foreignLease(ns, name string, lock *leasev1.StatefulSetLock) *coordinationv1.Lease {
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("attacker")},
	}
	if lock != nil {
		lease.Labels = map[string]string{leasev1.LockLabel: lock.Name}
		lease.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: leasev1.GroupVersion.String(), Kind: "StatefulSetLock", Name: lock.Name,
			UID: lock.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}}
	}
	return lease
}

// TestShippedPermissionsLetTheOperatorWriteOnlyItsLeases impersonates the lease-operator's
// ServiceAccount under deploy/lease-operator.yaml's RBAC and policies (server-side dry-run): its own
// writes pass, every Lease it does not own and every other change of a pod is refused, and the
// cluster admin's identical writes still pass (the policies bind only the operator).
func TestShippedPermissionsLetTheOperatorWriteOnlyItsLeases(t *testing.T) {
	ctx := t.Context()
	as := installShippedPermissions(t)
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "lease-permissions-"}}
	require.NoError(t, suite.Client.Create(ctx, namespace))
	ns := namespace.Name
	lock := &leasev1.StatefulSetLock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db", UID: types.UID("5d1b7c63-0000-4000-8000-000000000001")}}

	owned := foreignLease(ns, "db-lease", lock)
	require.NoError(t, suite.Client.Create(ctx, owned))
	unlabelled := foreignLease(ns, "someone-elses", nil)
	require.NoError(t, suite.Client.Create(ctx, unlabelled))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-0", Labels: map[string]string{"app": "db"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "registry.k8s.io/pause:3.10"}}},
	}
	require.NoError(t, suite.Client.Create(ctx, pod))

	patchPod := func(c client.Client, patch string) error {
		return c.Patch(ctx, pod.DeepCopy(), client.RawPatch(types.StrategicMergePatchType, []byte(patch)), client.DryRunAll)
	}
	takeOver := func(c client.Client) error {
		l := &coordinationv1.Lease{}
		require.NoError(t, suite.Client.Get(ctx, client.ObjectKeyFromObject(unlabelled), l))
		l.Labels, l.OwnerReferences = owned.Labels, owned.OwnerReferences
		return c.Update(ctx, l, client.DryRunAll)
	}
	renew := func(c client.Client) error {
		l := &coordinationv1.Lease{}
		require.NoError(t, suite.Client.Get(ctx, client.ObjectKeyFromObject(owned), l))
		l.Spec.HolderIdentity = ptr.To("db-1")
		return c.Update(ctx, l, client.DryRunAll)
	}

	lockService := func(namespace, name string, lock *leasev1.StatefulSetLock, mutate ...func(*corev1.Service)) *corev1.Service {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec: corev1.ServiceSpec{Selector: map[string]string{leasev1.LockLabel: "db", leasev1.RoleLabel: leasev1.RoleWriter},
				Ports: []corev1.ServicePort{{Port: 5432}}},
		}
		if lock != nil {
			owner := foreignLease(namespace, name, lock)
			svc.Labels, svc.OwnerReferences = owner.Labels, owner.OwnerReferences
		}
		for _, m := range mutate {
			m(svc)
		}
		return svc
	}
	createService := func(svc *corev1.Service) func(client.Client) error {
		return func(c client.Client) error { return c.Create(ctx, svc.DeepCopy(), client.DryRunAll) }
	}
	ownedSvc := lockService(ns, "db-rw", lock)
	require.NoError(t, suite.Client.Create(ctx, ownedSvc))
	otherSvc := lockService(ns, "someone-elses", nil, func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "web"} })
	require.NoError(t, suite.Client.Create(ctx, otherSvc))
	// The service-writes policy is enforced a moment after lease-writes, maybe.
	require.Eventually(t, func() bool {
		err := createService(lockService("kube-system", "policy-probe", lock))(as)
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err)
	}, testsupport.PolicyWait, 200*time.Millisecond, "the service-writes policy is never enforced")
	updateService := func(svc *corev1.Service, mutate func(*corev1.Service)) func(client.Client) error {
		return func(c client.Client) error {
			got := &corev1.Service{}
			require.NoError(t, suite.Client.Get(ctx, client.ObjectKeyFromObject(svc), got))
			mutate(got)
			return c.Update(ctx, got, client.DryRunAll)
		}
	}

	allowed := map[string]func(client.Client) error{
		"create a lock's writer Service": createService(lockService(ns, "db-rw-2", lock)),
		"create a lock's reader Service": createService(lockService(ns, "db-ro", lock, func(s *corev1.Service) {
			s.Spec.Selector[leasev1.RoleLabel] = leasev1.RoleReader
		})),
		"change a lock's Service's ports": updateService(ownedSvc, func(s *corev1.Service) { s.Spec.Ports[0].Port = 5433 }),
		"delete a lock's Service":         func(c client.Client) error { return c.Delete(ctx, ownedSvc.DeepCopy(), client.DryRunAll) },
		"create its leader-election Lease": func(c client.Client) error {
			return c.Create(ctx, foreignLease(operatorNamespace, "lease-operator.app.anukkrit.me", nil), client.DryRunAll)
		},
		"create a lock's Lease": func(c client.Client) error {
			return c.Create(ctx, foreignLease(ns, "db-lease-2", lock), client.DryRunAll)
		},
		"renew a lock's Lease":  renew,
		"delete a lock's Lease": func(c client.Client) error { return c.Delete(ctx, owned.DeepCopy(), client.DryRunAll) },
		"label a pod writer": func(c client.Client) error {
			return patchPod(c, `{"metadata":{"labels":{"sts-role":"writer","app.anukkrit.me/statefulsetlock":"db","app.anukkrit.me/writer-lease-key":"db-lease"},"annotations":{"app.anukkrit.me/writer-epoch":"3","app.anukkrit.me/writer-lease":"db-lease"}}}`)
		},
	}
	for name, write := range allowed {
		assert.NoError(t, write(as), "the operator must be able to %s", name)
	}

	escalations := map[string]func(client.Client) error{
		"create a kube-system Lease (kube-controller-manager's election)": func(c client.Client) error {
			return c.Create(ctx, foreignLease("kube-system", "kube-controller-manager", nil), client.DryRunAll)
		},
		"create a kube-system Lease that looks owned": func(c client.Client) error {
			return c.Create(ctx, foreignLease("kube-system", "kube-scheduler", lock), client.DryRunAll)
		},
		"create a kube-node-lease Lease (a node heartbeat)": func(c client.Client) error {
			return c.Create(ctx, foreignLease("kube-node-lease", "node-1", lock), client.DryRunAll)
		},
		"create an unlabelled Lease": func(c client.Client) error {
			return c.Create(ctx, foreignLease(ns, "unowned", nil), client.DryRunAll)
		},
		"take a Lease over by labelling it": takeOver,
		"delete an unlabelled Lease":        func(c client.Client) error { return c.Delete(ctx, unlabelled.DeepCopy(), client.DryRunAll) },
		"change another label of a pod":     func(c client.Client) error { return patchPod(c, `{"metadata":{"labels":{"app":"evil"}}}`) },
		"add an annotation to a pod":        func(c client.Client) error { return patchPod(c, `{"metadata":{"annotations":{"other":"x"}}}`) },
		"change a pod's image": func(c client.Client) error {
			return patchPod(c, `{"spec":{"containers":[{"name":"db","image":"evil.example/miner:1"}]}}`)
		},
		"add a finalizer to a pod":                      func(c client.Client) error { return patchPod(c, `{"metadata":{"finalizers":["evil.example/hold"]}}`) },
		"create a kube-system Service that looks owned": createService(lockService("kube-system", "db-rw", lock)),
		"create an unlabelled Service":                  createService(lockService(ns, "unowned", nil)),
		"create a lock's Service selecting another app's pods": createService(lockService(ns, "db-steal", lock, func(s *corev1.Service) {
			s.Spec.Selector = map[string]string{"app": "web"}
		})),
		"create a lock's Service with externalIPs (CVE-2020-8554)": createService(lockService(ns, "db-ext", lock, func(s *corev1.Service) {
			s.Spec.ExternalIPs = []string{"203.0.113.7"}
		})),
		"create a lock's LoadBalancer Service": createService(lockService(ns, "db-lb", lock, func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
		})),
		"take a Service over by labelling it": updateService(otherSvc, func(s *corev1.Service) {
			s.Labels, s.OwnerReferences = ownedSvc.Labels, ownedSvc.OwnerReferences
		}),
		"retarget a lock's Service at another app": updateService(ownedSvc, func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "web"} }),
		"delete an unlabelled Service":             func(c client.Client) error { return c.Delete(ctx, otherSvc.DeepCopy(), client.DryRunAll) },
	}
	refused := 0
	for name, write := range escalations {
		err := write(as)
		if assert.Error(t, err, "the operator must not be able to %s", name) {
			assert.True(t, apierrors.IsInvalid(err) || apierrors.IsForbidden(err), "%s: %v", name, err)
			refused++
		}
	}
	t.Logf("lease-operator escalation attempts: %d, allowed: %d", len(escalations), len(escalations)-refused)

	// The policies bind only the operator: the cluster admin's identical writes pass.
	for _, name := range []string{"create a kube-system Lease (kube-controller-manager's election)", "create an unlabelled Lease", "take a Lease over by labelling it", "change a pod's image",
		"create a lock's Service with externalIPs (CVE-2020-8554)", "delete an unlabelled Service"} {
		assert.NoError(t, escalations[name](suite.Client), "another user's %s must still be admitted", name)
	}
}
