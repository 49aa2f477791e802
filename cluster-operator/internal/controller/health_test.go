package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
)

var now = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func ago(s int) metav1.Time { return metav1.NewTime(now.Add(-time.Duration(s) * time.Second)) }

func defaults() *clusterv1alpha1.StatefulCluster {
	return &clusterv1alpha1.StatefulCluster{Spec: clusterv1alpha1.StatefulClusterSpec{
		Replicas:                  ptr.To[int32](3),
		UnhealthyThresholdSeconds: ptr.To[int32](300),
		PendingThresholdSeconds:   ptr.To[int32](600),
		NodeLossToleranceSeconds:  ptr.To[int32](300),
		ReplaceOnNodeOutOfService: ptr.To(true),
	}}
}

func runningPod(ready bool, since int) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{CreationTimestamp: ago(3600)},
		Spec:       corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: ptr.To(ago(3600)),
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: ago(since)}}},
	}
}

func node(status corev1.ConditionStatus, since int, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastTransitionTime: ago(since)}}}}
}

// TestJudge: the replacement rules and their thresholds (SC-05, SC-06, SC-B3, SC-H8).
func TestJudge(t *testing.T) {
	ready := node(corev1.ConditionTrue, 9999)
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		node     *corev1.Node
		wasReady bool
		mod      func(*clusterv1alpha1.StatefulCluster)
		want     clusterv1alpha1.RetirementReason
		recheck  int    // seconds from now, 0: none
		stuck    *stuck // what whyStuck says
	}{
		{name: "healthy", pod: runningPod(true, 100), node: ready},
		{name: "failed", pod: func() *corev1.Pod { p := runningPod(true, 1); p.Status.Phase = corev1.PodFailed; return p }(), node: ready, want: clusterv1alpha1.RetiredFailed},
		{name: "unready 400s after ready", pod: runningPod(false, 400), node: ready, wasReady: true, want: clusterv1alpha1.RetiredUnhealthy},
		{name: "unready 100s after ready", pod: runningPod(false, 100), node: ready, wasReady: true, recheck: 200},
		{name: "never ready, no startup threshold", pod: runningPod(false, 4000), node: ready},
		{name: "never ready past startup threshold", pod: runningPod(false, 4000), node: ready,
			mod: func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.StartupThresholdSeconds = ptr.To[int32](60) }, want: clusterv1alpha1.RetiredUnhealthy},
		{name: "pending past threshold", pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: ago(700)}, Status: corev1.PodStatus{Phase: corev1.PodPending}},
			want: clusterv1alpha1.RetiredPending},
		{name: "pending past threshold, replacing cannot help", pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: ago(700)}, Status: corev1.PodStatus{Phase: corev1.PodPending}},
			stuck: &stuck{pod: "p", claim: "c", reason: clusterv1alpha1.ReasonClaimPending}},
		{name: "pending, scheduled only 100s ago", pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: ago(700)}, Status: corev1.PodStatus{Phase: corev1.PodPending,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: ago(100)}}}},
			stuck: &stuck{pod: "p", claim: "c", reason: clusterv1alpha1.ReasonClaimPending}, recheck: 500},
		{name: "pending within threshold", pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: ago(100)}, Status: corev1.PodStatus{Phase: corev1.PodPending}},
			recheck: 500},
		{name: "node lost past tolerance", pod: runningPod(true, 1000), node: node(corev1.ConditionUnknown, 301), want: clusterv1alpha1.RetiredNodeLost},
		{name: "node not ready within tolerance", pod: runningPod(true, 1000), node: node(corev1.ConditionFalse, 100), recheck: 200},
		{name: "node out of service", pod: runningPod(true, 1000), node: node(corev1.ConditionTrue, 9999, corev1.Taint{Key: outOfServiceTaint, Effect: corev1.TaintEffectNoExecute}),
			want: clusterv1alpha1.RetiredNodeLost},
		{name: "node out of service, fast path off", pod: runningPod(true, 1000), node: node(corev1.ConditionTrue, 9999, corev1.Taint{Key: outOfServiceTaint, Effect: corev1.TaintEffectNoExecute}),
			mod: func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.ReplaceOnNodeOutOfService = ptr.To(false) }},
		{name: "node gone", pod: runningPod(true, 1000), want: clusterv1alpha1.RetiredNodeLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := defaults()
			if tc.mod != nil {
				tc.mod(sc)
			}
			v := judge(sc, tc.pod, tc.node, tc.wasReady, now, func() *stuck { return tc.stuck })
			assert.Equal(t, tc.want, v.reason, v.message)
			if tc.want == "" && tc.recheck == 0 {
				assert.Equal(t, tc.stuck, v.stuck)
			}
			if tc.recheck == 0 {
				assert.True(t, v.recheck.IsZero(), "recheck %s", v.recheck)
			} else {
				assert.Equal(t, now.Add(time.Duration(tc.recheck)*time.Second), v.recheck)
			}
		})
	}
}

func TestUpdateBounds(t *testing.T) {
	sc := defaults()
	sc.Spec.Replicas = ptr.To[int32](10)
	u, s, p := updateBounds(sc)
	assert.Equal(t, []int{1, 0, 0}, []int{u, s, p}, "defaults")
	sc.Spec.UpdateStrategy.RollingUpdate = &clusterv1alpha1.RollingUpdateStatefulClusterStrategy{
		MaxUnavailable: ptr.To(intstr.FromString("25%")), MaxSurge: ptr.To(intstr.FromString("10%")), Partition: ptr.To[int32](4)}
	u, s, p = updateBounds(sc)
	assert.Equal(t, []int{3, 1, 4}, []int{u, s, p}, "percentages round up")
	sc.Spec.Replicas = ptr.To[int32](0)
	sc.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromString("0%"))
	sc.Spec.UpdateStrategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromString("10%"))
	u, s, _ = updateBounds(sc)
	assert.Equal(t, []int{1, 0}, []int{u, s}, "never both 0")
}
