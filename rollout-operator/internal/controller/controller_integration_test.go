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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// newRevision plays a template change: the StatefulSet controller computes a new update revision.
func (f *fixture) newRevision(rev string) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sts := f.sts()
		sts.Status.ObservedGeneration = sts.Generation
		sts.Status.UpdateRevision = rev
		return suite.Client.Status().Update(context.Background(), sts)
	}))
}

// TestRollsOnePodAtATimeOnlyAfterPassingChecks: idle partition = replicas, owned by the operator's
// field manager; a new revision rolls 3→2→1→0, every move after successThreshold passes, the last pod
// is checked too, and the queries name the pod just rolled.
func TestRollsOnePodAtATimeOnlyAfterPassingChecks(t *testing.T) {
	checker := newFakeChecker(VerdictPass)
	startOperator(t, checker)
	f := newFixture(t, 3, 0)
	log := f.simulateStatefulSetController()
	f.createRollout()
	f.waitPartition(3)
	f.waitPhase(rolloutv1alpha1.PhaseUpdated)
	sts := f.sts()
	assert.Equal(t, "pr", sts.Annotations[rolloutv1alpha1.ManagedByAnnotation])
	owned := false
	for _, mf := range sts.ManagedFields {
		if mf.Manager == rolloutv1alpha1.FieldManager && mf.FieldsV1 != nil && strings.Contains(string(mf.FieldsV1.Raw), `"f:partition"`) {
			owned = true
		}
	}
	assert.True(t, owned, "the field manager %s owns the partition", rolloutv1alpha1.FieldManager)
	assert.Empty(t, checker.recorded(), "no check while idle")

	started := time.Now()
	f.newRevision("web-r2")
	pr := f.waitRolledTo("web-r2")
	assert.NotNil(t, pr.Status.RolloutEndTime)
	// Back to idle: the partition is held at replicas again.
	f.waitPartition(3)
	require.Eventually(t, func() bool { v, _ := log.get(); return len(v) >= 5 }, wait, tick, "the simulator saw the last change")
	values, at := log.get()
	assert.Equal(t, []int32{3, 2, 1, 0, 3}, values)
	// Each move needs successThreshold=2 checks 1s apart: moves are at least 1s apart.
	for i := 1; i < 4 && i < len(at); i++ {
		assert.GreaterOrEqual(t, at[i].Sub(at[i-1]), 800*time.Millisecond, "spacing of move %d", i)
	}
	pods := map[string]int{}
	for _, q := range checker.recorded() {
		pods[q.Expr]++
	}
	// Four steps (before web-2, then web-2, web-1, web-0 after their roll), two passes each.
	assert.Equal(t, map[string]int{`errors{pod="web-2"} > 0`: 4, `errors{pod="web-1"} > 0`: 2, `errors{pod="web-0"} > 0`: 2}, pods)
	f.waitEventReason("pr", rolloutv1alpha1.EventRolloutStarted)
	f.waitEventReason("pr", rolloutv1alpha1.EventRolloutCompleted)
	t.Logf("rollout of 3 pods took %s", time.Since(started))
}

// TestFailingChecksStopTheRollout: after maxTries failed checks the phase is Failed with a
// condition and an Event, and the partition does not move; editing the PhasedRollout retries.
func TestFailingChecksStopTheRollout(t *testing.T) {
	checker := newFakeChecker(VerdictFail)
	startOperator(t, checker)
	f := newFixture(t, 3, 0)
	log := f.simulateStatefulSetController()
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Check.MaxTries = ptr.To[int32](3) })
	f.waitPartition(3)
	f.newRevision("web-r2")
	pr := f.waitPhase(rolloutv1alpha1.PhaseFailed)
	assert.Equal(t, int32(3), f.partition())
	assert.Equal(t, int32(3), pr.Status.RollingPodStatus.TotalChecks)
	assert.Equal(t, int32(3), pr.Status.RollingPodStatus.TotalFailedChecks)
	assert.True(t, metaTrue(pr, rolloutv1alpha1.ConditionDegraded))
	f.waitEventReason("pr", rolloutv1alpha1.EventRolloutFailed)
	time.Sleep(2 * time.Second)
	assert.Len(t, checker.recorded(), 3, "no check after Failed")
	values, _ := log.get()
	assert.Equal(t, []int32{3}, values)

	// Errors (Prometheus down) never pass either; fixing the metric and editing the spec retries.
	checker.set(VerdictPass)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pr := f.rollout()
		pr.Spec.Check.MaxTries = ptr.To[int32](5)
		return suite.Client.Update(context.Background(), pr)
	}))
	f.waitPhase(rolloutv1alpha1.PhaseUpdated)
}

// TestPrometheusErrorsNeverPass: with the checker erroring, nothing moves; status says why.
func TestPrometheusErrorsNeverPass(t *testing.T) {
	checker := newFakeChecker(VerdictError)
	startOperator(t, checker)
	f := newFixture(t, 2, 0)
	f.simulateStatefulSetController()
	f.createRollout()
	f.waitPartition(2)
	f.newRevision("web-r2")
	pr := f.waitCheckErrors(3)
	assert.Equal(t, rolloutv1alpha1.StepPrometheusError, pr.Status.RollingPodStatus.Status)
	assert.Contains(t, pr.Status.LastError, "fake error")
	assert.Equal(t, int32(2), f.partition())
}

// waitCheckErrors waits for the step to be in state PrometheusError (its last check could not be
// evaluated) after at least n checks, and returns the PhasedRollout.
func (f *fixture) waitCheckErrors(n int32) *rolloutv1alpha1.PhasedRollout {
	f.t.Helper()
	var pr *rolloutv1alpha1.PhasedRollout
	require.Eventually(f.t, func() bool {
		pr = f.rollout()
		return pr.Status.RollingPodStatus != nil && pr.Status.RollingPodStatus.Status == rolloutv1alpha1.StepPrometheusError &&
			pr.Status.RollingPodStatus.TotalChecks >= n
	}, wait, tick, "a step whose checks could not be evaluated %d times", n)
	return pr
}

// TestRestartBetweenPartitionAndStatusDoesNotMoveTwice: the status records a step at partition 3
// one pass short of the threshold, but the partition is already 2 (the operator died after writing
// it): a new step starts with no passes, and the next move needs successThreshold new passes.
func TestRestartBetweenPartitionAndStatusDoesNotMoveTwice(t *testing.T) {
	checker := newFakeChecker(VerdictFail)
	stop := startOperator(t, checker)
	f := newFixture(t, 3, 0)
	log := f.simulateStatefulSetController()
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Check.SuccessThreshold = 3 })
	f.waitPartition(3)
	f.newRevision("web-r2")
	f.waitPhase(rolloutv1alpha1.PhaseRolling)
	stop()
	// Forge the crash: status says partition 3 with 2 of 3 passes; the StatefulSet says 2.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pr := f.rollout()
		pr.Status.RollingPodStatus = &rolloutv1alpha1.RollingPodStatus{Partition: ptr.To[int32](3), ConsecutiveSuccessfulChecks: 2, Status: rolloutv1alpha1.StepWaitForChecks}
		return suite.Client.Status().Update(context.Background(), pr)
	}))
	sts := f.sts()
	orig := sts.DeepCopy()
	sts.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To[int32](2)
	require.NoError(t, suite.Client.Patch(context.Background(), sts, client.MergeFrom(orig)))
	checker.set(VerdictPass)
	before := len(checker.recorded())
	startOperator(t, checker)
	f.waitPartition(1)
	// Three new passes (on web-2) were needed for 2→1, not one.
	assert.GreaterOrEqual(t, len(checker.recorded())-before, 3)
	values, _ := log.get()
	assert.NotContains(t, values, int32(0))
}

// TestSecondUpdateDuringARolloutStartsOver: a new revision mid-rollout puts the partition back to
// replicas, so no pod reaches the newest revision unchecked.
func TestSecondUpdateDuringARolloutStartsOver(t *testing.T) {
	checker := newFakeChecker(VerdictPass)
	startOperator(t, checker)
	f := newFixture(t, 3, 0)
	f.simulateStatefulSetController()
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Check.SuccessThreshold = 1 })
	f.waitPartition(3)
	f.newRevision("web-r2")
	f.waitPartition(1)
	checker.set(VerdictFail)
	f.newRevision("web-r3")
	f.waitPartition(3)
	require.Eventually(t, func() bool { return f.rollout().Status.UpdateRevision == "web-r3" }, wait, tick)
	assert.Equal(t, rolloutv1alpha1.PhaseRolling, f.rollout().Status.Phase)
}

// TestOrdinalsStart: with spec.ordinals.start=5 the pods are web-5..web-7 and the queries name them.
func TestOrdinalsStart(t *testing.T) {
	checker := newFakeChecker(VerdictPass)
	startOperator(t, checker)
	f := newFixture(t, 3, 5)
	f.simulateStatefulSetController()
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) {
		pr.Spec.Check.SuccessThreshold = 1
		pr.Spec.Check.Query.Expr = `errors{pod="{{pod}}",ordinal="{{ordinal}}",ns="{{namespace}}",sts="{{statefulset}}",rev="{{revision}}"}`
	})
	f.waitPartition(3)
	f.newRevision("web-r2")
	f.waitRolledTo("web-r2")
	var exprs []string
	for _, q := range checker.recorded() {
		exprs = append(exprs, q.Expr)
	}
	for _, o := range []string{"7", "6", "5"} {
		assert.Contains(t, exprs, `errors{pod="web-`+o+`",ordinal="`+o+`",ns="`+f.ns+`",sts="web",rev="web-r2"}`)
	}
}

// TestSkipCheckAliasesAndDeletion: skipCheck (or standardRollingUpdate) resumes the normal rolling
// update. A PhasedRollout has no finalizer: deleting it completes at once, and the operator hands the
// StatefulSet back once it finds it gone: idle, partition 0 (Event PartitionReleased); mid-rollout,
// the partition stays (Event PartitionLeftOnDeletion); the annotation goes in both cases.
func TestSkipCheckAliasesAndDeletion(t *testing.T) {
	checker := newFakeChecker(VerdictFail)
	startOperator(t, checker)

	t.Run("standardRollingUpdate", func(t *testing.T) {
		f := newFixture(t, 3, 0)
		f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.StandardRollingUpdate = ptr.To(true) })
		f.waitPhase(rolloutv1alpha1.PhaseSuspended)
		f.waitPartition(0)
	})
	t.Run("skipCheck, then deletion when idle", func(t *testing.T) {
		f := newFixture(t, 3, 0)
		f.simulateStatefulSetController()
		f.createRollout()
		f.waitPartition(3)
		f.waitPhase(rolloutv1alpha1.PhaseUpdated)
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			pr := f.rollout()
			pr.Spec.SkipCheck = ptr.To(true)
			return suite.Client.Update(context.Background(), pr)
		}))
		f.waitPartition(0)
		f.waitPhase(rolloutv1alpha1.PhaseSuspended)
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			pr := f.rollout()
			pr.Spec.SkipCheck = ptr.To(false)
			return suite.Client.Update(context.Background(), pr)
		}))
		f.waitPartition(3)
		assert.Empty(t, f.rollout().Finalizers, "no finalizer: deletion never waits for the operator")
		require.NoError(t, suite.Client.Delete(context.Background(), f.rollout()))
		assert.True(t, f.gone("pr"), "deleted at once")
		f.waitHandedBack(0)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Len(c, testsupport.Events(t, suite.Client, f.ns, "StatefulSet", "web", rolloutv1alpha1.EventPartitionReleased), 1)
		}, wait, tick, "PartitionReleased Event")
	})
	t.Run("deletion mid-rollout", func(t *testing.T) {
		f := newFixture(t, 3, 0)
		f.simulateStatefulSetController()
		f.createRollout()
		f.waitPartition(3)
		f.newRevision("web-r2")
		f.waitPhase(rolloutv1alpha1.PhaseRolling)
		require.NoError(t, suite.Client.Delete(context.Background(), f.rollout()))
		assert.True(t, f.gone("pr"), "deleted at once")
		f.waitHandedBack(3)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			evs := testsupport.Events(t, suite.Client, f.ns, "StatefulSet", "web", rolloutv1alpha1.EventPartitionLeftOnDeletion)
			if assert.Len(c, evs, 1) {
				assert.Equal(c, corev1.EventTypeWarning, evs[0].Type)
				assert.Contains(c, evs[0].Note, "stays at 3")
			}
		}, wait, tick, "PartitionLeftOnDeletion Event")
	})
}

// TestCannotManage: OnDelete and a missing StatefulSet get a clear phase and condition.
func TestCannotManage(t *testing.T) {
	startOperator(t, newFakeChecker(VerdictPass))
	f := newFixture(t, 1, 0)
	f.setOnDelete()
	f.createRollout()
	pr := f.waitPhase(rolloutv1alpha1.PhaseErrorCannotManage)
	assert.Contains(t, pr.Status.Message, "OnDelete")
	assert.True(t, metaTrue(pr, rolloutv1alpha1.ConditionDegraded))

	g := newFixture(t, 1, 0)
	g.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.TargetRef = "missing" })
	pr = g.waitPhase(rolloutv1alpha1.PhaseErrorSTSNotFound)
	assert.Contains(t, pr.Status.Message, "missing")
}

// TestSecretCredentialsReachTheChecker: the Secret's token, username and password are used.
func TestSecretCredentialsReachTheChecker(t *testing.T) {
	checker := newFakeChecker(VerdictPass)
	startOperator(t, checker)
	f := newFixture(t, 1, 0)
	f.simulateStatefulSetController()
	require.NoError(t, suite.Client.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "prom-secret", Namespace: f.ns},
		StringData: map[string]string{"token": "tok", "username": "u", "password": "p"},
	}))
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) {
		pr.Spec.Check.SuccessThreshold = 1
		pr.Spec.Check.Query.SecretRef = "prom-secret"
		pr.Spec.Check.Query.InsecureSkipVerify = true
	})
	f.waitPartition(1)
	f.newRevision("web-r2")
	f.waitRolledTo("web-r2")
	q := checker.recorded()[0]
	assert.Equal(t, "tok", q.Token)
	assert.Equal(t, "u", q.Username)
	assert.Equal(t, "p", q.Password)
	assert.True(t, q.InsecureSkipVerify)
}

// TestSchemaDefaultsAndAliasesWithoutWebhook: no webhook runs here; the CRD schema alone defaults
// and validates.
func TestSchemaDefaultsAndAliasesWithoutWebhook(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "schema-"}}
	require.NoError(t, suite.Client.Create(t.Context(), ns))
	apply := func(doc string) (*rolloutv1alpha1.PhasedRollout, error) {
		u := &unstructured.Unstructured{}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &u.Object))
		u.SetNamespace(ns.Name)
		if err := suite.Client.Create(context.Background(), u); err != nil {
			return nil, err
		}
		pr := &rolloutv1alpha1.PhasedRollout{}
		require.NoError(t, suite.Client.Get(context.Background(), client.ObjectKeyFromObject(u), pr))
		return pr, nil
	}
	// Seed 003's example, unchanged.
	pr, err := apply(`apiVersion: sts.plus/v1alpha1
kind: PhasedRollout
metadata:
  name: phasedrollout-sample
spec:
  targetRef: web
  skipCheck: false
  check:
    initialDelaySeconds: 30
    periodSeconds: 30
    maxTries: 10
    successThreshold: 3
    query:
      expr: "up{}"
      url: prom:9000/xx
      secretRef: prom-secret
`)
	require.NoError(t, err)
	assert.Equal(t, int32(30), *pr.Spec.Check.InitialDelaySeconds)
	assert.Equal(t, rolloutv1alpha1.SuccessWhenNoData, pr.Spec.Check.SuccessWhen)
	assert.Equal(t, rolloutv1alpha1.OnFailurePause, pr.Spec.Check.OnFailure)

	pr, err = apply(`apiVersion: sts.plus/v1alpha1
kind: PhasedRollout
metadata:
  name: defaults
spec:
  targetRef: web
  standardRollingUpdate: true
`)
	require.NoError(t, err)
	assert.Equal(t, int32(60), *pr.Spec.Check.InitialDelaySeconds)
	assert.Equal(t, int32(60), pr.Spec.Check.PeriodSeconds)
	assert.Equal(t, int32(3), pr.Spec.Check.SuccessThreshold)
	assert.True(t, skipCheck(pr), "standardRollingUpdate is an alias of skipCheck")

	_, err = apply(`apiVersion: sts.plus/v1alpha1
kind: PhasedRollout
metadata:
  name: zero-threshold
spec:
  targetRef: web
  check: {successThreshold: 0, query: {expr: up, url: prom:9090}}
`)
	assert.ErrorContains(t, err, "successThreshold")
	_, err = apply(`apiVersion: sts.plus/v1alpha1
kind: PhasedRollout
metadata:
  name: conflict
spec:
  targetRef: web
  skipCheck: true
  standardRollingUpdate: false
`)
	assert.ErrorContains(t, err, "aliases")
	_, err = apply(`apiVersion: sts.plus/v1alpha1
kind: PhasedRollout
metadata:
  name: ftp
spec:
  targetRef: web
  check: {query: {expr: up, url: "ftp://prom:21"}}
`)
	assert.ErrorContains(t, err, "http or https")
}

func metaTrue(pr *rolloutv1alpha1.PhasedRollout, t string) bool {
	for _, c := range pr.Status.Conditions {
		if c.Type == t {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// TestStepMachineWithARealPrometheus drives the controller with the real checker against a real
// Prometheus scraping an exporter the test controls: a healthy metric lets the rollout advance, an
// unhealthy one stops it at Failed with the partition unchanged, and a stopped Prometheus never
// counts as a pass.
func TestStepMachineWithARealPrometheus(t *testing.T) {
	exp := newExporter(t)
	prom := startPrometheus(t, hostPort(t, exp.srv.URL))
	startOperator(t, nil)
	f := newFixture(t, 2, 0)
	log := f.simulateStatefulSetController()
	for _, pod := range []string{"web-0", "web-1"} {
		exp.set(`app_errors{pod="`+pod+`"}`, "0")
	}
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) {
		pr.Spec.Check.MaxTries = ptr.To[int32](4)
		pr.Spec.Check.Query.URL = strings.TrimPrefix(prom.URL, "http://") // no scheme: http
		pr.Spec.Check.Query.Expr = `app_errors{pod="{{pod}}"} > 0`
	})
	f.waitPartition(2)
	// Wait until Prometheus has scraped the series, so "no data" below means "no errors".
	waitForVerdict(t, Query{URL: prom.URL, Expr: `app_errors{pod="web-0"} == 0`, SuccessWhen: rolloutv1alpha1.SuccessWhenDataReturned}, VerdictPass)

	// web-1 is rolled after passing checks; then web-1 reports errors: the step stops at Failed.
	f.newRevision("web-r2")
	f.waitPartition(1)
	exp.set(`app_errors{pod="web-1"}`, "5")
	pr := f.waitPhase(rolloutv1alpha1.PhaseFailed)
	assert.Equal(t, int32(1), f.partition())
	assert.Contains(t, pr.Status.LastQueryResult, "check failed")
	values, _ := log.get()
	assert.Equal(t, []int32{2, 1}, values)

	// Healthy again, but Prometheus is down: the retried step never passes.
	exp.set(`app_errors{pod="web-1"}`, "0")
	prom.stop()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pr := f.rollout()
		pr.Spec.Check.MaxTries = ptr.To[int32](3)
		return suite.Client.Update(context.Background(), pr)
	}))
	pr = f.waitPhase(rolloutv1alpha1.PhaseFailed)
	require.Eventually(t, func() bool {
		pr = f.rollout()
		return pr.Status.Phase == rolloutv1alpha1.PhaseFailed && pr.Status.ObservedGeneration == pr.Generation
	}, wait, tick)
	assert.Contains(t, pr.Status.LastError, "unreachable")
	assert.Equal(t, int32(1), f.partition())
}

// TestOnFailureRollbackRestoresThePreviousTemplate: with onFailure Rollback, a failed step re-applies
// the pod template stored in the current revision's ControllerRevision.
func TestOnFailureRollbackRestoresThePreviousTemplate(t *testing.T) {
	f, _ := failAndRollBack(t, suite.Config)
	assert.Equal(t, int32(2), f.partition())
}

// failAndRollBack runs the operator as cfg's identity through a step that fails with onFailure
// Rollback and checks that the template was set back to the current revision's.
func failAndRollBack(t *testing.T, cfg *rest.Config) (*fixture, *rolloutv1alpha1.PhasedRollout) {
	t.Helper()
	startOperatorWith(t, cfg, newFakeChecker(VerdictFail))
	f := newFixture(t, 2, 0)
	f.simulateStatefulSetController()
	f.createCurrentRevision()
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) {
		pr.Spec.Check.MaxTries = ptr.To[int32](2)
		pr.Spec.Check.OnFailure = rolloutv1alpha1.OnFailureRollback
	})
	f.waitPartition(2)
	f.setImage("app:2")
	f.newRevision("web-r2")
	pr := f.waitPhase(rolloutv1alpha1.PhaseFailed)
	assert.Contains(t, pr.Status.Message, "set back to revision web-r1")
	assert.Equal(t, "app:1", f.sts().Spec.Template.Spec.Containers[0].Image)
	return f, pr
}

// TestRevertAfterFailedGoesIdle: after a Failed step, reverting the template to the current revision
// brings the rolled pods back and the partition back to replicas (so the next template change rolls
// nothing unchecked); the phase keeps saying Failed.
func TestRevertAfterFailedGoesIdle(t *testing.T) {
	checker := newFakeChecker(VerdictPass)
	startOperator(t, checker)
	f := newFixture(t, 3, 0)
	f.simulateStatefulSetController()
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) {
		pr.Spec.Check.SuccessThreshold = 1
		pr.Spec.Check.MaxTries = ptr.To[int32](2)
	})
	f.waitPartition(3)
	f.newRevision("web-r2")
	f.waitPartition(2)
	checker.set(VerdictFail)
	f.waitPhase(rolloutv1alpha1.PhaseFailed)
	assert.Equal(t, int32(2), f.partition())
	f.newRevision("web-r1") // the user reverts the template
	f.waitPartition(3)
	assert.Equal(t, rolloutv1alpha1.PhaseFailed, f.rollout().Status.Phase)
	for _, name := range []string{"web-0", "web-1", "web-2"} {
		pod := &corev1.Pod{}
		require.NoError(t, suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, pod))
		assert.Equal(t, "web-r1", pod.Labels[appsv1.ControllerRevisionHashLabelKey], name)
	}
}
