//go:build integration

package controller

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// The identity deploy/cluster-operator.yaml gives the operator.
const (
	operatorNamespace = "cluster-operator-system"
	operatorUser      = "system:serviceaccount:" + operatorNamespace + ":cluster-operator-controller-manager"
)

// installShippedPermissions applies deploy/cluster-operator.yaml's ServiceAccount, RBAC and admission
// policy, as a user's `kubectl apply` does, and returns the ServiceAccount's impersonated config once
// the API server enforces the policy (it compiles a new policy a moment after it is created).
func installShippedPermissions(t *testing.T) *rest.Config {
	t.Helper()
	suite.ApplyManifest(t, filepath.Join("..", "..", "..", "deploy", "cluster-operator.yaml"),
		"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
	cfg := rest.CopyConfig(suite.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: operatorUser, Groups: testsupport.ServiceAccountGroups(operatorNamespace)}
	op, err := client.New(cfg, client.Options{Scheme: suite.Scheme})
	require.NoError(t, err)
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "policy-probe"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
	require.Eventually(t, func() bool {
		err := op.Create(t.Context(), probe.DeepCopy(), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy")
	}, testsupport.PolicyWait, 100*time.Millisecond, "the policy never took effect")
	return cfg
}

// TestAdmissionPolicyConfinesTheOperator applies deploy/cluster-operator.yaml and writes, with
// server-side dry-run, as the operator's ServiceAccount: what the operator writes for a StatefulCluster
// is allowed; a pod, claim or ControllerRevision in a system namespace, without its StatefulCluster's
// controller reference or label, a takeover of another controller's pod and a change of a pod's spec
// are refused. The same writes by another user are allowed: the policy binds the operator only.
func TestAdmissionPolicyConfinesTheOperator(t *testing.T) {
	ctx := t.Context()
	op, err := client.New(installShippedPermissions(t), client.Options{Scheme: suite.Scheme})
	require.NoError(t, err)
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "policy-"}}
	require.NoError(t, suite.Client.Create(ctx, nsObj))
	ns := nsObj.Name

	owner := metav1.OwnerReference{APIVersion: clusterv1alpha1.GroupVersion.String(), Kind: "StatefulCluster",
		Name: "db", UID: types.UID("8d4c0f6e-0000-4000-8000-000000000001"), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	foreign := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web",
		UID: types.UID("8d4c0f6e-0000-4000-8000-000000000002"), Controller: ptr.To(true)}
	label := map[string]string{clusterv1alpha1.ClusterNameLabel: "db", "app": "db"}
	pod := func(namespace, name string, labels map[string]string, refs ...metav1.OwnerReference) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels, OwnerReferences: refs},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
		}
	}
	privileged := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.HostPID = true
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		p.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		return p
	}
	claim := func(namespace string, labels map[string]string, refs ...metav1.OwnerReference) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "data-db-0", Labels: labels, OwnerReferences: refs},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}
	}
	revision := func(namespace string, labels map[string]string, refs ...metav1.OwnerReference) *appsv1.ControllerRevision {
		return &appsv1.ControllerRevision{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "db-5d8f9c7b4", Labels: labels, OwnerReferences: refs},
			Data:       runtime.RawExtension{Raw: []byte(`{"template":{}}`)}, Revision: 1,
		}
	}
	renamed := func(r *appsv1.ControllerRevision, name string) *appsv1.ControllerRevision { r.Name = name; return r }
	nonController := owner
	nonController.Controller, nonController.BlockOwnerDeletion = nil, nil

	// Existing objects the operator patches or deletes, made by the test (an admin).
	orphan := pod(ns, "db-orphan", map[string]string{"app": "db"})
	require.NoError(t, suite.Client.Create(ctx, orphan))
	replicaPod := pod(ns, "web-0", map[string]string{"app": "db"}, foreign)
	require.NoError(t, suite.Client.Create(ctx, replicaPod))
	owned := pod(ns, "db-0", label, owner)
	require.NoError(t, suite.Client.Create(ctx, owned))
	ownedRev := revision(ns, label, owner)
	require.NoError(t, suite.Client.Create(ctx, ownedRev))
	foreignRev := renamed(revision(ns, map[string]string{"app": "web"}, foreign), "web-7c9f8d6b5")
	require.NoError(t, suite.Client.Create(ctx, foreignRev))

	// patchPod merge-patches a pod as mutate changes it, as the operator's adoption does.
	patchPod := func(p *corev1.Pod, mutate func(*corev1.Pod)) func(c client.Client) error {
		return func(c client.Client) error {
			cur := &corev1.Pod{}
			if err := suite.Client.Get(ctx, client.ObjectKeyFromObject(p), cur); err != nil {
				return err
			}
			orig := cur.DeepCopy()
			mutate(cur)
			return c.Patch(ctx, cur, client.MergeFrom(orig), client.DryRunAll)
		}
	}
	// An orphan gets the reference; another controller's pod would have to lose its own.
	adopt := func(p *corev1.Pod) func(c client.Client) error {
		return patchPod(p, func(cur *corev1.Pod) {
			cur.OwnerReferences = []metav1.OwnerReference{owner}
			cur.Labels[clusterv1alpha1.ClusterNameLabel] = "db"
		})
	}
	renumber := func(rev *appsv1.ControllerRevision, n int64) func(c client.Client) error {
		return func(c client.Client) error {
			cur := &appsv1.ControllerRevision{}
			if err := suite.Client.Get(ctx, client.ObjectKeyFromObject(rev), cur); err != nil {
				return err
			}
			cur.Revision = n
			return c.Update(ctx, cur, client.DryRunAll)
		}
	}
	create := func(obj client.Object) func(c client.Client) error {
		return func(c client.Client) error {
			return c.Create(ctx, obj.DeepCopyObject().(client.Object), client.DryRunAll)
		}
	}
	del := func(obj client.Object) func(c client.Client) error {
		return func(c client.Client) error { return c.Delete(ctx, obj, client.DryRunAll) }
	}
	allowed := []testsupport.PolicyWrite{
		{Name: "create its pod", Write: create(pod(ns, "db-1", label, owner))},
		{Name: "create its claim (retained: no owner)", Write: create(claim(ns, label))},
		{Name: "create its claim (whenDeleted Delete: owned)", Write: create(claim(ns, label, nonController))},
		{Name: "create its ControllerRevision", Write: create(renamed(revision(ns, label, owner), "db-6b7c8d9f5"))},
		{Name: "adopt an orphan pod", Write: adopt(orphan)},
		{Name: "delete its pod", Write: del(owned)},
		{Name: "renumber its ControllerRevision", Write: renumber(ownedRev, 2)},
		{Name: "delete its ControllerRevision", Write: del(ownedRev)},
	}
	refused := []testsupport.PolicyWrite{
		{Name: "privileged pod in kube-system", Write: create(privileged(pod("kube-system", "db-0", label, owner)))},
		{Name: "pod in kube-node-lease", Write: create(pod("kube-node-lease", "db-0", label, owner))},
		{Name: "claim in kube-public", Write: create(claim("kube-public", label))},
		{Name: "ControllerRevision in kube-system", Write: create(revision("kube-system", label, owner))},
		{Name: "pod without an owner", Write: create(pod(ns, "db-2", label))},
		{Name: "privileged pod owned by a ReplicaSet", Write: create(privileged(pod(ns, "db-3", label, foreign)))},
		{Name: "pod owned (not controlled) by a StatefulCluster", Write: create(pod(ns, "db-4", label, nonController))},
		{Name: "pod without its label", Write: create(pod(ns, "db-5", map[string]string{"app": "db"}, owner))},
		{Name: "claim without its label", Write: create(claim(ns, map[string]string{"app": "db"}))},
		{Name: "claim controlled by a ReplicaSet", Write: create(claim(ns, label, foreign))},
		{Name: "ControllerRevision of a DaemonSet", Write: create(revision(ns, label, metav1.OwnerReference{APIVersion: "apps/v1",
			Kind: "DaemonSet", Name: "kube-proxy", UID: "8d4c0f6e-0000-4000-8000-000000000003", Controller: ptr.To(true)}))},
		{Name: "take over a ReplicaSet's pod", Write: adopt(replicaPod)},
		{Name: "change an orphan pod's image", Write: patchPod(orphan, func(cur *corev1.Pod) {
			cur.OwnerReferences = []metav1.OwnerReference{owner}
			cur.Labels[clusterv1alpha1.ClusterNameLabel] = "db"
			cur.Spec.Containers[0].Image = "attacker.example/miner:1"
		})},
		{Name: "delete an orphan pod", Write: del(orphan)},
		{Name: "delete a ReplicaSet's pod", Write: del(replicaPod)},
		{Name: "delete another controller's ControllerRevision", Write: del(foreignRev)},
		{Name: "renumber another controller's ControllerRevision", Write: renumber(foreignRev, 9)},
	}

	testsupport.RequirePolicyWrites(t, operatorUser, op, suite.Client, allowed, refused)
	// The privileged pod in kube-system, the first refusal, passes for another user.
	require.NoError(t, refused[0].Write(suite.Client), "another user's privileged pod in kube-system")
}

// TestOperatorWorksUnderTheShippedPermissions runs the operator as its ServiceAccount, under the RBAC and
// admission policy of deploy/cluster-operator.yaml, through the writes it makes: adopting an orphan,
// creating pods, claims and ControllerRevisions, a rolling update, retiring a claim by label and by
// deletion, releasing claims (their owner reference removed) and deleting pods. Every write passes:
// the tightened rights take nothing the operator needs.
func TestOperatorWorksUnderTheShippedPermissions(t *testing.T) {
	cfg := installShippedPermissions(t)
	f := newFixture(t)
	orphan := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "d-legacy", Namespace: f.ns, Labels: map[string]string{"app": "d"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "app:v1"}}}}
	require.NoError(t, suite.Client.Create(t.Context(), orphan))
	suite.StartManagerAs(t, cfg, (&Options{}).Setup, func(o *ctrl.Options) { CacheOptions(&o.Cache) })

	f.statefulCluster("d", 2, withClaims, func(sc *clusterv1alpha1.StatefulCluster) {
		sc.Spec.PersistentVolumeClaimRetentionPolicy = &clusterv1alpha1.PersistentVolumeClaimRetentionPolicy{
			WhenScaled: clusterv1alpha1.DeleteClaimRetentionPolicy, WhenDeleted: clusterv1alpha1.DeleteClaimRetentionPolicy}
	})
	f.waitPods("d", "d-legacy", "d-0")
	require.Equal(t, "StatefulCluster", metav1.GetControllerOf(f.pod("d-legacy")).Kind, "orphan adopted")
	require.Len(t, f.claims("d")["d-data-0"].OwnerReferences, 1, "whenDeleted=Delete: owned by the StatefulCluster")

	// A template change: a new ControllerRevision, and the pods replaced by new identities.
	f.update("d", func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.Template.Spec.Containers[0].Image = "app:v2" })
	require.Eventually(t, func() bool {
		live := f.liveNames("d")
		for _, name := range live {
			if f.pods("d")[name].Spec.Containers[0].Image != "app:v2" {
				return false
			}
		}
		return len(live) == 2
	}, wait, tick, "rolled to the new revision")
	require.Eventually(t, func() bool {
		c := f.claims("d")["d-data-0"]
		return c != nil && c.Labels[clusterv1alpha1.RetiredLabel] == "true"
	}, wait, tick, "replaced identity's claim retained (whenReplaced Retain)")

	// Scaling down deletes the scaled-down identity's claim; switching whenDeleted to Retain releases
	// every claim (a patch removing the owner reference).
	f.update("d", func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.Replicas = ptr.To[int32](1) })
	require.Eventually(t, func() bool { return len(f.liveNames("d")) == 1 }, wait, tick, "scaled down")
	f.update("d", func(sc *clusterv1alpha1.StatefulCluster) {
		sc.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted = clusterv1alpha1.RetainClaimRetentionPolicy
	})
	require.Eventually(t, func() bool { return f.claimsReleased("d") }, wait, tick, "claims released")
	var events eventsv1.EventList
	require.NoError(t, suite.Client.List(t.Context(), &events, client.InNamespace(f.ns)))
	for _, e := range events.Items {
		require.NotContainsf(t, e.Note, "ValidatingAdmissionPolicy", "a write of the operator was refused: %s", e.Note)
	}
}
