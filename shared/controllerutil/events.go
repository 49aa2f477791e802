// Package controllerutil holds helpers the statefulops controllers share.
package controllerutil

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// Transition describes the condition state whose entry is announced by an Event.
type Transition struct {
	// Type is the condition type, e.g. "Ready".
	Type string
	// Status is the status that means waiting, e.g. False for Ready or True for Stalled.
	Status metav1.ConditionStatus
	// EventType is corev1.EventTypeNormal or corev1.EventTypeWarning.
	EventType string
	// Action is the events.k8s.io action, e.g. "Wait".
	Action string
	// CompareMessage also announces a change of message within the same reason. Use it only for
	// conditions whose message holds no counters or durations, or every reconcile would emit an Event.
	CompareMessage bool
}

// EventOnTransition records an Event about regarding when the condition t.Type in after has status
// t.Status and was not in that state before (another status, another reason, no condition, or with
// t.CompareMessage another message): the Event's reason and note are the condition's reason and
// message, related (may be nil) is the object the wait is about. before is the status as read at the
// start of the reconcile and after the status written, so the Event is recorded once when the object
// enters the waiting state, not on every reconcile; everything is read from the object, so an operator
// restart does not repeat it. It reports whether an Event was recorded.
func EventOnTransition(rec events.EventRecorder, regarding, related runtime.Object, before, after []metav1.Condition, t Transition) bool {
	now := meta.FindStatusCondition(after, t.Type)
	if now == nil || now.Status != t.Status {
		return false
	}
	if was := meta.FindStatusCondition(before, t.Type); was != nil && was.Status == now.Status && was.Reason == now.Reason &&
		(!t.CompareMessage || was.Message == now.Message) {
		return false
	}
	rec.Eventf(regarding, related, t.EventType, now.Reason, t.Action, "%s", now.Message)
	return true
}
