//go:build integration

package controller

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
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
// writes pass, every Lease, Service and EndpointSlice it does not own, a slice for another Service or
// routing to something other than a pod of its namespace, and every other change of a pod is refused, and the
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

	lockSlice := func(namespace, name string, lock *leasev1.StatefulSetLock, mutate ...func(*discoveryv1.EndpointSlice)) *discoveryv1.EndpointSlice {
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{
				discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: endpointSliceManagedBy}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.10"},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: namespace, Name: "db-0"}}},
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To(""), Port: ptr.To[int32](5432)}},
		}
		if lock != nil {
			owner := foreignLease(namespace, name, lock)
			slice.OwnerReferences = owner.OwnerReferences
			slice.Labels[leasev1.LockLabel] = lock.Name
		}
		for _, m := range mutate {
			m(slice)
		}
		return slice
	}
	createSlice := func(slice *discoveryv1.EndpointSlice) func(client.Client) error {
		return func(c client.Client) error { return c.Create(ctx, slice.DeepCopy(), client.DryRunAll) }
	}
	ownedSlice := lockSlice(ns, "db-rw", lock)
	require.NoError(t, suite.Client.Create(ctx, ownedSlice))
	otherSlice := lockSlice(ns, "web", nil, func(s *discoveryv1.EndpointSlice) {
		s.Labels[discoveryv1.LabelManagedBy] = "endpointslice-controller.k8s.io"
	})
	require.NoError(t, suite.Client.Create(ctx, otherSlice))
	// The endpointslice-writes policy is enforced a moment after the others, maybe.
	require.Eventually(t, func() bool {
		err := createSlice(lockSlice("kube-system", "db-rw", lock))(as)
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err)
	}, testsupport.PolicyWait, 200*time.Millisecond, "the endpointslice-writes policy is never enforced")
	patchSlice := func(slice *discoveryv1.EndpointSlice, patch string) func(client.Client) error {
		return func(c client.Client) error {
			return c.Patch(ctx, slice.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(patch)), client.DryRunAll)
		}
	}

	allowed := map[string]func(client.Client) error{
		"create a lock's Service without a selector": createService(lockService(ns, "db-rw-3", lock, func(s *corev1.Service) { s.Spec.Selector = nil })),
		"create a lock's writer EndpointSlice": createSlice(lockSlice(ns, "db-rw-2", lock, func(s *discoveryv1.EndpointSlice) {
			s.Labels[discoveryv1.LabelServiceName] = "db-rw"
		})),
		"create a lock's reader EndpointSlice": createSlice(lockSlice(ns, "db-ro", lock)),
		"empty a lock's EndpointSlice":         patchSlice(ownedSlice, `{"endpoints":[]}`),
		"delete a lock's EndpointSlice":        func(c client.Client) error { return c.Delete(ctx, ownedSlice.DeepCopy(), client.DryRunAll) },
		"create a lock's writer Service":       createService(lockService(ns, "db-rw-2", lock)),
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
	// The role writes as the operator makes them: server-side applies under its field manager, forced,
	// with the pod's resourceVersion as the precondition.
	applyPod := func(c client.Client, ac *corev1ac.PodApplyConfiguration) error {
		return c.Apply(ctx, ac, client.FieldOwner(leasev1.FieldManager), client.ForceOwnership, client.DryRunAll)
	}
	allowed["apply a pod's writer role"] = func(c client.Client) error { return applyPod(c, writerRole(lock, "3").applyConfig(pod)) }
	allowed["apply a pod's reader role"] = func(c client.Client) error { return applyPod(c, readerRole(lock).applyConfig(pod)) }
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
		"retarget a lock's Service at another app":            updateService(ownedSvc, func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "web"} }),
		"delete an unlabelled Service":                        func(c client.Client) error { return c.Delete(ctx, otherSvc.DeepCopy(), client.DryRunAll) },
		"create a kube-system EndpointSlice that looks owned": createSlice(lockSlice("kube-system", "db-rw", lock)),
		"create an EndpointSlice for another app's Service": createSlice(lockSlice(ns, "db-rw-steal", lock, func(s *discoveryv1.EndpointSlice) {
			s.Labels[discoveryv1.LabelServiceName] = "web"
		})),
		"create an unlabelled EndpointSlice": createSlice(lockSlice(ns, "db-rw-unowned", nil)),
		"create a lock's EndpointSlice as kube-controller-manager's": createSlice(lockSlice(ns, "db-rw-kcm", lock, func(s *discoveryv1.EndpointSlice) {
			s.Labels[discoveryv1.LabelManagedBy] = "endpointslice-controller.k8s.io"
		})),
		"route a lock's EndpointSlice to something that is not a pod": patchSlice(ownedSlice,
			`{"endpoints":[{"addresses":["203.0.113.7"],"targetRef":{"kind":"Node","name":"node-a"}}]}`),
		"route a lock's EndpointSlice to another namespace's pod": patchSlice(ownedSlice,
			`{"endpoints":[{"addresses":["10.0.0.11"],"targetRef":{"kind":"Pod","namespace":"kube-system","name":"etcd"}}]}`),
		"take an EndpointSlice over by labelling it": patchSlice(otherSlice, fmt.Sprintf(
			`{"metadata":{"labels":{%q:"db","kubernetes.io/service-name":"db-rw","endpointslice.kubernetes.io/managed-by":%q},"ownerReferences":[{"apiVersion":"app.anukkrit.me/v1","kind":"StatefulSetLock","name":"db","uid":%q,"controller":true}]}}`,
			leasev1.LockLabel, endpointSliceManagedBy, lock.UID)),
		"delete another app's EndpointSlice": func(c client.Client) error { return c.Delete(ctx, otherSlice.DeepCopy(), client.DryRunAll) },
	}
	escalations["apply another label of a pod"] = func(c client.Client) error {
		return applyPod(c, corev1ac.Pod(pod.Name, ns).WithLabels(map[string]string{"app": "evil"}))
	}
	escalations["create a pod by applying it"] = func(c client.Client) error {
		return applyPod(c, corev1ac.Pod("db-9", ns).WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().WithName("db").WithImage("evil.example/miner:1"))))
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
