package controller

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// withConditions is an ExtendedStatefulSet of generation 3 whose conditions are conds (type, status,
// reason, message), all of an older generation.
func withConditions(conds ...[4]string) *extendedv1alpha1.ExtendedStatefulSet {
	e := &extendedv1alpha1.ExtendedStatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", Generation: 3}}
	for _, c := range conds {
		e.Status.Conditions = append(e.Status.Conditions, metav1.Condition{Type: c[0], Status: metav1.ConditionStatus(c[1]),
			Reason: c[2], Message: c[3], ObservedGeneration: 1})
	}
	return e
}

func setter(e *extendedv1alpha1.ExtendedStatefulSet) func(string, bool, string, string) {
	return func(t string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&e.Status.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: e.Generation})
	}
}

// Stalled and Reconciling follow the Ready condition: Stalled for what only the user can unblock,
// Reconciling for every other wait, neither when Ready; every condition carries the generation.
func TestApplyKstatus(t *testing.T) {
	for name, tc := range map[string]struct {
		ready                string // status/reason of Ready
		reason               string
		stale                bool
		stalled, reconciling bool
	}{
		"ready":                {ready: "True", reason: extendedv1alpha1.ReasonReconciled},
		"canary":               {ready: "False", reason: extendedv1alpha1.ReasonCanaryRollout, reconciling: true},
		"config roll":          {ready: "False", reason: extendedv1alpha1.ReasonConfigChanged, reconciling: true},
		"zone waits":           {ready: "False", reason: extendedv1alpha1.ReasonZoneUpgrade, reconciling: true},
		"pods not ready":       {ready: "False", reason: extendedv1alpha1.ReasonPodsNotReady, reconciling: true},
		"api error":            {ready: "False", reason: extendedv1alpha1.ReasonReconcileError, reconciling: true},
		"missing reference":    {ready: "False", reason: extendedv1alpha1.ReasonReferenceNotFound, stalled: true},
		"invalid template":     {ready: "False", reason: extendedv1alpha1.ReasonInvalidTemplate, stalled: true},
		"invalid window":       {ready: "False", reason: extendedv1alpha1.ReasonInvalidRestartWindow, stalled: true},
		"canary failed":        {ready: "False", reason: extendedv1alpha1.ReasonCanaryFailed, stale: true, stalled: true},
		"pre Job failed":       {ready: "False", reason: extendedv1alpha1.ReasonJobFailed, stale: true, stalled: true},
		"rolled back":          {ready: "False", reason: extendedv1alpha1.ReasonRolledBack, stale: true, stalled: true},
		"post Job failed, ran": {ready: "True", reason: extendedv1alpha1.ReasonReconciled},
	} {
		t.Run(name, func(t *testing.T) {
			e := withConditions([4]string{extendedv1alpha1.ConditionReady, tc.ready, tc.reason, "why"},
				[4]string{extendedv1alpha1.ConditionProgressing, "True", "Rollout", "left as it was"})
			applyKstatus(e, tc.stale, setter(e))
			assert.Equal(t, tc.stalled, meta.IsStatusConditionTrue(e.Status.Conditions, extendedv1alpha1.ConditionStalled))
			assert.Equal(t, tc.reconciling, meta.IsStatusConditionTrue(e.Status.Conditions, extendedv1alpha1.ConditionReconciling))
			for _, c := range []string{extendedv1alpha1.ConditionStalled, extendedv1alpha1.ConditionReconciling} {
				if got := meta.FindStatusCondition(e.Status.Conditions, c); got.Status == metav1.ConditionTrue {
					assert.Equal(t, tc.reason, got.Reason, c)
					assert.Equal(t, "why", got.Message, c)
				}
			}
			for _, c := range e.Status.Conditions {
				assert.Equal(t, int64(3), c.ObservedGeneration, c.Type)
			}
		})
	}
}

// The waiting Events: one Warning when Stalled turns True (not a second for Ready), Ready turning False
// otherwise (Warning for an API error), and MissingReference turning True while Ready waits for
// something else; nothing when the state did not change.
func TestWaitingEvents(t *testing.T) {
	ready := func(status, reason string) [4]string {
		return [4]string{extendedv1alpha1.ConditionReady, status, reason, "ready says"}
	}
	stalled := func(status, reason string) [4]string {
		return [4]string{extendedv1alpha1.ConditionStalled, status, reason, "stalled says"}
	}
	missing := func(status string) [4]string {
		return [4]string{extendedv1alpha1.ConditionMissingReference, status, extendedv1alpha1.ReasonReferenceNotFound, "ConfigMap/conf"}
	}
	type ev struct{ eventType, reason string }
	for name, tc := range map[string]struct {
		before, after [][4]string
		want          []ev
	}{
		"stalls": {
			before: [][4]string{ready("True", "Reconciled"), stalled("False", "Reconciled"), missing("False")},
			after:  [][4]string{ready("False", "ReferenceNotFound"), stalled("True", "ReferenceNotFound"), missing("True")},
			want:   []ev{{corev1.EventTypeWarning, "ReferenceNotFound"}},
		},
		"still stalled": {
			before: [][4]string{ready("False", "ReferenceNotFound"), stalled("True", "ReferenceNotFound"), missing("True")},
			after:  [][4]string{ready("False", "ReferenceNotFound"), stalled("True", "ReferenceNotFound"), missing("True")},
		},
		"waits": {
			before: [][4]string{ready("True", "Reconciled"), stalled("False", "Reconciled")},
			after:  [][4]string{ready("False", "CanaryRollout"), stalled("False", "Reconciled")},
			want:   []ev{{corev1.EventTypeNormal, "CanaryRollout"}},
		},
		"api error": {
			before: [][4]string{ready("False", "CanaryRollout"), stalled("False", "Reconciled")},
			after:  [][4]string{ready("False", "ReconcileError"), stalled("False", "Reconciled")},
			want:   []ev{{corev1.EventTypeWarning, "ReconcileError"}},
		},
		"missing during an upgrade": {
			before: [][4]string{ready("False", "CanaryRollout"), stalled("False", "Reconciled"), missing("False")},
			after:  [][4]string{ready("False", "CanaryRollout"), stalled("False", "Reconciled"), missing("True")},
			want:   []ev{{corev1.EventTypeWarning, "ReferenceNotFound"}},
		},
		"runs": {
			before: [][4]string{ready("False", "CanaryRollout"), stalled("False", "Reconciled")},
			after:  [][4]string{ready("True", "Reconciled"), stalled("False", "Reconciled")},
		},
	} {
		t.Run(name, func(t *testing.T) {
			rec := events.NewFakeRecorder(10)
			r := &Reconciler{Access: opsutil.Access{Recorder: rec}}
			r.waitingEvents(withConditions(tc.after...), withConditions(tc.before...))
			close(rec.Events)
			var got []ev
			for e := range rec.Events {
				f := strings.Fields(e) // "Type Reason Note"
				got = append(got, ev{f[0], f[1]})
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// A reconcile that failed before it read the versions reports the error in Ready (and Reconciling) and
// leaves what it did not observe as the last observation said: the versions, the pod counts and the
// other conditions.
func TestApplyStatusAfterAnEarlyError(t *testing.T) {
	e := withConditions([4]string{extendedv1alpha1.ConditionReady, "True", extendedv1alpha1.ReasonReconciled, "version 1 runs with all 1 pods Ready"},
		[4]string{extendedv1alpha1.ConditionMissingReference, "True", extendedv1alpha1.ReasonReferenceNotFound, "ConfigMap/conf"})
	e.Status.Versions, e.Status.Replicas, e.Status.ReadyReplicas, e.Status.CurrentVersion = map[string]bool{"1": true}, 1, 1, 1
	s := &scope{ests: e, orig: e.DeepCopy(), errMessage: "listing StatefulSets: boom"}
	s.merge()
	(&Reconciler{}).applyStatus(s)
	assert.Equal(t, map[string]bool{"1": true}, e.Status.Versions)
	assert.Equal(t, int32(1), e.Status.ReadyReplicas)
	assert.Equal(t, int32(1), e.Status.CurrentVersion)
	assert.Equal(t, int64(3), e.Status.ObservedGeneration)
	assert.True(t, meta.IsStatusConditionTrue(e.Status.Conditions, extendedv1alpha1.ConditionMissingReference))
	ready := meta.FindStatusCondition(e.Status.Conditions, extendedv1alpha1.ConditionReady)
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Equal(t, extendedv1alpha1.ReasonReconcileError, ready.Reason)
	assert.True(t, meta.IsStatusConditionTrue(e.Status.Conditions, extendedv1alpha1.ConditionReconciling))
}
