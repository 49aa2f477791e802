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

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// An ExtendedStatefulSet that waits says why in an Event, once per entry into the waiting state: a
// missing ConfigMap (Warning), then a canary that is not Ready yet (Normal).
func TestWaitingStatesHaveEvents(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	ests := f.newESTS(1, "app:1")
	ests.Spec.Template.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{
		ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "later"}, Key: "x"}}}}
	f.create(ests)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		evs := testsupport.Events(t, suite.Client, f.ns, "ExtendedStatefulSet", f.name, extendedv1alpha1.ReasonReferenceNotFound)
		if assert.Len(c, evs, 1) {
			assert.Equal(c, corev1.EventTypeWarning, evs[0].Type)
		}
	}, wait, tick, "ReferenceNotFound Event")
	testsupport.NeverWithin(t, 2*time.Second, 100*time.Millisecond, func() bool {
		evs := testsupport.Events(t, suite.Client, f.ns, "ExtendedStatefulSet", f.name, extendedv1alpha1.ReasonReferenceNotFound)
		return len(evs) != 1 || evs[0].Series != nil
	}, "the Event was recorded again while the state did not change")

	require.NoError(t, suite.Client.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "later", Namespace: f.ns}, Data: map[string]string{"x": "1"}}))
	f.waitSTS(1, func(c *assert.CollectT, _ *appsv1.StatefulSet) {}, "version 1")
	f.setStatus(1, 1)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")

	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.Template.Spec.Template.Spec.Containers[0].Image = "app:2"
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		evs := testsupport.Events(t, suite.Client, f.ns, "ExtendedStatefulSet", f.name, extendedv1alpha1.ReasonCanaryRollout)
		if assert.Len(c, evs, 1) {
			assert.Equal(c, corev1.EventTypeNormal, evs[0].Type)
			assert.True(c, strings.Contains(evs[0].Note, "canaries Ready"), evs[0].Note)
		}
	}, wait, tick, "CanaryRollout Event while the canary is not Ready")
}

// A referenced ConfigMap deleted while an upgrade is under way does not change what Ready waits for
// (the canary) and does not stall the upgrade, but MissingReference turning True has its own Warning
// Event naming the ConfigMap, once.
func TestMissingReferenceDuringUpgradeHasAnEvent(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	ests := f.confESTS(3, "v")
	f.startV1(ests)
	f.setImage("app:2")
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionFalse, extendedv1alpha1.ReasonCanaryRollout)

	require.NoError(t, suite.Client.Delete(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "conf", Namespace: f.ns}}))
	f.waitCondition(extendedv1alpha1.ConditionMissingReference, metav1.ConditionTrue, extendedv1alpha1.ReasonReferenceNotFound)
	f.waitEvent(extendedv1alpha1.ReasonReferenceNotFound, "ConfigMap/conf")
	assert.Equal(t, extendedv1alpha1.ReasonCanaryRollout, f.condition(extendedv1alpha1.ConditionReady).Reason)
	assert.Equal(t, metav1.ConditionFalse, f.condition(extendedv1alpha1.ConditionStalled).Status, "the canary may still become Ready")
	testsupport.NeverWithin(t, 2*time.Second, 100*time.Millisecond, func() bool {
		return testsupport.Occurrences(testsupport.Events(t, suite.Client, f.ns, "ExtendedStatefulSet", f.name, extendedv1alpha1.ReasonReferenceNotFound)) != 1
	}, "one Event for the missing ConfigMap")
}
