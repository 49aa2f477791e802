package controllerutil

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
)

func TestEventOnTransitionOnlyOnEntry(t *testing.T) {
	ready := func(status metav1.ConditionStatus, reason, msg string) []metav1.Condition {
		return []metav1.Condition{{Type: "Ready", Status: status, Reason: reason, Message: msg}}
	}
	waiting := Transition{Type: "Ready", Status: metav1.ConditionFalse, EventType: corev1.EventTypeNormal, Action: "Wait"}
	exact := waiting
	exact.CompareMessage = true
	for name, tc := range map[string]struct {
		before, after []metav1.Condition
		t             Transition
		want          bool
	}{
		"no condition before":          {nil, ready(metav1.ConditionFalse, "PodsNotReady", "0 of 3"), waiting, true},
		"from Ready=True":              {ready(metav1.ConditionTrue, "Reconciled", ""), ready(metav1.ConditionFalse, "PodsNotReady", "0 of 3"), waiting, true},
		"another reason":               {ready(metav1.ConditionFalse, "ScalingUp", "0 of 3"), ready(metav1.ConditionFalse, "PodsNotReady", "0 of 3"), waiting, true},
		"same reason, new message":     {ready(metav1.ConditionFalse, "PodsNotReady", "0 of 3"), ready(metav1.ConditionFalse, "PodsNotReady", "1 of 3"), waiting, false},
		"same reason, message counted": {ready(metav1.ConditionFalse, "Stuck", "pod a"), ready(metav1.ConditionFalse, "Stuck", "pod b"), exact, true},
		"unchanged, message counted":   {ready(metav1.ConditionFalse, "Stuck", "pod a"), ready(metav1.ConditionFalse, "Stuck", "pod a"), exact, false},
		"not waiting":                  {ready(metav1.ConditionFalse, "PodsNotReady", ""), ready(metav1.ConditionTrue, "Reconciled", ""), waiting, false},
		"no condition after":           {ready(metav1.ConditionFalse, "PodsNotReady", ""), nil, waiting, false},
	} {
		t.Run(name, func(t *testing.T) {
			rec := events.NewFakeRecorder(1)
			got := EventOnTransition(rec, &corev1.Pod{}, nil, tc.before, tc.after, tc.t)
			assert.Equal(t, tc.want, got)
			assert.Len(t, rec.Events, map[bool]int{true: 1, false: 0}[tc.want])
		})
	}
}
