package controller

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
)

func specWith(sel *metav1.LabelSelector, templateLabels map[string]string) *clusterv1alpha1.StatefulCluster {
	return &clusterv1alpha1.StatefulCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", Generation: 3},
		Spec: clusterv1alpha1.StatefulClusterSpec{
			Replicas: ptr.To[int32](2),
			Selector: sel,
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: templateLabels}},
		},
	}
}

// TestCheckSpec: a selector that parses and selects the pods the template makes is acted on (also when
// the template omits matchLabels, which the operator adds, as in the original project's example); one
// that does not parse or does not select them is reported with the reason and the field.
func TestCheckSpec(t *testing.T) {
	expr := func(op metav1.LabelSelectorOperator, values ...string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: op, Values: values}}}
	}
	cases := []struct {
		name     string
		sel      *metav1.LabelSelector
		template map[string]string
		reason   string
	}{
		{"matchLabels, template without labels", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, nil, ""},
		{"In satisfied by the template", expr(metav1.LabelSelectorOpIn, "data"), map[string]string{"tier": "data"}, ""},
		{"Exists on the cluster label", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: clusterv1alpha1.ClusterNameLabel, Operator: metav1.LabelSelectorOpExists}}}, nil, ""},
		{"unknown operator", expr("Bogus", "data"), map[string]string{"tier": "data"}, clusterv1alpha1.ReasonInvalidSelector},
		{"invalid label value", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "not a value!"}}, nil, clusterv1alpha1.ReasonInvalidSelector},
		{"In on another value", expr(metav1.LabelSelectorOpIn, "web"), map[string]string{"tier": "data"}, clusterv1alpha1.ReasonSelectorMismatch},
		{"Exists on a label the template lacks", expr(metav1.LabelSelectorOpExists), nil, clusterv1alpha1.ReasonSelectorMismatch},
		{"DoesNotExist on a template label", expr(metav1.LabelSelectorOpDoesNotExist), map[string]string{"tier": "data"}, clusterv1alpha1.ReasonSelectorMismatch},
		{"DoesNotExist on the revision label", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: clusterv1alpha1.RevisionLabel, Operator: metav1.LabelSelectorOpDoesNotExist}}}, nil, clusterv1alpha1.ReasonSelectorMismatch},
		{"no selector", nil, nil, clusterv1alpha1.ReasonSelectorMismatch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := checkSpec(specWith(tc.sel, tc.template))
			if tc.reason == "" {
				assert.Nil(t, p)
				return
			}
			require.NotNil(t, p)
			assert.Equal(t, tc.reason, p.reason)
			assert.Contains(t, p.message, "spec.selector")
		})
	}
}

// statusScope is a reconcile of specWith(app=db) that observed pods (name -> ready), all of the update
// revision, and decided nothing.
func statusScope(ready map[string]bool) *scope {
	sc := specWith(&metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, nil)
	rev := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "db-rev1"}}
	s := &scope{sc: sc, orig: sc.DeepCopy(), now: time.Unix(1000, 0), key: key(sc),
		revs: &revisionSet{update: rev, current: rev, all: []*appsv1.ControllerRevision{rev}}}
	for name, r := range ready {
		pod := buildPod(sc, &sc.Spec.Template, rev.Name, name)
		s.pods = append(s.pods, &member{pod: pod, name: name, revision: rev.Name, live: true, ready: r, available: r})
	}
	return s
}

func condOf(s *scope, t string) *metav1.Condition {
	return meta.FindStatusCondition(s.sc.Status.Conditions, t)
}

// wantReason asserts that the condition is present with the reason and returns it.
func wantReason(t *testing.T, s *scope, condType, reason string) *metav1.Condition {
	t.Helper()
	c := condOf(s, condType)
	require.NotNil(t, c, condType)
	assert.Equal(t, reason, c.Reason, condType)
	return c
}

// assertConsistent checks what every status written must satisfy: observedGeneration on the status and
// every condition, Stalled and Reconciling never both present, Ready True only when not Stalled and the
// counts say so, Ready False only with Stalled or Reconciling (kstatus never reads it Current), the counts as Ready's message states them, and status.selector selecting every pod
// counted.
func assertConsistent(t *testing.T, s *scope) {
	t.Helper()
	st := s.sc.Status
	assert.Equal(t, s.sc.Generation, st.ObservedGeneration)
	for _, c := range st.Conditions {
		assert.Equal(t, s.sc.Generation, c.ObservedGeneration, "condition %s", c.Type)
	}
	stalled, reconciling, ready := condOf(s, clusterv1alpha1.ConditionStalled), condOf(s, clusterv1alpha1.ConditionReconciling), condOf(s, clusterv1alpha1.ConditionReady)
	assert.False(t, stalled != nil && reconciling != nil, "Stalled and Reconciling together")
	require.NotNil(t, ready)
	if ready.Status == metav1.ConditionTrue {
		// Ready says the pods are there and Ready; Reconciling may still wait for minReadySeconds
		// (Available) or retry a write (ReplicaFailure), never for anything Ready covers.
		assert.Nil(t, stalled)
		if reconciling != nil {
			assert.Contains(t, []string{clusterv1alpha1.ReasonMinimumReplicasUnavailable, clusterv1alpha1.ReasonReconcileError,
				clusterv1alpha1.ReasonCreateFailed, clusterv1alpha1.ReasonDeleteFailed}, reconciling.Reason)
		}
		assert.Equal(t, *s.sc.Spec.Replicas, st.ReadyReplicas)
	} else {
		assert.True(t, stalled != nil || reconciling != nil, "Ready False with neither Stalled nor Reconciling: kstatus would read Current")
	}
	if p := condOf(s, clusterv1alpha1.ConditionProgressing); p != nil && p.Status == metav1.ConditionTrue {
		assert.True(t, strings.HasPrefix(p.Message, fmt.Sprintf("%d live, %d ready, %d updated of %d replicas", st.Replicas, st.ReadyReplicas, st.UpdatedReplicas, *s.sc.Spec.Replicas)), p.Message)
	}
	sel, err := labels.Parse(st.Selector)
	require.NoError(t, err)
	matched := 0
	for _, m := range s.pods {
		if m.live && m.pod != nil && sel.Matches(labels.Set(m.pod.Labels)) && st.Selector != "" {
			matched++
		}
	}
	if s.invalid == nil {
		assert.EqualValues(t, st.Replicas, matched, "status.selector %q selects every pod counted", st.Selector)
	}
}

// TestApplyStatusKstatus: the kstatus conditions applyStatus derives, and that the status it writes is
// consistent, for a healthy, a progressing, a failing and a stalled StatefulCluster.
func TestApplyStatusKstatus(t *testing.T) {
	t.Run("healthy", func(t *testing.T) {
		s := statusScope(map[string]bool{"db-0": true, "db-1": true})
		s.applyStatus(nil)
		assertConsistent(t, s)
		assert.True(t, meta.IsStatusConditionTrue(s.sc.Status.Conditions, clusterv1alpha1.ConditionReady))
		assert.Equal(t, "app=db", s.sc.Status.Selector)
	})
	t.Run("pods not ready", func(t *testing.T) {
		s := statusScope(map[string]bool{"db-0": true, "db-1": false})
		s.applyStatus(nil)
		assertConsistent(t, s)
		rec := wantReason(t, s, clusterv1alpha1.ConditionReconciling, clusterv1alpha1.ReasonPodsNotReady)
		assert.Contains(t, rec.Message, "2 live, 1 ready")
	})
	t.Run("scaling up", func(t *testing.T) {
		s := statusScope(map[string]bool{"db-0": true})
		s.progress = clusterv1alpha1.ReasonScalingUp
		s.applyStatus(nil)
		assertConsistent(t, s)
		wantReason(t, s, clusterv1alpha1.ConditionReconciling, clusterv1alpha1.ReasonScalingUp)
	})
	t.Run("not yet available", func(t *testing.T) {
		s := statusScope(map[string]bool{"db-0": true, "db-1": true})
		s.pods[1].available = false
		s.applyStatus(nil)
		assertConsistent(t, s)
		wantReason(t, s, clusterv1alpha1.ConditionReconciling, clusterv1alpha1.ReasonMinimumReplicasUnavailable)
	})
	t.Run("a failed write retried", func(t *testing.T) {
		s := statusScope(map[string]bool{"db-0": true, "db-1": true})
		s.fail("labelling claim db-data-0 retired: boom")
		s.applyStatus(nil)
		assertConsistent(t, s)
		wantReason(t, s, clusterv1alpha1.ConditionReplicaFailure, clusterv1alpha1.ReasonReconcileError)
		wantReason(t, s, clusterv1alpha1.ConditionReconciling, clusterv1alpha1.ReasonReconcileError)
	})
	t.Run("revisions unreadable", func(t *testing.T) {
		s := statusScope(nil)
		s.revs = nil
		s.applyStatus(errors.New("listing ControllerRevisions: boom"))
		rec := wantReason(t, s, clusterv1alpha1.ConditionReconciling, clusterv1alpha1.ReasonReconcileError)
		assert.Contains(t, rec.Message, "boom")
	})
	t.Run("template refused", func(t *testing.T) {
		s := statusScope(map[string]bool{"db-0": true})
		s.progress = clusterv1alpha1.ReasonScalingUp
		s.refused = `Pod "db-1" is invalid: spec.containers[0].name: Invalid value: "Main_1"`
		s.applyStatus(nil)
		assertConsistent(t, s)
		stalled := wantReason(t, s, clusterv1alpha1.ConditionStalled, clusterv1alpha1.ReasonInvalidTemplate)
		assert.Contains(t, stalled.Message, "Main_1")
		assert.Equal(t, metav1.ConditionFalse, condOf(s, clusterv1alpha1.ConditionProgressing).Status, "nothing progresses")
		wantReason(t, s, clusterv1alpha1.ConditionReady, clusterv1alpha1.ReasonInvalidTemplate)
		wantReason(t, s, clusterv1alpha1.ConditionReplicaFailure, clusterv1alpha1.ReasonCreateFailed)
	})
	t.Run("hook port not found", func(t *testing.T) {
		s := statusScope(map[string]bool{"db-0": true})
		s.sc.Spec.MembershipHooks = &clusterv1alpha1.MembershipHooks{}
		s.hookFailure, s.hookStalled = "Join hook for db-2 failed: no port", "the Join membership hook cannot be called"
		s.holdCreates = true
		s.progress = clusterv1alpha1.ReasonReplacing
		s.applyStatus(nil)
		assertConsistent(t, s)
		wantReason(t, s, clusterv1alpha1.ConditionStalled, clusterv1alpha1.ReasonHookPortNotFound)
		wantReason(t, s, clusterv1alpha1.ConditionMembershipHookFailed, clusterv1alpha1.ReasonHookPortNotFound)
	})
	t.Run("invalid selector", func(t *testing.T) {
		s := statusScope(map[string]bool{"db-0": true, "db-1": true})
		s.sc.Status.Selector = "app=db" // written when it was still valid
		s.sc.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}}
		s.invalid = checkSpec(s.sc)
		s.applyStatus(nil)
		assertConsistent(t, s)
		assert.Empty(t, s.sc.Status.Selector, "a selector that does not parse selects nothing")
		wantReason(t, s, clusterv1alpha1.ConditionStalled, clusterv1alpha1.ReasonInvalidSelector)
		assert.Equal(t, metav1.ConditionFalse, condOf(s, clusterv1alpha1.ConditionReady).Status)
	})
	t.Run("selector mismatch", func(t *testing.T) {
		// Issue 16's case 3: selector app In (web), template app=db; stored before the CRD refused it.
		s := statusScope(map[string]bool{"db-0": true, "db-1": true})
		s.sc.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"web"}}}}
		s.sc.Spec.Template.Labels = map[string]string{"app": "db"}
		s.invalid = checkSpec(s.sc)
		s.applyStatus(nil)
		assertConsistent(t, s)
		ready := condOf(s, clusterv1alpha1.ConditionReady)
		assert.Equal(t, metav1.ConditionFalse, ready.Status, "never Ready=True 2/2 while status.selector selects none of the pods")
		assert.Equal(t, clusterv1alpha1.ReasonSelectorMismatch, ready.Reason)
	})
	t.Run("stuck pod while scaling", func(t *testing.T) {
		s := statusScope(map[string]bool{"db-0": true})
		s.pods[0].verdict.stuck = &stuck{pod: "db-0", reason: clusterv1alpha1.ReasonUnschedulable, detail: "Insufficient cpu"}
		s.progress = clusterv1alpha1.ReasonScalingUp
		s.applyStatus(nil)
		assertConsistent(t, s)
		wantReason(t, s, clusterv1alpha1.ConditionStalled, clusterv1alpha1.ReasonUnschedulable)
		assert.Nil(t, condOf(s, clusterv1alpha1.ConditionReconciling), "Stalled wins: kstatus reads Failed")
	})
}

// TestFailureReason: ReplicaFailure names a failed creation, a failed deletion, or any other failure.
func TestFailureReason(t *testing.T) {
	for msgs, want := range map[string]string{
		"creating pod db-3: forbidden":                  clusterv1alpha1.ReasonCreateFailed,
		"creating claim db-data-3: quota":               clusterv1alpha1.ReasonCreateFailed,
		"retiring pod db-1: boom":                       clusterv1alpha1.ReasonDeleteFailed,
		"scaling down pod db-1: boom":                   clusterv1alpha1.ReasonDeleteFailed,
		"updating pod db-1: boom":                       clusterv1alpha1.ReasonDeleteFailed,
		"deleting claim db-data-1: boom":                clusterv1alpha1.ReasonDeleteFailed,
		"adopting pod x: boom":                          clusterv1alpha1.ReasonReconcileError,
		"creating ControllerRevision db-7f: boom":       clusterv1alpha1.ReasonReconcileError,
		"deleting ControllerRevision db-7f: boom":       clusterv1alpha1.ReasonReconcileError,
		"creating pods of spec.template: invalid":       clusterv1alpha1.ReasonCreateFailed,
		"listing pods: boom":                            clusterv1alpha1.ReasonReconcileError,
		"deleting claim a: x|creating pod db-4: boom":   clusterv1alpha1.ReasonCreateFailed,
		"setting the owner of claim a: x|listing: boom": clusterv1alpha1.ReasonReconcileError,
	} {
		assert.Equal(t, want, failureReason(strings.Split(msgs, "|")), msgs)
	}
}
