//go:build integration

package controller

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// Several checks per step and richer verdicts, against a real Prometheus scraping an exporter the
// test controls.

// promCheck is a spec.checks element against url: no initial delay, 1s period, one pass suffices.
func promCheck(name, url, expr string, mods ...func(*rolloutv1alpha1.NamedCheck)) rolloutv1alpha1.NamedCheck {
	c := rolloutv1alpha1.NamedCheck{Name: name}
	c.InitialDelaySeconds = ptr.To[int32](0)
	c.PeriodSeconds = 1
	c.SuccessThreshold = 1
	c.Query = &rolloutv1alpha1.PrometheusQuery{Expr: expr, URL: url}
	for _, m := range mods {
		m(&c)
	}
	return c
}

// withChecks replaces spec.check (no query: no seed check) by checks.
func withChecks(checks ...rolloutv1alpha1.NamedCheck) func(*rolloutv1alpha1.PhasedRollout) {
	return func(pr *rolloutv1alpha1.PhasedRollout) {
		pr.Spec.Check = rolloutv1alpha1.Check{}
		pr.Spec.Checks = checks
	}
}

// checkStatus returns the record of check name in the current step, or an empty one.
func checkStatus(pr *rolloutv1alpha1.PhasedRollout, name string) rolloutv1alpha1.CheckStatus {
	if st := pr.Status.RollingPodStatus; st != nil {
		for _, cs := range st.Checks {
			if cs.Name == name {
				return cs
			}
		}
	}
	return rolloutv1alpha1.CheckStatus{}
}

// rollToAndWaitRuns starts the rollout to web-r2 from an idle StatefulSet of 2 and waits until check
// name has run n times (tries) in the first step.
func (f *fixture) rollToAndWaitRuns(name string, n int32) *rolloutv1alpha1.PhasedRollout {
	f.t.Helper()
	f.waitPartition(2)
	f.newRevision("web-r2")
	var pr *rolloutv1alpha1.PhasedRollout
	require.Eventually(f.t, func() bool {
		pr = f.rollout()
		return checkStatus(pr, name).TotalChecks >= n
	}, wait, tick, "check %s ran %d times", name, n)
	return pr
}

// promWithApp starts Prometheus scraping an exporter whose series are set, and waits until it has them.
func promWithApp(t *testing.T, series map[string]string) (*exporter, *promServer) {
	t.Helper()
	exp := newExporter(t)
	prom := startPrometheus(t, hostPort(t, exp.srv.URL))
	for k, v := range series {
		exp.set(k, v)
	}
	waitForVerdict(t, Query{URL: prom.URL, Expr: `app_up`, SuccessWhen: rolloutv1alpha1.SuccessWhenDataReturned}, VerdictPass)
	return exp, prom
}

// TestSeveralChecksEveryOneMustPass: two checks, one passing (it stops running once passed), one
// failing on its value (successCondition): the partition does not move and the status shows both;
// once the second passes too, the rollout goes through. Without spec.check's query (checks only).
func TestSeveralChecksEveryOneMustPass(t *testing.T) {
	exp, prom := promWithApp(t, map[string]string{"app_up": "1", `app_errors{pod="web-1"}`: "0", `app_latency_seconds{pod="web-1"}`: "0.9", `app_latency_seconds{pod="web-0"}`: "0.1"})
	startOperator(t, nil)
	f := newFixture(t, 2, 0)
	f.simulateStatefulSetController()
	f.createRollout(withChecks(
		promCheck("errors", prom.URL, `app_errors{pod="{{pod}}"} > 0`),
		promCheck("latency", prom.URL, `app_latency_seconds{pod="{{pod}}"}`, func(c *rolloutv1alpha1.NamedCheck) {
			c.SuccessCondition = "result < 0.5"
		}),
	))
	pr := f.rollToAndWaitRuns("latency", 3)
	assert.Equal(t, int32(2), f.partition(), "the partition did not move")
	errs, lat := checkStatus(pr, "errors"), checkStatus(pr, "latency")
	assert.True(t, errs.Passed)
	assert.Equal(t, rolloutv1alpha1.CheckResultPass, errs.LastResult)
	assert.Equal(t, int32(1), errs.TotalChecks, "a passed check stops running for the rest of the step")
	assert.False(t, lat.Passed)
	assert.Equal(t, rolloutv1alpha1.CheckResultFail, lat.LastResult)
	assert.Contains(t, lat.LastValue, "0.9")
	assert.Equal(t, lat.TotalChecks, lat.TotalFailedChecks)
	assert.GreaterOrEqual(t, lat.ConsecutiveFailedChecks, int32(3))
	assert.Equal(t, rolloutv1alpha1.PhaseRolling, pr.Status.Phase)
	assert.GreaterOrEqual(t, testutil.ToFloat64(checksTotal.WithLabelValues(f.ns, "pr", "fail", "latency")), 3.0, "the metric has the check label")

	exp.set(`app_latency_seconds{pod="web-1"}`, "0.1")
	f.waitPartition(1)
	f.waitRolledTo("web-r2")
}

// TestChecksRunOnTheirOwnPeriods: each check waits its own initial delay and runs on its own period.
func TestChecksRunOnTheirOwnPeriods(t *testing.T) {
	_, prom := promWithApp(t, map[string]string{"app_up": "1"})
	startOperator(t, nil)
	f := newFixture(t, 2, 0)
	f.simulateStatefulSetController()
	failing := func(c *rolloutv1alpha1.NamedCheck) { c.SuccessWhen = rolloutv1alpha1.SuccessWhenDataReturned }
	f.createRollout(withChecks(
		promCheck("fast", prom.URL, `app_missing`, failing),
		promCheck("slow", prom.URL, `app_missing`, failing, func(c *rolloutv1alpha1.NamedCheck) {
			c.InitialDelaySeconds = ptr.To[int32](3)
			c.PeriodSeconds = 6
		}),
	))
	pr := f.rollToAndWaitRuns("slow", 2)
	fast, slow := checkStatus(pr, "fast"), checkStatus(pr, "slow")
	assert.GreaterOrEqual(t, fast.TotalChecks, slow.TotalChecks+2, "fast (period 1s) ran more often than slow (delay 3s, period 6s)")
	assert.GreaterOrEqual(t, slow.LastCheckTime.Sub(pr.Status.RollingPodStatus.PodsReadyTime.Time), 9*time.Second, "slow's second run is at least delay+period after the pods were ready")
	// The step-level counters follow the first check.
	assert.Equal(t, fast.TotalChecks, pr.Status.RollingPodStatus.TotalChecks)
}

// TestSeedCheckWithSuccessConditionAndAnotherCheck: spec.check (named "check" in status) keeps
// working beside spec.checks, with a successCondition over several samples; a check that used up its
// maxTries fails the step and its onFailure message names it.
func TestSeedCheckWithSuccessConditionAndAnotherCheck(t *testing.T) {
	_, prom := promWithApp(t, map[string]string{"app_up": "1", `app_ok{pod="a"}`: "1", `app_ok{pod="b"}`: "1"})
	startOperator(t, nil)
	f := newFixture(t, 2, 0)
	f.simulateStatefulSetController()
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) {
		pr.Spec.Check.SuccessThreshold = 1
		pr.Spec.Check.Query.URL = prom.URL
		pr.Spec.Check.Query.Expr = `app_ok`
		pr.Spec.Check.SuccessCondition = "size(samples) == 2 && samples.all(s, s.value == 1.0)"
		pr.Spec.Checks = []rolloutv1alpha1.NamedCheck{promCheck("never", prom.URL, `app_missing`, func(c *rolloutv1alpha1.NamedCheck) {
			c.SuccessWhen = rolloutv1alpha1.SuccessWhenDataReturned
			c.MaxTries = ptr.To[int32](3)
		})}
	})
	f.waitPartition(2)
	f.newRevision("web-r2")
	pr := f.waitPhase(rolloutv1alpha1.PhaseFailed)
	assert.Equal(t, int32(2), f.partition())
	assert.Contains(t, pr.Status.Message, `check "never" used up maxTries=3`)
	seed, never := checkStatus(pr, rolloutv1alpha1.SeedCheckName), checkStatus(pr, "never")
	assert.True(t, seed.Passed, "spec.check passed: %+v", seed)
	assert.Equal(t, int32(3), never.TotalFailedChecks)
	assert.Equal(t, "check", pr.Status.RollingPodStatus.Checks[0].Name, "spec.check is the first check")
}

// TestNoDataPolicies: under a successCondition, no sample passes (Pass), fails (Fail, counting towards
// maxTries) or pauses the step (Inconclusive: state, Ready False, Stalled, Event, no more checks)
// until the PhasedRollout is edited.
func TestNoDataPolicies(t *testing.T) {
	_, prom := promWithApp(t, map[string]string{"app_up": "1"})
	startOperator(t, nil)
	create := func(t *testing.T, policy rolloutv1alpha1.NoDataPolicy) *fixture {
		f := newFixture(t, 2, 0)
		f.simulateStatefulSetController()
		f.createRollout(withChecks(promCheck("latency", prom.URL, `app_missing`, func(c *rolloutv1alpha1.NamedCheck) {
			c.SuccessCondition = "result < 0.5"
			c.NoDataPolicy = policy
			c.MaxTries = ptr.To[int32](2)
		})))
		f.waitPartition(2)
		f.newRevision("web-r2")
		return f
	}
	t.Run("Pass", func(t *testing.T) {
		create(t, rolloutv1alpha1.NoDataPass).waitRolledTo("web-r2")
	})
	t.Run("Fail", func(t *testing.T) {
		f := create(t, rolloutv1alpha1.NoDataFail)
		pr := f.waitPhase(rolloutv1alpha1.PhaseFailed)
		assert.Equal(t, int32(2), checkStatus(pr, "latency").TotalFailedChecks)
		assert.Equal(t, int32(2), f.partition())
	})
	t.Run("Inconclusive", func(t *testing.T) {
		f := create(t, rolloutv1alpha1.NoDataInconclusive)
		f.waitCondition(rolloutv1alpha1.ConditionReady, "False", rolloutv1alpha1.ReasonCheckInconclusive)
		f.waitCondition(rolloutv1alpha1.ConditionStalled, "True", rolloutv1alpha1.ReasonCheckInconclusive)
		pr := f.rollout()
		assert.Equal(t, rolloutv1alpha1.StepInconclusive, pr.Status.RollingPodStatus.Status)
		cs := checkStatus(pr, "latency")
		assert.Equal(t, rolloutv1alpha1.CheckResultInconclusive, cs.LastResult)
		assert.Equal(t, int32(0), cs.TotalChecks, "an inconclusive run is not a try")
		f.waitEventReason("pr", rolloutv1alpha1.ReasonCheckInconclusive)
		time.Sleep(2500 * time.Millisecond) // 2.5 periods: no check runs while inconclusive
		pr = f.rollout()
		assert.Equal(t, cs.LastCheckTime, checkStatus(pr, "latency").LastCheckTime, "no check ran")
		assert.Equal(t, rolloutv1alpha1.StepInconclusive, pr.Status.RollingPodStatus.Status)
		assert.Equal(t, int32(2), f.partition())
		assert.Equal(t, rolloutv1alpha1.PhaseRolling, pr.Status.Phase)
		// Editing the PhasedRollout goes on: here, no data now passes.
		f.updateRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Checks[0].NoDataPolicy = rolloutv1alpha1.NoDataPass })
		f.waitRolledTo("web-r2")
	})
}

// TestErrorPolicies: with Prometheus unreachable, CountAsFailure (the default) uses up maxTries and
// fails the step; Pause counts nothing, waits in state CheckError (Ready False, Event) and goes on by
// itself once Prometheus answers again.
func TestErrorPolicies(t *testing.T) {
	_, prom := promWithApp(t, map[string]string{"app_up": "1"})
	startOperator(t, nil)
	create := func(t *testing.T, policy rolloutv1alpha1.ErrorPolicy) *fixture {
		f := newFixture(t, 2, 0)
		f.simulateStatefulSetController()
		// vector(1) answers one sample as soon as Prometheus answers, scraped or not.
		f.createRollout(withChecks(promCheck("up", prom.URL, `vector(1)`, func(c *rolloutv1alpha1.NamedCheck) {
			c.SuccessWhen = rolloutv1alpha1.SuccessWhenDataReturned
			c.ErrorPolicy = policy
			c.MaxTries = ptr.To[int32](2)
		})))
		f.waitPartition(2)
		return f
	}
	fCount := create(t, "")
	fPause := create(t, rolloutv1alpha1.ErrorPause)
	prom.stop()
	fCount.newRevision("web-r2")
	fPause.newRevision("web-r2")

	t.Run("CountAsFailure", func(t *testing.T) {
		f := fCount
		f.t = t
		pr := f.waitPhase(rolloutv1alpha1.PhaseFailed)
		cs := checkStatus(pr, "up")
		assert.Equal(t, rolloutv1alpha1.CheckResultError, cs.LastResult)
		assert.Equal(t, int32(2), cs.TotalFailedChecks)
		assert.Contains(t, pr.Status.LastError, "unreachable")
		assert.Equal(t, int32(2), f.partition())
	})
	t.Run("Pause", func(t *testing.T) {
		f := fPause
		f.t = t
		f.waitCondition(rolloutv1alpha1.ConditionReady, "False", rolloutv1alpha1.ReasonCheckError)
		f.waitEventReason("pr", rolloutv1alpha1.ReasonCheckError)
		var pr *rolloutv1alpha1.PhasedRollout
		require.Eventually(t, func() bool {
			pr = f.rollout()
			cs := checkStatus(pr, "up")
			return cs.LastCheckTime != nil && pr.Status.RollingPodStatus.LastCheckTime != nil &&
				cs.LastCheckTime.Sub(pr.Status.RollingPodStatus.PodsReadyTime.Time) >= 3*time.Second
		}, wait, tick, "the check retried for more than maxTries periods")
		cs := checkStatus(pr, "up")
		assert.Equal(t, rolloutv1alpha1.CheckResultError, cs.LastResult)
		assert.Equal(t, int32(0), cs.TotalChecks, "an error under Pause is not a try")
		assert.Equal(t, rolloutv1alpha1.StepCheckError, pr.Status.RollingPodStatus.Status)
		assert.Equal(t, rolloutv1alpha1.PhaseRolling, pr.Status.Phase, "not Failed")
		assert.True(t, metaTrue(pr, rolloutv1alpha1.ConditionReconciling), "it goes on by itself: Reconciling")
		assert.Equal(t, int32(2), f.partition())
		prom.start()
		defer func() {
			if t.Failed() {
				pr := f.rollout()
				t.Logf("status: %+v %+v %+v", pr.Status, *pr.Status.RollingPodStatus, pr.Status.RollingPodStatus.Checks)
			}
		}()
		f.waitRolledTo("web-r2")
	})
}

// TestInvalidSuccessConditionStallsAtOnce: a successCondition that does not compile (CEL cannot
// compile CEL, so the API server accepts it) is reported at once, before any rollout: Stalled with the
// compiler's message, a Warning Event, the StatefulSet untouched; so is an invalid query of a
// spec.checks element. Fixing them clears it.
func TestInvalidSuccessConditionStallsAtOnce(t *testing.T) {
	startOperator(t, newFakeChecker(VerdictPass))
	f := newFixture(t, 2, 0)
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Check.SuccessCondition = "result <" })
	c := f.waitCondition(rolloutv1alpha1.ConditionStalled, "True", rolloutv1alpha1.ReasonInvalidSuccessCondition)
	assert.Contains(t, c.Message, "spec.check.successCondition does not compile")
	assert.Contains(t, c.Message, "Syntax error", "the compiler's own message")
	assert.False(t, metaTrue(f.rollout(), rolloutv1alpha1.ConditionReady))
	f.waitOneWarning(rolloutv1alpha1.ReasonInvalidSuccessCondition, "Syntax error")
	_, annotated := f.sts().Annotations[rolloutv1alpha1.ManagedByAnnotation]
	assert.False(t, annotated, "the StatefulSet is untouched")

	f.updateRollout(func(pr *rolloutv1alpha1.PhasedRollout) {
		pr.Spec.Check.SuccessCondition = "result < 1"
		pr.Spec.Checks = []rolloutv1alpha1.NamedCheck{promCheck("latency", "prom:9090", `latency{`)}
	})
	c = f.waitCondition(rolloutv1alpha1.ConditionStalled, "True", rolloutv1alpha1.ReasonInvalidQuery)
	assert.Contains(t, c.Message, "spec.checks[latency].query.expr is not valid PromQL")

	f.updateRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Checks[0].Query.Expr = `latency` })
	f.waitCondition(rolloutv1alpha1.ConditionStalled, "False", string(rolloutv1alpha1.PhaseUpdated))
	f.waitPartition(2)
}

// TestRollbackWinsAmongFailingChecks: two checks use up their maxTries in the same step, one with
// onFailure Pause, one with Rollback: the step fails, names both, and the template is rolled back.
func TestRollbackWinsAmongFailingChecks(t *testing.T) {
	startOperator(t, newFakeChecker(VerdictFail))
	f := newFixture(t, 2, 0)
	f.simulateStatefulSetController()
	f.createCurrentRevision()
	tries := func(c *rolloutv1alpha1.NamedCheck) { c.MaxTries = ptr.To[int32](2) }
	f.createRollout(withChecks(
		promCheck("pause", "prom:9090", "a", tries),
		promCheck("rollback", "prom:9090", "b", tries, func(c *rolloutv1alpha1.NamedCheck) { c.OnFailure = rolloutv1alpha1.OnFailureRollback }),
	))
	f.waitPartition(2)
	f.setImage("app:2")
	f.newRevision("web-r2")
	pr := f.waitPhase(rolloutv1alpha1.PhaseFailed)
	assert.Contains(t, pr.Status.Message, `check "pause" used up maxTries=2`)
	assert.Contains(t, pr.Status.Message, `check "rollback" used up maxTries=2`)
	assert.Contains(t, pr.Status.Message, "set back to revision web-r1")
	assert.Equal(t, "app:1", f.sts().Spec.Template.Spec.Containers[0].Image)
	assert.Equal(t, int32(2), f.partition())
}

// TestSeedOnlySpecReportsItsCheck: a spec with only spec.check runs as before (the step-level
// counters) and also reports it as the check "check" in status.rollingPodStatus.checks.
func TestSeedOnlySpecReportsItsCheck(t *testing.T) {
	checker := newFakeChecker(VerdictFail)
	startOperator(t, checker)
	f := newFixture(t, 2, 0)
	f.simulateStatefulSetController()
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Check.MaxTries = ptr.To[int32](3) })
	f.waitPartition(2)
	f.newRevision("web-r2")
	pr := f.waitPhase(rolloutv1alpha1.PhaseFailed)
	st := pr.Status.RollingPodStatus
	require.Len(t, st.Checks, 1)
	cs := st.Checks[0]
	assert.Equal(t, rolloutv1alpha1.SeedCheckName, cs.Name)
	assert.Equal(t, rolloutv1alpha1.CheckResultFail, cs.LastResult)
	assert.Equal(t, "fake fail", cs.LastValue)
	assert.Equal(t, int32(3), st.TotalChecks)
	assert.Equal(t, st.TotalChecks, cs.TotalChecks)
	assert.Equal(t, st.TotalFailedChecks, cs.TotalFailedChecks)
	assert.Equal(t, st.ConsecutiveFailedChecks, cs.ConsecutiveFailedChecks)
	assert.Equal(t, st.LastCheckTime, cs.LastCheckTime)
	assert.False(t, cs.Passed)
	assert.Nil(t, st.PodsReadyTime, "the seed path is unchanged: no podsReadyTime")
	assert.NotEmpty(t, checker.recorded())
}

// waitOneWarning waits until "pr" has exactly one Warning Event with reason, its note containing note.
func (f *fixture) waitOneWarning(reason, note string) {
	f.t.Helper()
	require.EventuallyWithT(f.t, func(c *assert.CollectT) {
		evs := testsupport.Events(f.t, suite.Client, f.ns, "PhasedRollout", "pr", reason)
		if assert.Len(c, evs, 1) {
			assert.Equal(c, corev1.EventTypeWarning, evs[0].Type)
			assert.Contains(c, evs[0].Note, note)
		}
	}, wait, tick, "%s Event", reason)
}

// createCurrentRevision creates the ControllerRevision web-r1 of the fixture's template (image
// app:1), the one a rollback re-applies.
func (f *fixture) createCurrentRevision() {
	f.t.Helper()
	require.NoError(f.t, suite.Client.Create(context.Background(), &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: "web-r1", Namespace: f.ns},
		Data:       runtime.RawExtension{Raw: []byte(`{"spec":{"template":{"$patch":"replace","metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"app","image":"app:1"}]}}}}`)},
		Revision:   1,
	}))
}

// setImage changes the StatefulSet's template (the test then plays the new revision, newRevision).
func (f *fixture) setImage(image string) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sts := f.sts()
		sts.Spec.Template.Spec.Containers[0].Image = image
		return suite.Client.Update(context.Background(), sts)
	}))
}

// TestWebhookAmongChecks: a checks element may be a webhook gate instead of a query; the step waits for
// both the query and the gate, and the gate is called with its own name.
func TestWebhookAmongChecks(t *testing.T) {
	_, prom := promWithApp(t, map[string]string{"app_up": "1"})
	var open atomic.Bool
	g := newGate(t, func(w http.ResponseWriter, _ *http.Request) {
		if !open.Load() {
			w.WriteHeader(http.StatusConflict) // e.g. a backup is running
		}
	})
	startOperator(t, nil)
	f := newFixture(t, 2, 0)
	f.simulateStatefulSetController()
	gateCheck := rolloutv1alpha1.NamedCheck{Name: "no-backup"}
	gateCheck.InitialDelaySeconds = ptr.To[int32](0)
	gateCheck.PeriodSeconds = 1
	gateCheck.SuccessThreshold = 1
	gateCheck.Webhook = &rolloutv1alpha1.WebhookCheck{URL: g.srv.URL + "/gate", TimeoutSeconds: 5}
	f.createRollout(withChecks(promCheck("errors", prom.URL, `app_errors{pod="{{pod}}"} > 0`), gateCheck))
	pr := f.rollToAndWaitRuns("no-backup", 3)
	assert.Equal(t, int32(2), f.partition(), "a refusing gate holds the step")
	assert.True(t, checkStatus(pr, "errors").Passed, "the query check passed")
	gate := checkStatus(pr, "no-backup")
	assert.False(t, gate.Passed)
	assert.Equal(t, rolloutv1alpha1.CheckResultFail, gate.LastResult)
	calls := g.recorded()
	require.NotEmpty(t, calls)
	assert.Equal(t, "no-backup", calls[0].payload.CheckName, "the payload names the checks element")

	open.Store(true)
	f.waitRolledTo("web-r2")
}
