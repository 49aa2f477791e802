//go:build integration

package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// operatorUser is the identity deploy/rollout-operator.yaml gives the operator.
const operatorUser = "system:serviceaccount:rollout-operator-system:rollout-operator-controller-manager"

// asShippedOperator installs the operator's identity and admission policies as deploy/ ships them and
// returns its impersonated config once the statefulset-writes policy is enforced (the API server
// compiles a policy a moment after it is created): a partition patch of a managed StatefulSet in
// kube-system is refused by it.
func asShippedOperator(t *testing.T) *rest.Config {
	t.Helper()
	sa := installManifestRBAC(t)
	cfg := rest.CopyConfig(suite.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + sa.Namespace + ":" + sa.Name,
		Groups: testsupport.ServiceAccountGroups(sa.Namespace)}
	op, err := client.New(cfg, client.Options{Scheme: suite.Scheme})
	require.NoError(t, err)
	probe := managedStatefulSet(t, "kube-system", "policy-probe-"+strings.ToLower(t.Name()))
	require.Eventually(t, func() bool {
		err := op.Patch(t.Context(), probe.DeepCopy(), client.RawPatch(types.MergePatchType,
			[]byte(`{"spec":{"updateStrategy":{"rollingUpdate":{"partition":0}}}}`)), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "statefulset-writes")
	}, testsupport.PolicyWait+10*time.Second, 100*time.Millisecond, "the statefulset-writes policy never took effect")
	return cfg
}

// managedStatefulSet creates (as the admin) a StatefulSet in namespace that carries the operator's
// ownership annotation, and returns it.
func managedStatefulSet(t *testing.T, namespace, name string) *appsv1.StatefulSet {
	t.Helper()
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app": name},
			Annotations: map[string]string{rolloutv1alpha1.ManagedByAnnotation: "web"}},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
			},
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To[int32](3)}},
		},
	}
	require.NoError(t, suite.Client.Create(t.Context(), sts))
	return sts
}

// TestStatefulSetPolicyConfinesTheOperator applies deploy/rollout-operator.yaml's RBAC and policies and
// writes StatefulSets with server-side dry-run as the operator's ServiceAccount: its own writes (the
// partition with its annotation, as applyPartition server-side applies it; a hand-back; a template
// rollback mid-rollout) are admitted; a write in kube-system, of a StatefulSet it does not manage, of
// any other field or metadata, or of the template outside a rollback is refused. Another user's
// identical writes are admitted: the policy binds the operator only.
func TestStatefulSetPolicyConfinesTheOperator(t *testing.T) {
	ctx := t.Context()
	op, err := client.New(asShippedOperator(t), client.Options{Scheme: suite.Scheme})
	require.NoError(t, err)

	f := newFixture(t, 3, 0)                     // "web": not annotated yet (a PhasedRollout's first write adds it)
	managed := managedStatefulSet(t, f.ns, "db") // annotated, settled (currentRevision == updateRevision)
	setRevisions(t, managed, "db-r1", "db-r1")
	rolling := managedStatefulSet(t, f.ns, "cache") // annotated, mid-rollout
	setRevisions(t, rolling, "cache-r1", "cache-r2")
	system := managedStatefulSet(t, "kube-system", "coredns-"+strings.ToLower(f.ns))

	// apply sets the partition (and the annotation) as applyPartition does.
	apply := func(sts *appsv1.StatefulSet, partition int32, annotate bool) func(c client.Client) error {
		return func(c client.Client) error {
			ac := appsv1ac.StatefulSet(sts.Name, sts.Namespace).WithUID(sts.UID).
				WithSpec(appsv1ac.StatefulSetSpec().WithUpdateStrategy(appsv1ac.StatefulSetUpdateStrategy().
					WithRollingUpdate(appsv1ac.RollingUpdateStatefulSetStrategy().WithPartition(partition))))
			if annotate {
				ac.WithAnnotations(map[string]string{rolloutv1alpha1.ManagedByAnnotation: "web"})
			}
			return c.Apply(ctx, ac, client.FieldOwner(rolloutv1alpha1.FieldManager), client.ForceOwnership, client.DryRunAll)
		}
	}
	// patch merge-patches the StatefulSet as mutate changes it.
	patch := func(sts *appsv1.StatefulSet, mutate func(*appsv1.StatefulSet)) func(c client.Client) error {
		return func(c client.Client) error {
			cur := &appsv1.StatefulSet{}
			if err := suite.Client.Get(ctx, client.ObjectKeyFromObject(sts), cur); err != nil {
				return err
			}
			orig := cur.DeepCopy()
			mutate(cur)
			return c.Patch(ctx, cur, client.MergeFrom(orig), client.DryRunAll)
		}
	}
	// rollback is step.go's rollback: the revision's strategic merge patch of the template.
	rollback := func(sts *appsv1.StatefulSet, template string) func(c client.Client) error {
		return func(c client.Client) error {
			return c.Patch(ctx, sts.DeepCopy(), client.RawPatch(types.StrategicMergePatchType,
				[]byte(`{"spec":{"template":{"$patch":"replace","metadata":{"labels":{"app":"`+sts.Name+`"}},"spec":`+template+`}}}`)), client.DryRunAll)
		}
	}
	const previous = `{"containers":[{"name":"app","image":"app:0"}]}`
	const rootTemplate = `{"hostPID":true,"containers":[{"name":"app","image":"attacker.example/root:1","securityContext":{"privileged":true}}],` +
		`"volumes":[{"name":"root","hostPath":{"path":"/"}}]}`
	handBack := func(sts *appsv1.StatefulSet) func(c client.Client) error {
		return patch(sts, func(s *appsv1.StatefulSet) {
			delete(s.Annotations, rolloutv1alpha1.ManagedByAnnotation)
			s.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To[int32](0)
		})
	}
	web := f.sts()

	allowed := []testsupport.PolicyWrite{
		{Name: "take over a StatefulSet: partition and annotation", Write: apply(web, 3, true)},
		{Name: "step the partition of its StatefulSet", Write: apply(managed, 2, true)},
		{Name: "hand a StatefulSet back", Write: handBack(managed)},
		{Name: "roll the template back mid-rollout", Write: rollback(rolling, previous)},
	}
	refused := []testsupport.PolicyWrite{
		{Name: "partition of a kube-system StatefulSet", Write: apply(system, 0, true)},
		{Name: "privileged template in kube-system mid-rollout", Write: rollback(system, rootTemplate)},
		{Name: "partition of a StatefulSet it does not manage", Write: apply(web, 0, false)},
		{Name: "privileged template of a settled StatefulSet", Write: rollback(managed, rootTemplate)},
		{Name: "template with the partition in one write", Write: patch(rolling, func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.ServiceAccountName = "admin"
			s.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To[int32](0)
		})},
		{Name: "scale a StatefulSet", Write: patch(managed, func(s *appsv1.StatefulSet) { s.Spec.Replicas = ptr.To[int32](0) })},
		{Name: "minReadySeconds", Write: patch(managed, func(s *appsv1.StatefulSet) { s.Spec.MinReadySeconds = 3600 })},
		{Name: "updateStrategy OnDelete", Write: patch(managed, func(s *appsv1.StatefulSet) {
			s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
		})},
		{Name: "change a label", Write: patch(managed, func(s *appsv1.StatefulSet) { s.Labels["app"] = "attacker" })},
		{Name: "add another annotation", Write: patch(managed, func(s *appsv1.StatefulSet) { s.Annotations["example.com/x"] = "y" })},
		{Name: "add an owner reference", Write: patch(managed, func(s *appsv1.StatefulSet) {
			s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "8d4c0f6e-0000-4000-8000-000000000009"}}
		})},
		{Name: "hand back a kube-system StatefulSet", Write: handBack(system)},
	}
	testsupport.RequirePolicyWrites(t, operatorUser, op, suite.Client, allowed, refused)
	assert.NoError(t, refused[1].Write(suite.Client), "another user's template patch in kube-system")
}

// TestRollbackUnderTheShippedPolicy runs the operator as its ServiceAccount under deploy/'s RBAC and
// policies through a failed step with onFailure Rollback: the takeover, the partition steps and the
// rollback of the template all pass the statefulset-writes policy.
func TestRollbackUnderTheShippedPolicy(t *testing.T) {
	_, pr := failAndRollBack(t, asShippedOperator(t))
	assert.Empty(t, pr.Status.LastError)
}

// setRevisions plays the StatefulSet controller's status write for any StatefulSet.
func setRevisions(t *testing.T, sts *appsv1.StatefulSet, current, update string) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &appsv1.StatefulSet{}
		if err := suite.Client.Get(t.Context(), client.ObjectKeyFromObject(sts), cur); err != nil {
			return err
		}
		cur.Status.ObservedGeneration = cur.Generation
		cur.Status.Replicas = *cur.Spec.Replicas
		cur.Status.CurrentRevision = current
		cur.Status.UpdateRevision = update
		return suite.Client.Status().Update(t.Context(), cur)
	}))
}
