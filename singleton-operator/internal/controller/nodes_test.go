package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// A node's heartbeat queues no singleton; a change of its readiness or its taints (what nodeFenced
// reads) does.
func TestNodeFencingChangedIgnoresHeartbeats(t *testing.T) {
	node := func(ready corev1.ConditionStatus, heartbeat time.Time, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n1"},
			Spec:       corev1.NodeSpec{Taints: taints},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: ready, LastHeartbeatTime: metav1.NewTime(heartbeat),
			}}},
		}
	}
	changed := func(old, new *corev1.Node) bool {
		return nodeFencingChanged().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: new})
	}
	t0 := time.Now()
	outOfService := corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}
	assert.False(t, changed(node(corev1.ConditionTrue, t0), node(corev1.ConditionTrue, t0.Add(10*time.Second))), "heartbeat")
	assert.True(t, changed(node(corev1.ConditionTrue, t0), node(corev1.ConditionUnknown, t0)), "not Ready")
	assert.True(t, changed(node(corev1.ConditionFalse, t0), node(corev1.ConditionTrue, t0)), "Ready again")
	assert.True(t, changed(node(corev1.ConditionFalse, t0), node(corev1.ConditionFalse, t0, outOfService)), "out-of-service taint")
	assert.True(t, nodeFencingChanged().Delete(event.DeleteEvent{Object: node(corev1.ConditionFalse, t0)}), "deleted")
	assert.True(t, nodeFencingChanged().Create(event.CreateEvent{Object: node(corev1.ConditionTrue, t0)}), "created")
}
