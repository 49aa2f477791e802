//go:build integration

package controller

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/shared/testsupport"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// envtest runs no Job controller: the tests finish the upgrade Jobs by writing their status as the Job
// controller would (setJob).

// jobTemplateSpec is an upgrade Job template with one container and no restartPolicy (the operator
// sets Never).
func jobTemplateSpec(cmd string) *batchv1.JobTemplateSpec {
	return &batchv1.JobTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"purpose": "migrate"}},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "job", Image: "tool:1", Command: []string{"sh", "-c", cmd}}},
			}},
		},
	}
}

// withJobs adds pre and/or post upgrade Jobs to the ExtendedStatefulSet.
func withJobs(ests *extendedv1alpha1.ExtendedStatefulSet, pre, post, rollback bool) *extendedv1alpha1.ExtendedStatefulSet {
	uj := &extendedv1alpha1.UpgradeJobs{RollbackOnPostFailure: rollback}
	if pre {
		uj.Pre = jobTemplateSpec("migrate")
	}
	if post {
		uj.Post = jobTemplateSpec("smoke-test")
	}
	ests.Spec.UpgradeJobs = uj
	return ests
}

// job returns the Job, nil when it does not exist.
func (f *fixture) job(name string) *batchv1.Job {
	j := &batchv1.Job{}
	err := suite.Client.Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, j)
	if apierrors.IsNotFound(err) {
		return nil
	}
	require.NoError(f.t, err)
	return j
}

// waitJob waits until the Job exists.
func (f *fixture) waitJob(name string) *batchv1.Job {
	f.t.Helper()
	var got *batchv1.Job
	require.Eventually(f.t, func() bool { got = f.job(name); return got != nil }, wait, tick, "Job %s created", name)
	return got
}

// jobs lists the namespace's Jobs by name.
func (f *fixture) jobs() []string {
	var list batchv1.JobList
	require.NoError(f.t, suite.Client.List(f.t.Context(), &list, client.InNamespace(f.ns)))
	var out []string
	for _, j := range list.Items {
		if j.DeletionTimestamp.IsZero() {
			out = append(out, j.Name)
		}
	}
	return out
}

// setJob plays the Job controller: the Job ends Complete or Failed (after its backoffLimit).
func (f *fixture) setJob(name string, complete bool) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		j := f.job(name)
		require.NotNil(f.t, j, "Job %s", name)
		now := metav1.Now()
		j.Status.StartTime = &now
		if complete {
			j.Status.Succeeded = 1
			j.Status.CompletionTime = &now
			j.Status.Conditions = []batchv1.JobCondition{
				{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now, LastProbeTime: now},
				{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now, LastProbeTime: now},
			}
		} else {
			j.Status.Failed = 1
			j.Status.Conditions = []batchv1.JobCondition{
				{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", LastTransitionTime: now, LastProbeTime: now},
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", LastTransitionTime: now, LastProbeTime: now},
			}
		}
		return suite.Client.Status().Update(f.t.Context(), j)
	}))
}

// waitEvent waits for an Event of the reason whose note contains text.
func (f *fixture) waitEvent(reason, text string) {
	f.t.Helper()
	require.EventuallyWithT(f.t, func(c *assert.CollectT) {
		var list eventsv1.EventList
		if !assert.NoError(c, suite.Client.List(f.t.Context(), &list, client.InNamespace(f.ns))) {
			return
		}
		var notes []string
		for _, e := range list.Items {
			if e.Reason == reason {
				if strings.Contains(e.Note, text) {
					return
				}
				notes = append(notes, e.Note)
			}
		}
		assert.Fail(c, "no such Event", "reason %s containing %q; have %q", reason, text, notes)
	}, wait, tick)
}

// condition returns the ExtendedStatefulSet's condition (zero value when absent).
func (f *fixture) condition(t string) metav1.Condition {
	if c := meta.FindStatusCondition(f.get().Status.Conditions, t); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// startV1 creates the ExtendedStatefulSet and brings version 1 up with all 3 pods Ready.
func (f *fixture) startV1(ests *extendedv1alpha1.ExtendedStatefulSet) {
	f.t.Helper()
	f.create(ests)
	f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "version 1")
	f.setStatus(1, 3)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
}

// TestPreJobSuccess checks that a new version waits, without pods, for its pre Job (owned, labelled,
// named after the version, restartPolicy Never), and starts its canaries once the Job completed.
func TestPreJobSuccess(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	f.startV1(withJobs(f.newESTS(3, "app:1"), true, false, false))
	assert.Empty(t, f.jobs(), "no pre Job for the first version")

	f.setImage("app:2")
	f.waitSTS(2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, extendedv1alpha1.PhasePreJob, sts.Annotations[extendedv1alpha1.PhaseAnnotation])
		assert.Equal(c, int32(0), ptr.Deref(sts.Spec.Replicas, 1), "no pod before the pre Job")
		assert.Equal(c, "web-pre-v2", sts.Annotations[extendedv1alpha1.PreJobAnnotation])
	}, "version 2 waits for its pre Job")
	job := f.waitJob("web-pre-v2")
	assert.True(t, metav1.IsControlledBy(job, f.get()), "owned by the ExtendedStatefulSet")
	assert.Equal(t, "web", job.Labels[extendedv1alpha1.NameLabel])
	assert.Equal(t, "2", job.Labels[extendedv1alpha1.VersionLabel])
	assert.Equal(t, "pre", job.Labels[extendedv1alpha1.UpgradeJobLabel])
	assert.Equal(t, "migrate", job.Labels["purpose"], "the template's labels")
	assert.Equal(t, corev1.RestartPolicyNever, job.Spec.Template.Spec.RestartPolicy)
	assert.Equal(t, "pre", job.Spec.Template.Labels[extendedv1alpha1.UpgradeJobLabel])
	assert.NotContains(t, job.Spec.Template.Labels, extendedv1alpha1.VersionLabel, "job pods never match a version's selector")
	f.waitCondition(extendedv1alpha1.ConditionProgressing, metav1.ConditionTrue, extendedv1alpha1.ReasonPreUpgradeJobRunning)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, []extendedv1alpha1.UpgradeJobStatus{{Name: "web-pre-v2", Type: "Pre", Version: 2, State: "Running"}}, f.get().Status.UpgradeJobs)
	}, wait, tick, "status.upgradeJobs")
	assert.Equal(t, int32(3), ptr.Deref(f.sts(1).Spec.Replicas, 0), "version 1 serves meanwhile")

	f.setJob("web-pre-v2", true)
	rollOut2(f) // the canary only once the pre Job completed, then the rest
	f.waitGone(1)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
	f.waitCondition(extendedv1alpha1.ConditionUpgradeBlocked, metav1.ConditionFalse, "")
	assert.Equal(t, []string{"web-pre-v2"}, f.jobs(), "one Job, run once")
}

// TestPreJobFailure checks that a failed pre Job blocks the upgrade: the version is stale without ever
// having pods, conditions Stale and UpgradeBlocked and a Warning Event name the Job, the serving version
// is untouched, and a new template supersedes the stale version with a new pre Job.
func TestPreJobFailure(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	f.startV1(withJobs(f.newESTS(3, "app:1"), true, false, false))
	v1 := f.sts(1)

	f.setImage("app:2")
	f.waitJob("web-pre-v2")
	f.setJob("web-pre-v2", false)
	f.waitSTS(2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, "true", sts.Annotations[extendedv1alpha1.StaleAnnotation])
		assert.Equal(c, int32(0), ptr.Deref(sts.Spec.Replicas, 1))
	}, "version 2 stale")
	f.waitCondition(extendedv1alpha1.ConditionStale, metav1.ConditionTrue, extendedv1alpha1.ReasonJobFailed)
	f.waitCondition(extendedv1alpha1.ConditionUpgradeBlocked, metav1.ConditionTrue, extendedv1alpha1.ReasonJobFailed)
	assert.Contains(t, f.condition(extendedv1alpha1.ConditionUpgradeBlocked).Message, "web-pre-v2")
	f.waitEvent(extendedv1alpha1.ReasonJobFailed, "web-pre-v2")
	now := f.sts(1)
	assert.Equal(t, v1.Generation, now.Generation, "version 1 untouched")
	assert.Equal(t, int32(3), ptr.Deref(now.Spec.Replicas, 0))
	assert.Equal(t, int32(1), f.get().Status.CurrentVersion)
	testsupport.NeverWithin(t, time.Second, 50*time.Millisecond, func() bool {
		return ptr.Deref(f.sts(2).Spec.Replicas, 0) > 0
	}, "the blocked version got pods")

	t.Run("a new template supersedes the blocked version", func(t *testing.T) {
		f.setImage("app:3")
		f.waitSTS(3, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, extendedv1alpha1.PhasePreJob, sts.Annotations[extendedv1alpha1.PhaseAnnotation])
		}, "version 3 waits for its own pre Job")
		f.waitGone(2)
		f.waitJob("web-pre-v3")
		f.waitCondition(extendedv1alpha1.ConditionUpgradeBlocked, metav1.ConditionFalse, "")
		f.waitCondition(extendedv1alpha1.ConditionStale, metav1.ConditionFalse, "")
	})
}

// TestPostJob checks the post Job: it starts once the new version runs fully; success finishes the
// upgrade; failure is reported and, with rollbackOnPostFailure, restores the previous version (kept
// without pods while the Job ran).
func TestPostJob(t *testing.T) {
	t.Run("success", func(t *testing.T) {
		startOperator(t, nil)
		f := newFixture(t)
		f.startV1(withJobs(f.newESTS(3, "app:1"), false, true, false))
		upgradeTo2(f)
		f.waitJob("web-post-v2")
		f.waitCondition(extendedv1alpha1.ConditionProgressing, metav1.ConditionTrue, extendedv1alpha1.ReasonPostUpgradeJobRunning)
		f.setJob("web-post-v2", true)
		f.waitSTS(2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, extendedv1alpha1.PhaseDone, sts.Annotations[extendedv1alpha1.PhaseAnnotation])
		}, "done")
		f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
		f.waitCondition(extendedv1alpha1.ConditionPostUpgradeFailed, metav1.ConditionFalse, "")
		f.waitEvent(extendedv1alpha1.EventUpgradeJobSucceeded, "web-post-v2")
	})

	t.Run("failure without rollback", func(t *testing.T) {
		startOperator(t, nil)
		f := newFixture(t)
		f.startV1(withJobs(f.newESTS(3, "app:1"), false, true, false))
		upgradeTo2(f)
		f.waitGone(1) // no rollback asked for: nothing kept
		f.waitJob("web-post-v2")
		f.setJob("web-post-v2", false)
		f.waitCondition(extendedv1alpha1.ConditionPostUpgradeFailed, metav1.ConditionTrue, extendedv1alpha1.ReasonJobFailed)
		assert.Contains(t, f.condition(extendedv1alpha1.ConditionPostUpgradeFailed).Message, "web-post-v2")
		f.waitEvent(extendedv1alpha1.ReasonJobFailed, "web-post-v2")
		f.waitSTS(2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, extendedv1alpha1.PhaseDone, sts.Annotations[extendedv1alpha1.PhaseAnnotation])
			assert.Equal(c, int32(3), ptr.Deref(sts.Spec.Replicas, 0))
			assert.Empty(c, sts.Annotations[extendedv1alpha1.StaleAnnotation])
		}, "version 2 keeps running")
		// Reported, not stalled: the new version runs and nothing waits for the user.
		f.waitKstatus(status.CurrentStatus)
	})

	t.Run("failure with rollback", func(t *testing.T) {
		startOperator(t, nil)
		f := newFixture(t)
		f.startV1(withJobs(f.newESTS(3, "app:1"), false, true, true))
		upgradeTo2(f)
		f.waitJob("web-post-v2")
		f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, int32(0), ptr.Deref(sts.Spec.Replicas, 1))
		}, "version 1 kept without pods while the post Job runs")
		f.setStatus(1, 0)
		f.setJob("web-post-v2", false)
		f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, int32(3), ptr.Deref(sts.Spec.Replicas, 0))
		}, "version 1 back")
		f.waitSTS(2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, "true", sts.Annotations[extendedv1alpha1.StaleAnnotation])
		}, "version 2 stale")
		require.Equal(t, int32(3), ptr.Deref(f.sts(2).Spec.Replicas, 0), "version 2 serves until version 1 runs again")
		f.setStatus(1, 3)
		f.waitSTS(2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, int32(0), ptr.Deref(sts.Spec.Replicas, 1))
		}, "version 2 stopped once version 1 runs")
		f.waitCondition(extendedv1alpha1.ConditionPostUpgradeFailed, metav1.ConditionTrue, extendedv1alpha1.ReasonRolledBack)
		f.waitCondition(extendedv1alpha1.ConditionStale, metav1.ConditionTrue, extendedv1alpha1.ReasonRolledBack)
		assert.Contains(t, f.waitStalled(extendedv1alpha1.ReasonRolledBack), "web-post-v2")
		f.waitEvent(extendedv1alpha1.ReasonJobFailed, "web-post-v2")
		require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, int32(1), f.get().Status.CurrentVersion) }, wait, tick)
	})
}

// upgradeTo2 changes the image and brings version 2 up fully (canary, then all 3 pods).
func upgradeTo2(f *fixture) {
	f.t.Helper()
	f.setImage("app:2")
	rollOut2(f)
	f.waitSTS(2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, extendedv1alpha1.PhasePostJob, sts.Annotations[extendedv1alpha1.PhaseAnnotation])
	}, "version 2 in phase PostJob")
}

// rollOut2 plays the StatefulSet controller for version 2 of 3 pods: its canary becomes Ready, then
// all its pods.
func rollOut2(f *fixture) {
	f.t.Helper()
	f.waitSTS(2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, extendedv1alpha1.PhaseCanary, sts.Annotations[extendedv1alpha1.PhaseAnnotation])
		assert.Equal(c, int32(1), ptr.Deref(sts.Spec.Replicas, 0))
	}, "canary")
	f.setStatus(2, 1)
	f.waitSTS(2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, int32(3), ptr.Deref(sts.Spec.Replicas, 0))
	}, "rollout")
	f.setStatus(2, 3)
}

// TestJobHistoryLimit checks that finished Jobs of past versions beyond historyLimit are deleted, oldest
// first, and the Jobs of live versions are kept.
func TestJobHistoryLimit(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	ests := withJobs(f.newESTS(1, "app:1"), true, false, false)
	ests.Spec.UpdateStrategy.Canaries = ptr.To[int32](0)
	ests.Spec.UpgradeJobs.HistoryLimit = ptr.To[int32](1)
	f.create(ests)
	f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "version 1")
	f.setStatus(1, 1)
	for v := 2; v <= 4; v++ {
		f.setImage("app:" + itoa(v))
		f.waitJob("web-pre-v" + itoa(v))
		f.setJob("web-pre-v"+itoa(v), true)
		f.waitSTS(v, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, extendedv1alpha1.PhaseRollout, sts.Annotations[extendedv1alpha1.PhaseAnnotation])
		}, "rollout after the pre Job")
		f.setStatus(v, 1)
		f.waitGone(v - 1)
	}
	// Live: version 4 (its Job web-pre-v4 is in use). Past: v2, v3; historyLimit 1 keeps v3.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.ElementsMatch(c, []string{"web-pre-v3", "web-pre-v4"}, f.jobs())
	}, wait, tick, "the oldest past Job deleted")
	f.waitEvent(extendedv1alpha1.EventUpgradeJobDeleted, "web-pre-v2")
}

// TestUpgradeJobsRestartSafety runs an upgrade with pre and post Jobs while a quarter of the operator's
// writes fail and the operator is restarted while each Job runs: each Job is created once, and the
// upgrade ends as without faults.
func TestUpgradeJobsRestartSafety(t *testing.T) {
	var injected atomic.Int64
	funcs := faultyWrites(&injected)
	op := startOperator(t, funcs)
	f := newFixture(t)
	f.startV1(withJobs(f.newESTS(3, "app:1"), true, true, true))
	f.setImage("app:2")
	f.waitJob("web-pre-v2")
	op.stop()
	op = startOperator(t, funcs)
	testsupport.NeverWithin(t, time.Second, 50*time.Millisecond, func() bool {
		return ptr.Deref(f.sts(2).Spec.Replicas, 0) > 0
	}, "pods before the pre Job completed")
	f.setJob("web-pre-v2", true)
	rollOut2(f) // the canary only once the pre Job completed, then the rest
	f.waitJob("web-post-v2")
	op.stop()
	startOperator(t, funcs)
	f.setJob("web-post-v2", true)
	f.waitGone(1)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
	assert.ElementsMatch(t, []string{"web-pre-v2", "web-post-v2"}, f.jobs(), "each Job once")
	assert.Nil(t, f.sts(3), "no version made twice")
	t.Logf("injected %d API errors", injected.Load())
	assert.Positive(t, injected.Load())
}

// TestZonePreJobOnce checks that with zones the pre Job runs once per version, before the first zone
// upgrades; the later zones start their canaries without waiting, and the post Job runs once every zone
// runs the new version.
func TestZonePreJobOnce(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	checker := watchZoneUpgrades(t, f.ns)
	f.create(withJobs(f.zoned(3, "app:1", "a", "b", "c"), true, true, false))
	for z := 1; z <= 3; z++ {
		f.waitZSTS(z, 1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "zone version 1")
		f.setZStatus(z, 1, 1)
	}
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
	f.setImage("app:2")
	f.waitZSTS(1, 2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, extendedv1alpha1.PhasePreJob, sts.Annotations[extendedv1alpha1.PhaseAnnotation])
	}, "zone a waits for the pre Job")
	f.waitJob("web-pre-v2")
	assert.Nil(t, f.zsts(2, 2), "zone b waits for zone a")
	f.setJob("web-pre-v2", true)
	for z := 1; z <= 3; z++ {
		f.waitZSTS(z, 2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, extendedv1alpha1.PhaseCanary, sts.Annotations[extendedv1alpha1.PhaseAnnotation])
			assert.Equal(c, "web-pre-v2", sts.Annotations[extendedv1alpha1.PreJobAnnotation])
		}, "zone canary")
		if z < 3 {
			assert.Nil(t, f.job("web-post-v2"), "no post Job before every zone runs the new version")
		}
		f.setZStatus(z, 2, 1)
		require.Eventually(t, func() bool { return f.zsts(z, 1) == nil }, wait, tick, "zone %d upgraded", z)
	}
	f.waitJob("web-post-v2")
	f.setJob("web-post-v2", true)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
	assert.ElementsMatch(t, []string{"web-pre-v2", "web-post-v2"}, f.jobs(), "one pre and one post Job for the version")
	violations, _ := checker.result()
	t.Logf("zone-by-zone checker: %d violations (must be 0)", violations)
	assert.Zero(t, violations)
}

// TestZoneOutage checks that a zone whose nodes are all NotReady (or that has none) is reported:
// condition ZonesAvailable=False naming it, status.zones[].readyNodes, a Warning Event; and that its
// recovery is reported too.
func TestZoneOutage(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	zoneA, zoneB := f.ns+"-a", f.ns+"-b" // zone names of this test only: nodes are cluster-wide
	nodes := map[string]string{f.ns + "-n1": zoneA, f.ns + "-n2": zoneB, f.ns + "-n3": zoneB}
	for name, z := range nodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{extendedv1alpha1.DefaultZoneNodeLabel: z}}}
		require.NoError(t, suite.Client.Create(t.Context(), n))
		t.Cleanup(func() { _ = suite.Client.Delete(t.Context(), n) })
		setNodeReady(t, name, true)
	}
	f.create(f.zoned(2, "app:1", zoneA, zoneB))
	f.waitCondition(extendedv1alpha1.ConditionZonesAvailable, metav1.ConditionTrue, "")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		zs := f.get().Status.Zones
		if assert.Len(c, zs, 2) {
			assert.Equal(c, int32(1), zs[0].ReadyNodes)
			assert.Equal(c, int32(2), zs[1].ReadyNodes)
		}
	}, wait, tick, "ready nodes per zone")

	setNodeReady(t, f.ns+"-n2", false)
	testsupport.NeverWithin(t, time.Second, 50*time.Millisecond, func() bool {
		return f.condition(extendedv1alpha1.ConditionZonesAvailable).Status == metav1.ConditionFalse
	}, "an outage reported while zone b has a Ready node")
	setNodeReady(t, f.ns+"-n3", false)
	f.waitCondition(extendedv1alpha1.ConditionZonesAvailable, metav1.ConditionFalse, extendedv1alpha1.ReasonZoneOutage)
	assert.Contains(t, f.condition(extendedv1alpha1.ConditionZonesAvailable).Message, `"`+zoneB+`"`)
	assert.NotContains(t, f.condition(extendedv1alpha1.ConditionZonesAvailable).Message, `"`+zoneA+`"`)
	f.waitEvent(extendedv1alpha1.EventZoneOutage, zoneB)
	assert.Equal(t, int32(0), f.get().Status.Zones[1].ReadyNodes)

	setNodeReady(t, f.ns+"-n3", true)
	f.waitCondition(extendedv1alpha1.ConditionZonesAvailable, metav1.ConditionTrue, "")
	f.waitEvent(extendedv1alpha1.EventZonesAvailable, "again")
}

// setNodeReady writes the node's Ready condition (envtest runs no kubelet).
func setNodeReady(t *testing.T, name string, ready bool) {
	t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := suite.Client.Get(t.Context(), client.ObjectKey{Name: name}, n); err != nil {
			return err
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		return suite.Client.Status().Update(t.Context(), n)
	}))
}

// TestConfigChangeQuietPeriod checks spec.updateStrategy.configChangeQuietPeriod: schema bounds, "0s"
// rolls on the first change, and a long quiet period holds a change back (up to the operator's maxDelay)
// where the operator's default would have applied it.
func TestConfigChangeQuietPeriod(t *testing.T) {
	startOperator(t, nil) // operator default: 500ms quiet, 5s max delay
	f := newFixture(t)

	t.Run("schema", func(t *testing.T) {
		for _, bad := range []string{"-1s", "2h", "soon"} {
			e := f.newESTS(1, "app:1")
			e.Name = "bad"
			err := createWithQuietPeriod(t, e, bad)
			require.Error(t, err, bad)
			assert.Contains(t, err.Error(), "configChangeQuietPeriod", bad)
		}
		e := f.newESTS(1, "app:1")
		e.Name = "zero"
		require.NoError(t, createWithQuietPeriod(t, e, "0s"), "0s is allowed")
		e = f.newESTS(1, "app:1")
		e.Name = "defaulted"
		e.Spec.UpdateStrategy.ConfigChangeQuietPeriod = nil
		require.NoError(t, suite.Client.Create(t.Context(), e, client.DryRunAll))
		assert.Equal(t, 2*time.Second, e.Spec.UpdateStrategy.ConfigChangeQuietPeriod.Duration, "schema default")
	})

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "conf", Namespace: f.ns}, Data: map[string]string{"k": "1"}}
	require.NoError(t, suite.Client.Create(t.Context(), cm))
	ests := f.newESTS(1, "app:1")
	ests.Spec.Template.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}}}
	ests.Spec.UpdateStrategy.ConfigChangeQuietPeriod = &metav1.Duration{Duration: time.Hour}
	changes := watchTemplateChanges(t, f.ns)
	f.create(ests)
	f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "version 1")
	f.setStatus(1, 1)

	t.Run("a long quiet period holds the change back until maxDelay", func(t *testing.T) {
		patchConfigMap(t, f.ns, "conf", func(cm *corev1.ConfigMap) { cm.Data["k"] = "2" })
		testsupport.NeverWithin(t, 2*time.Second, 50*time.Millisecond, func() bool { return changes.count("web-v1") > 0 },
			"rolled within the operator's default quiet period although the spec asks for 1h")
		require.Eventually(t, func() bool { return changes.count("web-v1") == 1 }, wait, tick, "rolled by maxDelay")
	})

	t.Run("0s rolls each change", func(t *testing.T) {
		f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
			e.Spec.UpdateStrategy.ConfigChangeQuietPeriod = &metav1.Duration{}
		})
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, f.get().Generation, f.get().Status.ObservedGeneration)
		}, wait, tick)
		patchConfigMap(t, f.ns, "conf", func(cm *corev1.ConfigMap) { cm.Data["k"] = "3" })
		require.Eventually(t, func() bool { return changes.count("web-v1") == 2 }, wait, tick, "rolled")
		f.setStatus(1, 1)
		patchConfigMap(t, f.ns, "conf", func(cm *corev1.ConfigMap) { cm.Data["k"] = "4" })
		require.Eventually(t, func() bool { return changes.count("web-v1") == 3 }, wait, tick, "rolled again")
	})
}

// createWithQuietPeriod dry-run creates the ExtendedStatefulSet with a raw configChangeQuietPeriod (a
// metav1.Duration cannot hold an unparsable or negative string as the user would write it).
func createWithQuietPeriod(t *testing.T, e *extendedv1alpha1.ExtendedStatefulSet, raw string) error {
	t.Helper()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(e)
	require.NoError(t, err)
	u := &unstructured.Unstructured{Object: obj}
	u.SetGroupVersionKind(extendedv1alpha1.GroupVersion.WithKind("ExtendedStatefulSet"))
	spec := u.Object["spec"].(map[string]any)
	spec["updateStrategy"].(map[string]any)["configChangeQuietPeriod"] = raw
	return suite.Client.Create(t.Context(), u, client.DryRunAll)
}

// TestPostJobRollbackWithVolumes checks the rollback of a template with volumeClaimTemplates: while the
// post Job runs the old version is kept (running no ordinal); when the Job fails every ordinal moves
// back to it with its own volume, one at a time, and the new version is stale.
func TestPostJobRollbackWithVolumes(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	volumes := f.withVolumes()
	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) { withJobs(e, false, true, true) })
	f.setImage("app:2")
	for k := int32(1); k <= 3; k++ {
		f.waitSTS(2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, k, ptr.Deref(sts.Spec.Replicas, 0), "version 2 runs ordinals [0, %d)", k)
		}, fmt.Sprintf("ordinal %d moved", k-1))
		f.setStatus(2, k)
	}
	f.waitJob("web-post-v2")
	v1 := f.sts(1)
	require.NotNil(t, v1, "version 1 kept for a rollback while the post Job runs")
	assert.Equal(t, int32(0), ptr.Deref(v1.Spec.Replicas, 1), "running no ordinal")

	f.setJob("web-post-v2", false)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for i, v := range volumes {
			assert.Equal(c, v, f.claimVolume(fmt.Sprintf("data-web-v1-%d", i)), "ordinal %d's volume back on version 1", i)
		}
		v1 := f.sts(1)
		if assert.NotNil(c, v1) {
			assert.Equal(c, int32(3), ptr.Deref(v1.Spec.Replicas, 0))
			assert.Nil(c, v1.Spec.Ordinals, "version 1 runs ordinals from 0 again")
		}
	}, wait, tick, "rolled back with the volumes")
	f.setStatus(1, 3)
	f.waitSTS(2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, "true", sts.Annotations[extendedv1alpha1.StaleAnnotation])
		assert.Equal(c, int32(0), ptr.Deref(sts.Spec.Replicas, 1))
	}, "version 2 stale without pods")
	f.waitCondition(extendedv1alpha1.ConditionPostUpgradeFailed, metav1.ConditionTrue, extendedv1alpha1.ReasonRolledBack)
	f.waitVolumesReleased(volumes)
}

// TestZonePostJobRollback checks a failed post Job with rollbackOnPostFailure over zones: the zones roll
// back one at a time, the last upgraded first, each once the one before it runs its previous version
// again (the zone-by-zone checker counts 0 moments with two zones changing pods).
func TestZonePostJobRollback(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	checker := watchZoneUpgrades(t, f.ns)
	f.create(withJobs(f.zoned(3, "app:1", "a", "b", "c"), false, true, true))
	for z := 1; z <= 3; z++ {
		f.waitZSTS(z, 1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "zone version 1")
		f.setZStatus(z, 1, 1)
	}
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
	f.setImage("app:2")
	for z := 1; z <= 3; z++ {
		f.waitZSTS(z, 2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "zone canary")
		f.setZStatus(z, 2, 1)
		f.waitZSTS(z, 2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, extendedv1alpha1.PhasePostJob, sts.Annotations[extendedv1alpha1.PhaseAnnotation])
		}, "zone runs version 2")
		f.waitZSTS(z, 1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, int32(0), ptr.Deref(sts.Spec.Replicas, 1))
		}, "zone's version 1 kept without pods")
		f.setZStatus(z, 1, 0)
	}
	f.waitJob("web-post-v2")
	f.setJob("web-post-v2", false)
	for z := 3; z >= 1; z-- {
		f.waitZSTS(z, 1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, int32(1), ptr.Deref(sts.Spec.Replicas, 0))
		}, fmt.Sprintf("zone %d's version 1 back", z))
		for before := 1; before < z; before++ {
			assert.Empty(t, f.zsts(before, 2).Annotations[extendedv1alpha1.StaleAnnotation], "zone %d waits for zone %d", before, z)
		}
		f.setZStatus(z, 1, 1)
		f.waitZSTS(z, 2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.Equal(c, "true", sts.Annotations[extendedv1alpha1.StaleAnnotation])
			assert.Equal(c, int32(0), ptr.Deref(sts.Spec.Replicas, 1))
		}, fmt.Sprintf("zone %d's version 2 stopped", z))
		f.setZStatus(z, 2, 0)
	}
	f.waitCondition(extendedv1alpha1.ConditionPostUpgradeFailed, metav1.ConditionTrue, extendedv1alpha1.ReasonRolledBack)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, zs := range f.get().Status.Zones {
			assert.Equal(c, int32(1), zs.CurrentVersion, "zone %s", zs.Name)
		}
	}, wait, tick, "every zone back on version 1")
	violations, _ := checker.result()
	t.Logf("zone-by-zone checker (rollback): %d violations (must be 0)", violations)
	assert.Zero(t, violations)
}
