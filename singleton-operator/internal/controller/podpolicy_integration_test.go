//go:build integration

package controller

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/shared/podmutation"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// TestPodPolicyConfinesTheOperator applies deploy/singleton-operator.yaml's RBAC and policies and,
// as the operator's ServiceAccount with server-side dry-run, makes the operator's pod writes: a
// release of a gated and of a Wrapper pod (releasePatch), an adoption, its readiness gate condition,
// the deletion of a held pod and of a pod without a hold in a namespace holding a StatefulSingleton, the
// exit report's annotation on a pod being deleted — all admitted. Writes in kube-system, of pods it
// never held, of any other label, annotation, spec field, gate, owner reference, condition or status
// field, and the exit report's annotation on a pod not being deleted are refused; another user's
// identical writes are admitted (the policy binds the operator only).
func TestPodPolicyConfinesTheOperator(t *testing.T) {
	ctx := t.Context()
	as := installShippedPodPolicy(t)
	user := operatorUser

	newNamespace := func(labels map[string]string) string {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "singleton-pods-", Labels: labels}}
		require.NoError(t, suite.Client.Create(ctx, ns))
		return ns.Name
	}
	enabled := newNamespace(map[string]string{singletonv1.LabelNamespaceEnabled: "true"})
	plain := newNamespace(nil)
	// pod creates (as the admin) a pod; held gives it the webhook's marks and mode's hold.
	pod := func(namespace, name string, mode singletonv1.HoldMode) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"app": "db"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/db:1"}},
				ReadinessGates: []corev1.PodReadinessGate{{ConditionType: singletonv1.ReadinessGate}}},
		}
		if mode != "" {
			p.Labels[singletonv1.LabelManaged] = "true"
			p.Labels[singletonv1.LabelSingleton] = podmutation.SingletonLabelValue("db")
			p.Annotations = map[string]string{singletonv1.AnnotationManaged: "true", singletonv1.AnnotationHoldMode: string(mode)}
		}
		if mode == singletonv1.HoldModeSchedulingGate {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: singletonv1.SchedulingGate}, {Name: "example.com/quota"}}
		}
		require.NoError(t, suite.Client.Create(ctx, p))
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		require.NoError(t, suite.Client.Status().Update(ctx, p))
		return p
	}
	gated := pod(enabled, "db-0", singletonv1.HoldModeSchedulingGate)
	wrapper := pod(enabled, "db-1", singletonv1.HoldModeWrapper)
	ungated := pod(enabled, "db-2", "")
	stranger := pod(plain, "web-0", "")
	system := pod("kube-system", "kube-proxy-"+strings.TrimPrefix(enabled, "singleton-pods-"), singletonv1.HoldModeWrapper)
	// terminating is a Wrapper pod being deleted, kept by a finalizer (no kubelet confirms its stop).
	terminating := pod(enabled, "db-3", singletonv1.HoldModeWrapper)
	keep := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["test.statefulops.io/keep"]}}`))
	require.NoError(t, suite.Client.Patch(ctx, terminating, keep))
	t.Cleanup(func() {
		release := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
		_ = suite.Client.Patch(context.Background(), terminating, release)
	})
	require.NoError(t, suite.Client.Delete(ctx, terminating))

	fresh := func(p *corev1.Pod) *corev1.Pod {
		cur := &corev1.Pod{}
		require.NoError(t, suite.Client.Get(ctx, client.ObjectKeyFromObject(p), cur))
		return cur
	}
	// release is the operator's releasePatch.
	release := func(p *corev1.Pod) func(c client.Client) error {
		return func(c client.Client) error {
			released, patch, err := releasePatch(fresh(p), 7)
			if err != nil {
				return err
			}
			return c.Patch(ctx, released, patch, client.DryRunAll)
		}
	}
	// adopt is adopt.go's patch.
	adopt := func(p *corev1.Pod) func(c client.Client) error {
		return func(c client.Client) error {
			raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": p.UID,
				"labels":      map[string]string{singletonv1.LabelSingleton: podmutation.SingletonLabelValue("db")},
				"annotations": map[string]string{singletonv1.AnnotationEpoch: "8", singletonv1.AnnotationAdopted: "true"}}})
			if err != nil {
				return err
			}
			return c.Patch(ctx, fresh(p), client.RawPatch(types.MergePatchType, raw), client.DryRunAll)
		}
	}
	// exited is the grant server's record of an exit report (internal/grant, exit.go).
	exited := func(p *corev1.Pod) func(c client.Client) error {
		return func(c client.Client) error {
			raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": p.UID,
				"annotations": map[string]string{singletonv1.AnnotationExited: "app"}}})
			if err != nil {
				return err
			}
			return c.Patch(ctx, fresh(p), client.RawPatch(types.MergePatchType, raw), client.DryRunAll)
		}
	}
	patchPod := func(p *corev1.Pod, mutate func(*corev1.Pod)) func(c client.Client) error {
		return func(c client.Client) error {
			cur := fresh(p)
			orig := cur.DeepCopy()
			mutate(cur)
			return c.Patch(ctx, cur, client.MergeFrom(orig), client.DryRunAll)
		}
	}
	patchStatus := func(p *corev1.Pod, mutate func(*corev1.Pod)) func(c client.Client) error {
		return func(c client.Client) error {
			cur := fresh(p)
			orig := cur.DeepCopy()
			mutate(cur)
			return c.Status().Patch(ctx, cur, client.MergeFrom(orig), client.DryRunAll)
		}
	}
	// markReady is the operator's markReady: its readiness gate condition True.
	markReady := func(p *corev1.Pod) func(c client.Client) error {
		return patchStatus(p, func(cur *corev1.Pod) {
			cur.Status.Conditions = append(cur.Status.Conditions, corev1.PodCondition{Type: singletonv1.ReadinessGate,
				Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now(), Reason: "Released"})
		})
	}
	del := func(p *corev1.Pod) func(c client.Client) error {
		return func(c client.Client) error {
			return c.Delete(ctx, fresh(p), client.Preconditions{UID: &p.UID}, client.DryRunAll)
		}
	}

	allowed := []testsupport.PolicyWrite{
		{Name: "release a gated pod", Write: release(gated)},
		{Name: "release a Wrapper pod", Write: release(wrapper)},
		{Name: "adopt a pod without a hold", Write: adopt(ungated)},
		{Name: "set its readiness gate condition", Write: markReady(wrapper)},
		{Name: "delete a held pod", Write: del(wrapper)},
		{Name: "delete a pod without a hold where a StatefulSingleton is", Write: del(ungated)},
		{Name: "record the exit report of a pod being deleted", Write: exited(terminating)},
	}
	refused := []testsupport.PolicyWrite{
		{Name: "release a kube-system pod", Write: release(system)},
		{Name: "change a kube-system pod's labels", Write: patchPod(system, func(p *corev1.Pod) { p.Labels["k8s-app"] = "attacker" })},
		{Name: "delete a kube-system pod", Write: del(system)},
		{Name: "set a kube-system pod's readiness condition", Write: markReady(system)},
		{Name: "release a pod never held", Write: release(stranger)},
		{Name: "delete a pod never held outside its namespaces", Write: del(stranger)},
		{Name: "change a held pod's image", Write: patchPod(wrapper, func(p *corev1.Pod) { p.Spec.Containers[0].Image = "attacker.example/miner:1" })},
		{Name: "add a toleration", Write: patchPod(gated, func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists})
		})},
		{Name: "steer a gated pod to a node", Write: patchPod(gated, func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "control-plane"}
		})},
		{Name: "remove another scheduling gate", Write: patchPod(gated, func(p *corev1.Pod) { p.Spec.SchedulingGates = nil })},
		{Name: "change another label", Write: patchPod(wrapper, func(p *corev1.Pod) { p.Labels["app"] = "web" })},
		{Name: "move a pod to another singleton", Write: patchPod(wrapper, func(p *corev1.Pod) { p.Labels[singletonv1.LabelSingleton] = "other" })},
		{Name: "add another annotation", Write: patchPod(wrapper, func(p *corev1.Pod) { p.Annotations["example.com/x"] = "y" })},
		{Name: "remove its hold annotation", Write: patchPod(wrapper, func(p *corev1.Pod) { delete(p.Annotations, singletonv1.AnnotationHoldMode) })},
		{Name: "shorten the deadline", Write: patchPod(wrapper, func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr.To[int64](1) })},
		{Name: "set another condition", Write: patchStatus(wrapper, func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()})
		})},
		{Name: "drop another condition", Write: patchStatus(wrapper, func(p *corev1.Pod) { p.Status.Conditions = nil })},
		{Name: "fake the pod's phase and IP", Write: patchStatus(wrapper, func(p *corev1.Pod) {
			p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "10.0.0.66"
			p.Status.PodIPs = []corev1.PodIP{{IP: "10.0.0.66"}}
		})},
		{Name: "readiness condition of a pod never held", Write: markReady(stranger)},
		{Name: "record an exit report on a pod not being deleted", Write: exited(wrapper)},
	}
	testsupport.RequirePolicyWrites(t, user, as, suite.Client, allowed, refused)
}

// The identity deploy/singleton-operator.yaml gives the operator.
const (
	operatorNamespace = "singleton-operator-system"
	operatorUser      = "system:serviceaccount:" + operatorNamespace + ":singleton-operator-controller-manager"
)

// installShippedPodPolicy applies deploy/singleton-operator.yaml's RBAC and admission policies and
// returns a client of the operator's ServiceAccount once the pod-writes policy is enforced (the API
// server compiles a policy a moment after it is created): a kube-system pod's label patch is refused
// by it.
func installShippedPodPolicy(t *testing.T) client.Client {
	t.Helper()
	suite.ApplyManifest(t, filepath.Join("..", "..", "..", "deploy", "singleton-operator.yaml"),
		"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
	as := suite.As(t, operatorUser, testsupport.ServiceAccountGroups(operatorNamespace)...)
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", GenerateName: "pod-policy-probe-"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/db:1"}}}}
	require.NoError(t, suite.Client.Create(t.Context(), probe))
	require.Eventually(t, func() bool {
		err := as.Patch(t.Context(), probe.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`)), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "pod-writes")
	}, testsupport.PolicyWait, 200*time.Millisecond, "the pod-writes policy is never enforced")
	return as
}

// TestOperatorWorksUnderTheShippedPodPolicy runs the operator as its ServiceAccount under the RBAC and
// policies of deploy/singleton-operator.yaml through its pod writes: the release of a Wrapper pod and
// of a SchedulingGate pod, their readiness gate condition, the deletion of a pod without a hold
// while another is active, and the adoption of a running pod without a hold. Every write passes: the
// pod-writes policy takes nothing the operator needs.
func TestOperatorWorksUnderTheShippedPodPolicy(t *testing.T) {
	installShippedPodPolicy(t)
	cfg := rest.CopyConfig(suite.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: operatorUser, Groups: testsupport.ServiceAccountGroups(operatorNamespace)}
	suite.StartManagerAs(t, cfg, (&Options{}).Setup, func(o *ctrl.Options) { CacheOptions(&o.Cache) })

	f := newFixture(t)
	f.createSingleton("db")
	f.createPod("active", held(singletonv1.HoldModeWrapper))
	f.waitReleased("active")
	require.Eventually(t, func() bool { return readinessGateTrue(f.pod("active")) }, wait, tick, "readiness gate set")
	f.createPod("rogue")
	require.Eventually(t, func() bool { return !f.pod("rogue").DeletionTimestamp.IsZero() }, wait, tick, "ungated pod deleted")
	assert.False(t, f.released("rogue"))

	gated := newFixture(t)
	gated.createSingleton("db", func(ss *singletonv1.StatefulSingleton) { ss.Spec.HoldMode = singletonv1.HoldModeSchedulingGate })
	gated.createPod("a", held(singletonv1.HoldModeSchedulingGate))
	gated.waitReleased("a")
	assert.Empty(t, gated.pod("a").Spec.SchedulingGates)
	require.Eventually(t, func() bool { return readinessGateTrue(gated.pod("a")) }, wait, tick, "readiness gate set")

	adopting := newFixture(t)
	adopting.createSingleton("db")
	adopting.createPod("running") // no hold: adopted
	adopting.waitReleased("running")
	require.Eventually(t, func() bool {
		p := adopting.pod("running")
		return p.Annotations[singletonv1.AnnotationAdopted] == "true" && readinessGateTrue(p)
	}, wait, tick, "pod adopted and its readiness gate set")
}
