//go:build integration

package controller

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// kstatus reads the ExtendedStatefulSet as cli-utils' status.Compute (the library behind Flux, kpt and
// kubectl-based deploy tools) does.
func (f *fixture) kstatus() *status.Result {
	f.t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(extendedv1alpha1.GroupVersion.WithKind("ExtendedStatefulSet"))
	require.NoError(f.t, suite.Client.Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: f.name}, u))
	res, err := status.Compute(u)
	require.NoError(f.t, err)
	return res
}

// waitKstatus waits until kstatus reads want, and checks what kstatus relies on: the status and every
// condition carry the object's generation, and at most one of Stalled and Reconciling is True.
func (f *fixture) waitKstatus(want status.Status) {
	f.t.Helper()
	require.EventuallyWithT(f.t, func(c *assert.CollectT) {
		assert.Equal(c, want, f.kstatus().Status)
	}, wait, tick, "kstatus %s", want)
	ests := f.get()
	assert.Equal(f.t, ests.Generation, ests.Status.ObservedGeneration)
	for _, c := range ests.Status.Conditions {
		assert.Equal(f.t, ests.Generation, c.ObservedGeneration, "observedGeneration of condition %s", c.Type)
	}
	assert.False(f.t, meta.IsStatusConditionTrue(ests.Status.Conditions, extendedv1alpha1.ConditionStalled) &&
		meta.IsStatusConditionTrue(ests.Status.Conditions, extendedv1alpha1.ConditionReconciling), "Stalled and Reconciling both True")
}

// waitStalled waits until the ExtendedStatefulSet is Stalled=True with reason, which kstatus reads as
// Failed, and returns the condition's message.
func (f *fixture) waitStalled(reason string) string {
	f.t.Helper()
	f.waitCondition(extendedv1alpha1.ConditionStalled, metav1.ConditionTrue, reason)
	f.waitKstatus(status.FailedStatus)
	return f.condition(extendedv1alpha1.ConditionStalled).Message
}

// cli-utils' status.Compute reads a healthy ExtendedStatefulSet as Current, one rolling a new version
// as InProgress (Reconciling=True) and one whose upgrade failed for good as Failed (Stalled=True), with
// observedGeneration on the status and every condition.
func TestKstatus(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	f.startV1(withJobs(f.newESTS(3, "app:1"), true, false, false))
	f.waitKstatus(status.CurrentStatus)

	f.setImage("app:2")
	f.waitJob("web-pre-v2")
	f.waitCondition(extendedv1alpha1.ConditionReconciling, metav1.ConditionTrue, extendedv1alpha1.ReasonPreUpgradeJobRunning)
	f.waitKstatus(status.InProgressStatus)

	f.setJob("web-pre-v2", true)
	f.waitCondition(extendedv1alpha1.ConditionReconciling, metav1.ConditionTrue, extendedv1alpha1.ReasonCanaryRollout)
	f.waitKstatus(status.InProgressStatus)
	f.setStatus(2, 1)
	f.waitCondition(extendedv1alpha1.ConditionReconciling, metav1.ConditionTrue, extendedv1alpha1.ReasonRollout)
	f.setStatus(2, 3)
	f.waitGone(1)
	f.waitKstatus(status.CurrentStatus)

	f.setImage("app:3")
	f.waitJob("web-pre-v3")
	f.setJob("web-pre-v3", false)
	msg := f.waitStalled(extendedv1alpha1.ReasonJobFailed)
	assert.Contains(t, msg, "web-pre-v3")
	f.waitEvent(extendedv1alpha1.ReasonJobFailed, "web-pre-v3")

	f.setImage("app:4")
	f.waitJob("web-pre-v4")
	f.waitKstatus(status.InProgressStatus)
}

// A referenced ConfigMap that does not exist stalls the ExtendedStatefulSet (kstatus Failed) with one
// Warning Event naming it; once it exists the version starts (InProgress) and runs (Current).
func TestKstatusMissingReference(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	ests := f.newESTS(1, "app:1")
	ests.Spec.Template.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{
		ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}
	f.create(ests)
	assert.Contains(t, f.waitStalled(extendedv1alpha1.ReasonReferenceNotFound), "ConfigMap/settings")
	f.waitEvent(extendedv1alpha1.ReasonReferenceNotFound, "ConfigMap/settings")
	testsupport.NeverWithin(t, 2*time.Second, 100*time.Millisecond, func() bool {
		return testsupport.Occurrences(testsupport.Events(t, suite.Client, f.ns, "ExtendedStatefulSet", f.name, extendedv1alpha1.ReasonReferenceNotFound)) != 1
	}, "one Event for the missing ConfigMap")

	require.NoError(t, suite.Client.Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: f.ns}, Data: map[string]string{"k": "v"}}))
	f.waitSTS(1, func(*assert.CollectT, *appsv1.StatefulSet) {}, "version 1")
	f.waitKstatus(status.InProgressStatus)
	f.setStatus(1, 1)
	f.waitKstatus(status.CurrentStatus)
}

// A template the API server refuses as a StatefulSet (a container name that is no DNS label: the CRD's
// schema cannot say so) stalls the ExtendedStatefulSet with the API server's answer and one Warning
// Event, and the operator does not retry it (no hot loop); a fixed template starts the version.
func TestKstatusInvalidStatefulSet(t *testing.T) {
	var creates atomic.Int64
	startOperator(t, &interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if _, ok := obj.(*appsv1.StatefulSet); ok {
			creates.Add(1)
		}
		return c.Create(ctx, obj, opts...)
	}})
	f := newFixture(t)
	ests := f.newESTS(1, "app:1")
	ests.Spec.Template.Spec.Template.Spec.Containers[0].Name = "Main_Container"
	f.create(ests)
	msg := f.waitStalled(extendedv1alpha1.ReasonInvalidTemplate)
	assert.Contains(t, msg, "spec.template.spec.containers[0].name")
	f.waitEvent(extendedv1alpha1.ReasonInvalidTemplate, "Main_Container")
	attempts := creates.Load()
	testsupport.NeverWithin(t, 3*time.Second, 100*time.Millisecond, func() bool { return creates.Load() != attempts },
		"the refused StatefulSet was created again without a spec change")
	assert.Equal(t, 1, testsupport.Occurrences(testsupport.Events(t, suite.Client, f.ns, "ExtendedStatefulSet", f.name, extendedv1alpha1.ReasonInvalidTemplate)))

	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.Template.Spec.Template.Spec.Containers[0].Name = "main"
	})
	f.waitSTS(1, func(*assert.CollectT, *appsv1.StatefulSet) {}, "version 1 once the template is valid")
	f.waitCondition(extendedv1alpha1.ConditionStalled, metav1.ConditionFalse, "")
	f.setStatus(1, 1)
	f.waitKstatus(status.CurrentStatus)
}

// An API error the operator retries is ReconcileError: Reconciling (kstatus InProgress, not Failed) and
// one Warning Event however many retries fail, then Ready once the API answers again.
func TestKstatusReconcileError(t *testing.T) {
	var failing atomic.Bool
	var failed atomic.Int64
	failing.Store(true)
	startOperator(t, &interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if _, ok := obj.(*appsv1.StatefulSet); ok && failing.Load() {
			failed.Add(1)
			return apierrors.NewInternalError(assert.AnError)
		}
		return c.Create(ctx, obj, opts...)
	}})
	f := newFixture(t)
	f.create(f.newESTS(1, "app:1"))
	f.waitCondition(extendedv1alpha1.ConditionReconciling, metav1.ConditionTrue, extendedv1alpha1.ReasonReconcileError)
	f.waitKstatus(status.InProgressStatus)
	require.Eventually(t, func() bool { return failed.Load() >= 4 }, wait, tick, "the operator retries")
	evs := testsupport.Events(t, suite.Client, f.ns, "ExtendedStatefulSet", f.name, extendedv1alpha1.ReasonReconcileError)
	if assert.Equal(t, 1, testsupport.Occurrences(evs), "one Event for the retried error") {
		assert.Equal(t, corev1.EventTypeWarning, evs[0].Type)
	}

	failing.Store(false)
	f.waitSTS(1, func(*assert.CollectT, *appsv1.StatefulSet) {}, "version 1 once the API answers")
	f.setStatus(1, 1)
	f.waitKstatus(status.CurrentStatus)
	assert.Equal(t, 1, testsupport.Occurrences(testsupport.Events(t, suite.Client, f.ns, "ExtendedStatefulSet", f.name, extendedv1alpha1.ReasonReconcileError)))
}
