//go:build integration

package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// condition returns the condition t of the PhasedRollout "pr" of f, or an empty one.
func (f *fixture) condition(t string) metav1.Condition {
	c := meta.FindStatusCondition(f.rollout().Status.Conditions, t)
	if c == nil {
		return metav1.Condition{}
	}
	return *c
}

// waitCondition waits until the condition t of "pr" has status and reason, at the current generation.
func (f *fixture) waitCondition(t, status, reason string) metav1.Condition {
	f.t.Helper()
	var c metav1.Condition
	require.Eventually(f.t, func() bool {
		pr := f.rollout()
		c = f.condition(t)
		return string(c.Status) == status && c.Reason == reason && c.ObservedGeneration == pr.Generation && pr.Status.ObservedGeneration == pr.Generation
	}, wait, tick, "condition %s=%s (%s)", t, status, reason)
	return c
}

// annotate sets the StatefulSet's ownership annotation to owner, as a PhasedRollout that is gone left it.
func (f *fixture) annotate(owner string) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sts := f.sts()
		if sts.Annotations == nil {
			sts.Annotations = map[string]string{}
		}
		sts.Annotations[rolloutv1alpha1.ManagedByAnnotation] = owner
		return suite.Client.Update(context.Background(), sts)
	}))
}

// setOnDelete sets the StatefulSet's updateStrategy to OnDelete, which no partition can hold.
func (f *fixture) setOnDelete() {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sts := f.sts()
		sts.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
		return suite.Client.Update(context.Background(), sts)
	}))
}

// An invalid PromQL query (or a URL without a host) is reported at once, before any rollout: Stalled
// with the parser's message, Ready False, one Warning Event, and the StatefulSet untouched. Fixing the
// query clears it and the PhasedRollout takes the StatefulSet over.
func TestInvalidQueryStallsAtOnce(t *testing.T) {
	startOperator(t, newFakeChecker(VerdictPass))
	f := newFixture(t, 2, 0)
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Check.Query.Expr = `invalid_promql{` })
	c := f.waitCondition(rolloutv1alpha1.ConditionStalled, "True", rolloutv1alpha1.ReasonInvalidQuery)
	assert.Contains(t, c.Message, "spec.check.query.expr is not valid PromQL")
	assert.Contains(t, c.Message, "unexpected end of input", "the parser's own message")
	assert.False(t, metaTrue(f.rollout(), rolloutv1alpha1.ConditionReady))
	assert.False(t, metaTrue(f.rollout(), rolloutv1alpha1.ConditionReconciling))
	f.waitOneWarning(rolloutv1alpha1.ReasonInvalidQuery, "unexpected end of input")
	before := f.sts()
	testsupport.NeverWithin(t, 2*time.Second, 100*time.Millisecond, func() bool {
		sts := f.sts()
		_, annotated := sts.Annotations[rolloutv1alpha1.ManagedByAnnotation]
		return annotated || sts.ResourceVersion != before.ResourceVersion
	}, "the StatefulSet was touched while the query is invalid")

	// Another invalid query is another Event.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pr := f.rollout()
		pr.Spec.Check.Query.Expr = `rate(errors[5m]`
		return suite.Client.Update(context.Background(), pr)
	}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Len(c, testsupport.Events(t, suite.Client, f.ns, "PhasedRollout", "pr", rolloutv1alpha1.ReasonInvalidQuery), 2)
	}, wait, tick, "a second InvalidQuery Event")

	// A URL without a host is refused by the API server itself (the CRD's CEL rule names the field); the
	// operator's own InvalidURL check is the fallback for objects stored before the rule
	// (TestCheckSpecReportsAURLWithoutHost).
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pr := f.rollout()
		pr.Spec.Check.Query.Expr = `errors{pod="{{pod}}", ordinal="{{ordinal}}"} > 0`
		pr.Spec.Check.Query.URL = "http://"
		return suite.Client.Update(context.Background(), pr)
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.check.query.url")

	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pr := f.rollout()
		pr.Spec.Check.Query.Expr = `errors{pod="{{pod}}", ordinal="{{ordinal}}"} > 0`
		pr.Spec.Check.Query.URL = "prom:9090"
		return suite.Client.Update(context.Background(), pr)
	}))
	f.waitCondition(rolloutv1alpha1.ConditionStalled, "False", string(rolloutv1alpha1.PhaseUpdated))
	f.waitPartition(2)
	assert.True(t, metaTrue(f.rollout(), rolloutv1alpha1.ConditionReady))
	assert.Equal(t, "pr", f.sts().Annotations[rolloutv1alpha1.ManagedByAnnotation])
	assert.Len(t, testsupport.Events(t, suite.Client, f.ns, "PhasedRollout", "pr", rolloutv1alpha1.ReasonInvalidQuery), 2, "one Event per transition")
}

// A query made invalid during a rollout stops it where it is: no check runs and the partition does not
// move although the checks would pass; fixing the query resumes it.
func TestInvalidQueryMidRolloutFreezesThePartition(t *testing.T) {
	checker := newFakeChecker(VerdictPass)
	startOperator(t, checker)
	f := newFixture(t, 3, 0)
	f.simulateStatefulSetController()
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Check.InitialDelaySeconds = ptr.To[int32](3) })
	f.waitPartition(3)
	f.newRevision("web-r2")
	f.waitPartition(2)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pr := f.rollout()
		pr.Spec.Check.Query.Expr = `sum(rate(errors[5m]) > `
		return suite.Client.Update(context.Background(), pr)
	}))
	f.waitCondition(rolloutv1alpha1.ConditionStalled, "True", rolloutv1alpha1.ReasonInvalidQuery)
	checks := len(checker.recorded())
	testsupport.NeverWithin(t, 3*time.Second, 100*time.Millisecond, func() bool {
		return f.partition() != 2 || len(checker.recorded()) != checks
	}, "the partition moved or a check ran while the query is invalid")
	assert.Equal(t, rolloutv1alpha1.PhaseRolling, f.rollout().Status.Phase, "the phase stays: nothing was done")
	assert.False(t, metaTrue(f.rollout(), rolloutv1alpha1.ConditionReconciling))

	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pr := f.rollout()
		pr.Spec.Check.Query.Expr = `sum(rate(errors[5m])) > 0`
		return suite.Client.Update(context.Background(), pr)
	}))
	f.waitPartition(0)
	f.waitPhase(rolloutv1alpha1.PhaseUpdated)
}

// Pods returning to the current revision (the template was reverted) are a waiting state with Ready
// True: an Event says why the partition is held, once.
func TestPodsReturningHaveAnEvent(t *testing.T) {
	startOperator(t, newFakeChecker(VerdictPass))
	f := newFixture(t, 2, 0)
	f.setPodRevision("web-1", "web-r2")
	f.createRollout()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		evs := testsupport.Events(t, suite.Client, f.ns, "PhasedRollout", "pr", rolloutv1alpha1.EventWaitForPodsToReturn)
		if assert.Len(c, evs, 1) {
			assert.Contains(c, evs[0].Note, "pods are returning to revision web-r1")
		}
	}, wait, tick, "WaitForPodsToReturn Event")
	testsupport.NeverWithin(t, 2*time.Second, 100*time.Millisecond, func() bool {
		return len(testsupport.Events(t, suite.Client, f.ns, "PhasedRollout", "pr", rolloutv1alpha1.EventWaitForPodsToReturn)) != 1
	}, "the Event repeated")
	f.setPodRevision("web-1", "web-r1")
	require.Eventually(t, func() bool { return strings.HasPrefix(f.rollout().Status.Message, "idle") }, wait, tick, "idle once the pod is back")
}

// A StatefulSet whose ownership annotation names a PhasedRollout that does not exist, or one that
// targets another StatefulSet, is taken over (with an Event); one that exists and targets it keeps it,
// and the PhasedRollout that cannot manage it says so in one Event and Stalled.
func TestStaleOwnershipIsTakenOver(t *testing.T) {
	startOperator(t, newFakeChecker(VerdictPass))

	for _, tc := range []struct {
		name     string
		previous func(f *fixture) // leaves the StatefulSet annotated with a stale owner
		note     string
		// orHandedBack: the operator also hands back a StatefulSet whose owner does not exist (it
		// finds the owner gone through the StatefulSet's watch), which may come first: then the
		// StatefulSet has no owner when the PhasedRollout starts managing it, and nothing is taken over.
		orHandedBack bool
	}{
		{"owner does not exist", func(f *fixture) { f.annotate("gone") }, "gone, which does not exist", true},
		{"owner targets another StatefulSet", func(f *fixture) {
			f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Name, pr.Spec.TargetRef = "other", "elsewhere" })
			f.annotate("other")
		}, "other, which targets StatefulSet elsewhere", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 2, 0)
			tc.previous(f)
			f.createRollout()
			f.waitPhase(rolloutv1alpha1.PhaseUpdated)
			f.waitPartition(2)
			assert.Equal(t, "pr", f.sts().Annotations[rolloutv1alpha1.ManagedByAnnotation])
			evs := testsupport.Events(t, suite.Client, f.ns, "PhasedRollout", "pr", rolloutv1alpha1.EventOwnershipTakenOver)
			if tc.orHandedBack && len(evs) == 0 {
				assert.Len(t, testsupport.Events(t, suite.Client, f.ns, "StatefulSet", "web", rolloutv1alpha1.EventPartitionReleased), 1,
					"neither taken over nor handed back")
				return
			}
			require.Len(t, evs, 1)
			assert.Contains(t, evs[0].Note, tc.note)
		})
	}

	t.Run("owner exists and targets it", func(t *testing.T) {
		f := newFixture(t, 2, 0)
		f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Name = "first" })
		require.Eventually(t, func() bool { return f.sts().Annotations[rolloutv1alpha1.ManagedByAnnotation] == "first" }, wait, tick)
		f.createRollout()
		pr := f.waitPhase(rolloutv1alpha1.PhaseErrorCannotManage)
		assert.Contains(t, pr.Status.Message, "managed by PhasedRollout first")
		f.waitCondition(rolloutv1alpha1.ConditionStalled, "True", string(rolloutv1alpha1.PhaseErrorCannotManage))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			evs := testsupport.Events(t, suite.Client, f.ns, "PhasedRollout", "pr", rolloutv1alpha1.EventCannotManage)
			if assert.Len(c, evs, 1) {
				assert.Equal(c, corev1.EventTypeWarning, evs[0].Type)
				assert.Contains(c, evs[0].Note, "managed by PhasedRollout first")
			}
		}, wait, tick, "CannotManage Event")
		testsupport.NeverWithin(t, 2*time.Second, 100*time.Millisecond, func() bool {
			return f.sts().Annotations[rolloutv1alpha1.ManagedByAnnotation] != "first" ||
				len(testsupport.Events(t, suite.Client, f.ns, "PhasedRollout", "pr", rolloutv1alpha1.EventCannotManage)) != 1 ||
				len(testsupport.Events(t, suite.Client, f.ns, "PhasedRollout", "pr", rolloutv1alpha1.EventOwnershipTakenOver)) != 0
		}, "taken over from an owner that targets it, or the Event repeated")
	})
}

// kstatusOf runs cli-utils' status.Compute, the library behind Flux, kpt and kubectl-based deploy
// tools, on the PhasedRollout "pr" of f.
func (f *fixture) kstatusOf() status.Status {
	f.t.Helper()
	pr := f.rollout()
	pr.APIVersion, pr.Kind = rolloutv1alpha1.GroupVersion.String(), "PhasedRollout"
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pr)
	require.NoError(f.t, err)
	res, err := status.Compute(&unstructured.Unstructured{Object: m})
	require.NoError(f.t, err)
	return res.Status
}

// cli-utils' kstatus reads a healthy PhasedRollout as Current, a rolling one as InProgress and a
// broken one (maxTries used up, StatefulSet missing, OnDelete target, invalid query) as Failed.
func TestKstatus(t *testing.T) {
	startOperator(t, newFakeChecker(VerdictFail))
	waitKstatus := func(f *fixture, want status.Status) {
		t.Helper()
		require.Eventually(t, func() bool { return f.kstatusOf() == want }, wait, tick, "kstatus %s (status %+v)", want, f.rollout().Status)
	}

	healthy := newFixture(t, 2, 0)
	healthy.createRollout()
	healthy.waitPhase(rolloutv1alpha1.PhaseUpdated)
	waitKstatus(healthy, status.CurrentStatus)

	// A new revision with checks that always fail: still rolling with maxTries to spare, Failed once
	// they are used up.
	rollFailing := func(maxTries int32, phase rolloutv1alpha1.PhasedRolloutPhase) *fixture {
		f := newFixture(t, 2, 0)
		f.simulateStatefulSetController()
		f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Check.MaxTries = ptr.To(maxTries) })
		f.waitPartition(2)
		f.newRevision("web-r2")
		f.waitPhase(phase)
		return f
	}
	rolling := rollFailing(1000, rolloutv1alpha1.PhaseRolling)
	waitKstatus(rolling, status.InProgressStatus)
	assert.True(t, metaTrue(rolling.rollout(), rolloutv1alpha1.ConditionReconciling))
	waitKstatus(rollFailing(2, rolloutv1alpha1.PhaseFailed), status.FailedStatus)

	missing := newFixture(t, 1, 0)
	missing.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.TargetRef = "missing" })
	missing.waitPhase(rolloutv1alpha1.PhaseErrorSTSNotFound)
	waitKstatus(missing, status.FailedStatus)

	onDelete := newFixture(t, 1, 0)
	onDelete.setOnDelete()
	onDelete.createRollout()
	onDelete.waitPhase(rolloutv1alpha1.PhaseErrorCannotManage)
	waitKstatus(onDelete, status.FailedStatus)

	invalid := newFixture(t, 1, 0)
	invalid.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Check.Query.Expr = `invalid_promql{` })
	waitKstatus(invalid, status.FailedStatus)
}
