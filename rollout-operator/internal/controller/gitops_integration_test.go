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
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// gitOpsManager is the second field manager of the GitOps test: a tool such as Argo CD or Flux
// server-side applying its manifest of the StatefulSet, without force (a conflict would fail its sync).
const gitOpsManager = "argocd"

// gitOpsStatefulSet is the GitOps tool's manifest of the fixture's StatefulSet "web"; partition, when
// not nil, is in it.
func (f *fixture) gitOpsStatefulSet(team, image string, partition *int32) *appsv1ac.StatefulSetApplyConfiguration {
	strategy := appsv1ac.StatefulSetUpdateStrategy().WithType(appsv1.RollingUpdateStatefulSetStrategyType)
	if partition != nil {
		strategy.WithRollingUpdate(appsv1ac.RollingUpdateStatefulSetStrategy().WithPartition(*partition))
	}
	return appsv1ac.StatefulSet("web", f.ns).WithLabels(map[string]string{"team": team}).
		WithSpec(appsv1ac.StatefulSetSpec().WithReplicas(f.n).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{"app": "web"})).
			WithUpdateStrategy(strategy).
			WithTemplate(corev1ac.PodTemplateSpec().WithLabels(map[string]string{"app": "web"}).
				WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().WithName("app").WithImage(image)))))
}

// gitOpsApply applies the manifest as the GitOps tool and returns the StatefulSet as the API server
// left it.
func (f *fixture) gitOpsApply(ac *appsv1ac.StatefulSetApplyConfiguration) *appsv1ac.StatefulSetApplyConfiguration {
	f.t.Helper()
	require.NoError(f.t, suite.Client.Apply(f.t.Context(), ac, client.FieldOwner(gitOpsManager)), "the GitOps tool's apply")
	return ac
}

// appliedPartition is the partition of the StatefulSet an apply returned, -1 when it has none.
func appliedPartition(ac *appsv1ac.StatefulSetApplyConfiguration) int32 {
	if ac.Spec == nil || ac.Spec.UpdateStrategy == nil || ac.Spec.UpdateStrategy.RollingUpdate == nil {
		return -1
	}
	return ptr.Deref(ac.Spec.UpdateStrategy.RollingUpdate.Partition, -1)
}

// managerFields returns the managed-fields entries of the manager on the StatefulSet, flattened to
// their text (enough to look for "f:<field>").
func managerFields(sts *appsv1.StatefulSet, manager string) string {
	var fields []string
	for _, mf := range sts.ManagedFields {
		if mf.Manager == manager && mf.FieldsV1 != nil {
			fields = append(fields, string(mf.FieldsV1.Raw))
		}
	}
	return strings.Join(fields, " ")
}

// The partition is server-side applied under the field manager phasedrollout (issue 22 row 1-f,
// PR-H7). A GitOps tool owns the rest of the StatefulSet, with the idle partition (= replicas) in its
// first manifest (copied from the live object): the operator's forced apply of the same value shares
// the field, so when the tool drops it from its manifest the partition stays (a merge patch of an
// unchanged value would have left the tool the only owner, its apply would reset the partition to 0
// and roll every pod unchecked). The tool's applies never conflict, its fields survive the operator's
// writes, and its syncs cause no partition write: the StatefulSet's generation moves only with the
// tool's own spec changes.
func TestPartitionSurvivesAGitOpsApply(t *testing.T) {
	startOperator(t, newFakeChecker(VerdictPass))
	// newFixture's StatefulSet, created by the tool's first apply.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rollout-"}}
	require.NoError(t, suite.Client.Create(t.Context(), ns))
	f := &fixture{t: t, ns: ns.Name, n: 3}
	f.gitOpsApply(f.gitOpsStatefulSet("a", "app:1", ptr.To[int32](3)))
	f.setRevisions("web-r1", "web-r1")
	for i := range f.n {
		f.createPod(i, "web-r1")
	}
	log := f.simulateStatefulSetController()
	f.createRollout()
	require.Eventually(t, func() bool { return f.sts().Annotations[rolloutv1alpha1.ManagedByAnnotation] == "pr" }, wait, tick, "the operator holds the partition")
	f.waitPhase(rolloutv1alpha1.PhaseUpdated)
	generation := f.sts().Generation

	// The tool's next sync: its manifest changed (label team b) and no longer carries the partition.
	got := f.gitOpsApply(f.gitOpsStatefulSet("b", "app:1", nil))
	assert.Equal(t, int32(3), appliedPartition(got), "the tool's apply keeps the operator's partition")
	assert.Equal(t, "pr", got.Annotations[rolloutv1alpha1.ManagedByAnnotation], "the tool's apply keeps the operator's annotation")
	assert.Equal(t, "b", got.Labels["team"])
	assert.Equal(t, generation, ptr.Deref(got.Generation, 0), "the tool's sync changed no spec field")
	testsupport.NeverWithin(t, 2*time.Second, 50*time.Millisecond, func() bool { return f.sts().Generation != generation },
		"the StatefulSet's spec changed after the GitOps tool's sync")

	// A template change through the tool: one spec change, the partition held where it was.
	got = f.gitOpsApply(f.gitOpsStatefulSet("b", "app:2", nil))
	assert.Equal(t, generation+1, ptr.Deref(got.Generation, 0))
	assert.Equal(t, int32(3), appliedPartition(got))
	testsupport.NeverWithin(t, 2*time.Second, 50*time.Millisecond, func() bool { return f.sts().Generation != generation+1 },
		"the operator wrote the StatefulSet after the tool's template change")

	values, _ := log.get()
	assert.Equal(t, []int32{3}, values, "the partition never moved")

	sts := f.sts()
	ours := managerFields(sts, rolloutv1alpha1.FieldManager)
	assert.Contains(t, ours, `"f:partition"`)
	assert.Contains(t, ours, `"f:`+rolloutv1alpha1.ManagedByAnnotation+`"`)
	for _, field := range []string{"f:team", "f:replicas", "f:template", "f:type"} {
		assert.NotContains(t, ours, `"`+field+`"`, "the operator does not take the tool's %s", field)
	}
	theirs := managerFields(sts, gitOpsManager)
	assert.Contains(t, theirs, `"f:team"`)
	assert.Contains(t, theirs, `"f:template"`)
	assert.NotContains(t, theirs, `"f:partition"`, "the tool no longer owns the partition")
}
