//go:build integration

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// The admission policy of deploy/extended-operator.yaml is tested here, beside the binary whose
// manifest ships it, against an envtest API server of its own.

var suite testsupport.Suite

func TestMain(m *testing.M) {
	os.Exit(testsupport.RunSuite(m, &suite, filepath.Join("config", "crd", "bases"), extendedv1alpha1.AddToScheme))
}

// The identity deploy/extended-operator.yaml gives the operator.
const (
	operatorNamespace = "extended-operator-system"
	operatorUser      = "system:serviceaccount:" + operatorNamespace + ":extended-operator-controller-manager"
)

// Labels and annotations the volume handover writes on a PersistentVolume (internal/controller/handover.go).
const (
	handoverLabel           = "fissile.cloudfoundry.org/handover-to"
	reclaimAnnotation       = "fissile.cloudfoundry.org/original-reclaim-policy"
	handoverClaimAnnotation = "fissile.cloudfoundry.org/handover-claim"
)

// TestAdmissionPolicyConfinesTheOperator applies deploy/extended-operator.yaml and writes, with
// server-side dry-run, as the operator's ServiceAccount: what the operator writes for an
// ExtendedStatefulSet (its StatefulSets, upgrade Jobs, handover claims, the deletion of its pods and
// the handover's volume patches) is allowed; the same kinds in a system namespace, without the
// ExtendedStatefulSet's controller reference or label, another controller's objects and any other
// change of a volume are refused. The same writes by another user are allowed.
func TestAdmissionPolicyConfinesTheOperator(t *testing.T) {
	ctx := t.Context()
	suite.ApplyManifest(t, filepath.Join("..", "deploy", "extended-operator.yaml"),
		"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
	op := suite.As(t, operatorUser, testsupport.ServiceAccountGroups(operatorNamespace)...)
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "policy-"}}
	require.NoError(t, suite.Client.Create(ctx, namespace))
	ns := namespace.Name

	owner := metav1.OwnerReference{APIVersion: extendedv1alpha1.GroupVersion.String(), Kind: "ExtendedStatefulSet",
		Name: "web", UID: types.UID("3f6e2a10-0000-4000-8000-000000000001"), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	foreign := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web",
		UID: types.UID("3f6e2a10-0000-4000-8000-000000000002"), Controller: ptr.To(true)}
	label := map[string]string{extendedv1alpha1.NameLabel: "web", extendedv1alpha1.VersionLabel: "1"}
	podSpec := func(privileged bool) corev1.PodTemplateSpec {
		t := corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: label},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
		}
		if privileged {
			t.Spec.HostPID = true
			t.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
			t.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}
		return t
	}
	statefulSet := func(namespace, name string, labels map[string]string, privileged bool, refs ...metav1.OwnerReference) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels, OwnerReferences: refs},
			Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: label},
				Template: podSpec(privileged)},
		}
	}
	job := func(namespace, name string, labels map[string]string, privileged bool, refs ...metav1.OwnerReference) *batchv1.Job {
		tmpl := podSpec(privileged)
		tmpl.Labels = map[string]string{extendedv1alpha1.UpgradeJobLabel: "pre"}
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		return &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels, OwnerReferences: refs},
			Spec:       batchv1.JobSpec{Template: tmpl},
		}
	}
	claim := func(namespace, name string, labels map[string]string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}
	}
	volume := func(name string, policy corev1.PersistentVolumeReclaimPolicy, claimNamespace, claimName string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-" + ns},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: policy,
				PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data/" + name}},
				ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: claimNamespace, Name: claimName,
					UID: types.UID("3f6e2a10-0000-4000-8000-00000000000a")},
			},
		}
	}

	// Existing objects the operator patches or deletes, made by the test (an admin).
	versionSet := statefulSet(ns, "web-v1", label, false, owner)
	otherSet := statefulSet(ns, "db", map[string]string{"app": "db"}, false)
	versionPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-v1-0", Labels: label,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web-v1", UID: "3f6e2a10-0000-4000-8000-000000000003", Controller: ptr.To(true)}}},
		Spec: podSpec(false).Spec}
	otherPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-0", Labels: map[string]string{"app": "db"}}, Spec: podSpec(false).Spec}
	upgradeJob := job(ns, "web-pre-1", label, false, owner)
	otherJob := job(ns, "backup", map[string]string{"app": "db"}, false)
	versionClaim := claim(ns, "data-web-v1-0", label)
	otherClaim := claim(ns, "data-db-0", map[string]string{"app": "db"})
	bound := volume("bound", corev1.PersistentVolumeReclaimDelete, ns, "data-web-v1-0")
	retained := volume("retained", corev1.PersistentVolumeReclaimRetain, ns, "data-db-0")
	held := volume("held", corev1.PersistentVolumeReclaimRetain, ns, "data-web-v1-0")
	held.Labels = map[string]string{handoverLabel: "0123456789abcdef0123456789abcdef"}
	held.Annotations = map[string]string{reclaimAnnotation: "Delete", handoverClaimAnnotation: ns + "/data-web-v2-0"}
	free := volume("free", corev1.PersistentVolumeReclaimRetain, "", "")
	free.Spec.ClaimRef = nil
	free.Labels = map[string]string{handoverLabel: "0123456789abcdef0123456789abcdef"}
	for _, obj := range []client.Object{versionSet, otherSet, versionPod, otherPod, upgradeJob, otherJob, versionClaim, otherClaim, bound, retained, held, free} {
		require.NoError(t, suite.Client.Create(ctx, obj))
	}
	t.Cleanup(func() {
		for _, pv := range []client.Object{bound, retained, held, free} {
			_ = suite.Client.Delete(ctx, pv)
		}
	})
	// Bound claims of a class that allows expansion, which the API server lets grow (claimresize.go).
	expandable := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "expandable-" + ns}, Provisioner: "test.example.com",
		AllowVolumeExpansion: ptr.To(true)}
	require.NoError(t, suite.Client.Create(ctx, expandable))
	t.Cleanup(func() { _ = suite.Client.Delete(ctx, expandable) })
	boundClaim := func(name string, labels map[string]string) *corev1.PersistentVolumeClaim {
		c := claim(ns, name, labels)
		c.Spec.StorageClassName = ptr.To(expandable.Name)
		c.Spec.VolumeName = "pv-" + name
		require.NoError(t, suite.Client.Create(ctx, c))
		c.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound,
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}
		require.NoError(t, suite.Client.Status().Update(ctx, c))
		return c
	}
	growingClaim := boundClaim("data-web-v1-1", label)
	otherBoundClaim := boundClaim("data-db-1", map[string]string{"app": "db"})
	grow := func(o client.Object) {
		o.(*corev1.PersistentVolumeClaim).Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
	}

	create := func(obj client.Object) func(c client.Client) error {
		return func(c client.Client) error {
			return c.Create(ctx, obj.DeepCopyObject().(client.Object), client.DryRunAll)
		}
	}
	del := func(obj client.Object) func(c client.Client) error {
		return func(c client.Client) error { return c.Delete(ctx, obj, client.DryRunAll) }
	}
	// patch merge-patches the current object as mutate changes it, as the operator's writes do.
	patch := func(obj client.Object, mutate func(client.Object)) func(c client.Client) error {
		return func(c client.Client) error {
			cur := obj.DeepCopyObject().(client.Object)
			if err := suite.Client.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
				return err
			}
			orig := cur.DeepCopyObject().(client.Object)
			mutate(cur)
			return c.Patch(ctx, cur, client.MergeFrom(orig), client.DryRunAll)
		}
	}
	pv := func(f func(*corev1.PersistentVolume)) func(client.Object) {
		return func(o client.Object) { f(o.(*corev1.PersistentVolume)) }
	}
	hold := func(original string) func(client.Object) {
		return pv(func(v *corev1.PersistentVolume) {
			v.Labels = map[string]string{handoverLabel: "fedcba9876543210fedcba9876543210"}
			v.Annotations = map[string]string{reclaimAnnotation: original, handoverClaimAnnotation: ns + "/data-web-v2-0"}
			v.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
		})
	}
	pointAt := func(namespace string) func(client.Object) {
		return pv(func(v *corev1.PersistentVolume) {
			v.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: namespace, Name: "data-web-v2-0"}
		})
	}

	allowed := []testsupport.PolicyWrite{
		{Name: "create a version's StatefulSet", Write: create(statefulSet(ns, "web-v2", label, false, owner))},
		{Name: "patch its StatefulSet", Write: patch(versionSet, func(o client.Object) { o.(*appsv1.StatefulSet).Spec.Replicas = ptr.To[int32](2) })},
		{Name: "delete its StatefulSet", Write: del(versionSet)},
		{Name: "create an upgrade Job", Write: create(job(ns, "web-pre-2", label, false, owner))},
		{Name: "delete an upgrade Job", Write: del(upgradeJob)},
		{Name: "create a handover claim", Write: create(claim(ns, "data-web-v2-0", label))},
		{Name: "delete a version's claim", Write: del(versionClaim)},
		{Name: "restart a version's pod", Write: del(versionPod)},
		{Name: "grow a version's claim", Write: patch(growingClaim, grow)},
		{Name: "hold a volume", Write: patch(bound, hold("Delete"))},
		{Name: "point a held volume at the new claim", Write: patch(held, pointAt(ns))},
		{Name: "give a held volume its reclaim policy back", Write: patch(held, pv(func(v *corev1.PersistentVolume) {
			v.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
			v.Labels, v.Annotations = nil, nil
		}))},
	}
	refused := []testsupport.PolicyWrite{
		{Name: "privileged StatefulSet in kube-system", Write: create(statefulSet("kube-system", "web-v1", label, true, owner))},
		{Name: "Job in kube-node-lease", Write: create(job("kube-node-lease", "web-pre-1", label, false, owner))},
		{Name: "claim in kube-public", Write: create(claim("kube-public", "data-web-v1-0", label))},
		{Name: "privileged StatefulSet without an owner", Write: create(statefulSet(ns, "web-v3", label, true))},
		{Name: "StatefulSet owned by a Deployment", Write: create(statefulSet(ns, "web-v4", label, false, foreign))},
		{Name: "StatefulSet without its label", Write: create(statefulSet(ns, "web-v5", map[string]string{"app": "web"}, false, owner))},
		{Name: "privileged Job without an owner", Write: create(job(ns, "web-pre-3", label, true))},
		{Name: "take over another StatefulSet", Write: patch(otherSet, func(o client.Object) {
			o.SetOwnerReferences([]metav1.OwnerReference{owner})
			o.SetLabels(label)
		})},
		{Name: "delete another StatefulSet", Write: del(otherSet)},
		{Name: "delete another Job", Write: del(otherJob)},
		{Name: "claim without its label", Write: create(claim(ns, "data-web-v6-0", map[string]string{"app": "web"}))},
		{Name: "delete another claim", Write: del(otherClaim)},
		{Name: "grow another claim", Write: patch(otherBoundClaim, grow)},
		{Name: "grow a version's claim and take its label off", Write: patch(growingClaim, func(o client.Object) {
			grow(o)
			o.SetLabels(map[string]string{"app": "web"})
		})},
		{Name: "grow a version's claim and give it an owner", Write: patch(growingClaim, func(o client.Object) {
			grow(o)
			o.SetOwnerReferences([]metav1.OwnerReference{foreign})
		})},
		{Name: "delete another pod", Write: del(otherPod)},
		{Name: "point an unheld volume at a claim", Write: patch(retained, pointAt(ns))},
		{Name: "move a held volume to another namespace", Write: patch(held, pointAt("attacker"))},
		{Name: "hold a volume without a claim, then send it to another namespace", Write: patch(free, func(o client.Object) {
			hold("Retain")(o)
			pointAt("attacker")(o)
		})},
		{Name: "set another volume's reclaim policy to Delete", Write: patch(retained, pv(func(v *corev1.PersistentVolume) {
			v.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
		}))},
		{Name: "hold a volume recording a false original policy", Write: patch(retained, hold("Delete"))},
		{Name: "grow a volume", Write: patch(bound, pv(func(v *corev1.PersistentVolume) {
			v.Spec.Capacity[corev1.ResourceStorage] = resource.MustParse("100Gi")
		}))},
		{Name: "label a volume", Write: patch(bound, pv(func(v *corev1.PersistentVolume) { v.Labels = map[string]string{"tier": "gold"} }))},
		{Name: "give a held volume a policy it did not have", Write: patch(held, pv(func(v *corev1.PersistentVolume) {
			v.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRecycle
		}))},
	}

	// The API server loads a new policy asynchronously: wait until it refuses the first case.
	require.Eventually(t, func() bool {
		err := refused[0].Write(op)
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy")
	}, testsupport.PolicyWait, 100*time.Millisecond, "the policy never took effect")
	testsupport.RequirePolicyWrites(t, operatorUser, op, suite.Client, allowed, refused)
	require.NoError(t, refused[0].Write(suite.Client), "another user's privileged StatefulSet in kube-system")
}
