//go:build e2e

package extended

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// upgradeJob is an upgrade Job template whose pod kwok ends with exitCode (pod-complete stage): 0 lets
// the Job complete, anything else fails it (backoffLimit 0: no retry).
func upgradeJob(exitCode string) *batchv1.JobTemplateSpec {
	template := framework.PodTemplate("upgrade-job")
	template.Annotations = map[string]string{localcluster.ExitCodeAnnotation: exitCode}
	template.Spec.RestartPolicy = "" // the operator's default: Never
	return &batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: template}}
}

// jobStateE2E is the Job's finished condition (Complete or Failed), "" while it runs or is missing.
func jobStateE2E(ctx context.Context, ns, name string) string {
	j, err := framework.Clientset.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	for _, c := range j.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			return string(c.Type)
		}
	}
	return ""
}

// eventWith reports whether the namespace has an Event of the reason whose note contains text.
func eventWith(ctx context.Context, ns, reason, text string) bool {
	events, err := framework.Clientset.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	for _, e := range events.Items {
		if e.Reason == reason && strings.Contains(e.Note, text) {
			return true
		}
	}
	return false
}

// TestExtendedUpgradeJobs runs upgrade Jobs on the local cluster with nodes in 3 zones: a succeeding
// pre/post pair lets an upgrade through zone by zone (pre Job before the first zone, post Job after the
// last); a failing pre Job blocks the next upgrade: version marked stale, conditions Stale and
// UpgradeBlocked and a Warning Event name the Job, the running version keeps serving; and a failing
// post Job with rollbackOnPostFailure brings every zone back to the previous version, zone by zone.
func TestExtendedUpgradeJobs(t *testing.T) {
	startExtendedOperator(t)
	ns := framework.NewNamespace(t)
	zc := watchZoneUpgrades(t, ns)
	e := framework.NewESTS("web", int32(len(localZones)))
	e.Spec.AZ = &extendedv1alpha1.AvailabilityZones{Zones: localZones}
	e.Spec.UpgradeJobs = &extendedv1alpha1.UpgradeJobs{Pre: upgradeJob("0"), Post: upgradeJob("0")}
	createESTS(t, ns, e)
	waitESTSReady(t, ns, "web", 1)

	t.Run("a succeeding pre/post pair lets the upgrade through", func(t *testing.T) {
		zc.arm()
		start := time.Now()
		updateESTS(t, ns, "web", func(e *extendedv1alpha1.ExtendedStatefulSet) {
			e.Spec.Template.Spec.Template.Spec.Containers[0].Image = framework.PauseImage + "-v2"
		})
		waitESTSReady(t, ns, "web", 2)
		took := time.Since(start)
		assert.Equal(t, "Complete", jobStateE2E(t.Context(), ns, "web-pre-v2"), "pre Job")
		assert.Equal(t, "Complete", jobStateE2E(t.Context(), ns, "web-post-v2"), "post Job")
		jobs, err := framework.Clientset.BatchV1().Jobs(ns).List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		assert.Len(t, jobs.Items, 2, "one pre and one post Job for the version, whatever the zone count")
		early := jobOrderViolations(t, ns, "2")
		t.Logf("upgrade Job checker: %d Jobs for one version in 3 zones (must be 2); %d pods of version 2 created before the pre Job completed or after the post Job was created (must be 0)", len(jobs.Items), early)
		assert.Zero(t, early)
		violations, maxBusy, order := zc.result()
		t.Logf("3-zone upgrade with pre and post Jobs (1 pod per zone): %s; zones in order %v", took.Round(time.Millisecond), order)
		t.Logf("zone-by-zone checker (upgrade Jobs): %d moments with two zones mid-upgrade (must be 0); at most %d at once", violations, maxBusy)
		assert.Zero(t, violations)
		got, err := fetchESTS(t.Context(), ns, "web")
		require.NoError(t, err)
		for _, c := range []string{extendedv1alpha1.ConditionUpgradeBlocked, extendedv1alpha1.ConditionPostUpgradeFailed} {
			assert.Equal(t, metav1.ConditionFalse, estsCondition(got, c), c)
		}
	})

	t.Run("a failing pre Job blocks the upgrade and marks it stale", func(t *testing.T) {
		updateESTS(t, ns, "web", func(e *extendedv1alpha1.ExtendedStatefulSet) {
			e.Spec.UpgradeJobs.Pre = upgradeJob("3")
			e.Spec.Template.Spec.Template.Spec.Containers[0].Image = framework.PauseImage + "-v3"
		})
		waitESTS(t, ns, "web", func(c *assert.CollectT, e *extendedv1alpha1.ExtendedStatefulSet) {
			blocked := meta.FindStatusCondition(e.Status.Conditions, extendedv1alpha1.ConditionUpgradeBlocked)
			if assert.NotNil(c, blocked) {
				assert.Equal(c, metav1.ConditionTrue, blocked.Status, "UpgradeBlocked")
				assert.Contains(c, blocked.Message, "web-pre-v3")
			}
			stale := meta.FindStatusCondition(e.Status.Conditions, extendedv1alpha1.ConditionStale)
			if assert.NotNil(c, stale) {
				assert.Equal(c, metav1.ConditionTrue, stale.Status, "Stale")
				assert.Equal(c, extendedv1alpha1.ReasonJobFailed, stale.Reason)
			}
		}, "upgrade blocked by the failed pre Job")
		assert.Equal(t, "Failed", jobStateE2E(t.Context(), ns, "web-pre-v3"))
		require.Eventually(t, func() bool { return eventWith(t.Context(), ns, extendedv1alpha1.ReasonJobFailed, "web-pre-v3") },
			framework.Timeout, framework.Tick, "Warning Event naming the Job")
		sts, err := framework.FetchStatefulSet(t.Context(), ns, "web-z1-v3")
		require.NoError(t, err)
		assert.Equal(t, "true", sts.Annotations[extendedv1alpha1.StaleAnnotation])
		assert.Equal(t, int32(0), ptr.Deref(sts.Spec.Replicas, 1), "no pod of the blocked version")
		got, err := fetchESTS(t.Context(), ns, "web")
		require.NoError(t, err)
		assert.Equal(t, int32(2), got.Status.CurrentVersion, "version 2 keeps serving")
		v3pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{
			LabelSelector: extendedv1alpha1.NameLabel + "=web," + extendedv1alpha1.VersionLabel + "=3"})
		require.NoError(t, err)
		t.Logf("blocked-upgrade checker: %d pods of the blocked version 3 (must be 0)", len(v3pods.Items))
		assert.Empty(t, v3pods.Items)
		assert.Equal(t, int32(len(localZones)), got.Status.ReadyReplicas, "all its pods Ready")
		for i := 2; i <= len(localZones); i++ {
			sts, err := framework.FetchStatefulSet(t.Context(), ns, "web-z"+strconv.Itoa(i)+"-v3")
			require.NoError(t, err)
			assert.Nil(t, sts, "zone %d never started version 3", i)
		}
		violations, _, _ := zc.result()
		t.Logf("zone-by-zone checker after the blocked upgrade: %d violations (must be 0)", violations)
		assert.Zero(t, violations)
	})

	t.Run("a failing post Job rolls back zone by zone", func(t *testing.T) {
		start := time.Now()
		updateESTS(t, ns, "web", func(e *extendedv1alpha1.ExtendedStatefulSet) {
			e.Spec.UpgradeJobs.Pre = upgradeJob("0")
			e.Spec.UpgradeJobs.Post = upgradeJob("3")
			e.Spec.UpgradeJobs.RollbackOnPostFailure = true
			e.Spec.Template.Spec.Template.Spec.Containers[0].Image = framework.PauseImage + "-v4"
		})
		waitESTS(t, ns, "web", func(c *assert.CollectT, e *extendedv1alpha1.ExtendedStatefulSet) {
			failed := meta.FindStatusCondition(e.Status.Conditions, extendedv1alpha1.ConditionPostUpgradeFailed)
			if assert.NotNil(c, failed) {
				assert.Equal(c, metav1.ConditionTrue, failed.Status, "PostUpgradeFailed")
				assert.Equal(c, extendedv1alpha1.ReasonRolledBack, failed.Reason)
				assert.Contains(c, failed.Message, "web-post-v4")
			}
			for _, zs := range e.Status.Zones {
				assert.Equal(c, int32(2), zs.CurrentVersion, "zone %s back on version 2", zs.Name)
				assert.Equal(c, int32(1), zs.ReadyReplicas, "zone %s", zs.Name)
				assert.Equal(c, int32(1), zs.Replicas, "zone %s: the failed version's pod gone", zs.Name)
			}
		}, "rolled back to version 2 in every zone")
		took := time.Since(start)
		assert.Equal(t, "Failed", jobStateE2E(t.Context(), ns, "web-post-v4"))
		require.Eventually(t, func() bool { return eventWith(t.Context(), ns, extendedv1alpha1.ReasonJobFailed, "web-post-v4") },
			framework.Timeout, framework.Tick, "Warning Event naming the post Job")
		violations, maxBusy, _ := zc.result()
		t.Logf("3-zone upgrade to version 4 and rollback to version 2 after its post Job failed: %s", took.Round(time.Millisecond))
		t.Logf("zone-by-zone checker after the rollback: %d moments with two zones mid-upgrade (must be 0); at most %d at once", violations, maxBusy)
		assert.Zero(t, violations)
	})
}

// TestExtendedZoneOutage sets every node of one zone NotReady and checks that the outage is reported
// (condition ZonesAvailable=False naming the zone, status.zones[].readyNodes 0, a Warning Event), and
// its end too. The nodes are made Ready again in t.Cleanup whatever happens.
func TestExtendedZoneOutage(t *testing.T) {
	startExtendedOperator(t)
	ns := framework.NewNamespace(t)
	e := framework.NewESTS("web", int32(len(localZones)))
	e.Spec.AZ = &extendedv1alpha1.AvailabilityZones{Zones: localZones}
	createESTS(t, ns, e)
	waitESTSReady(t, ns, "web", 1)

	nodes, err := framework.Clientset.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{
		LabelSelector: localcluster.KwokNodeLabel + "=" + localcluster.KwokNodeValue + "," + corev1.LabelTopologyZone + "=zone-b"})
	require.NoError(t, err)
	require.NotEmpty(t, nodes.Items, "kwok nodes in zone-b")
	for _, n := range nodes.Items {
		t.Cleanup(func() {
			assert.NoError(t, localcluster.SetNodeReady(context.Background(), framework.Clientset, n.Name, true))
		})
	}
	begin := time.Now()
	for _, n := range nodes.Items {
		// Returns once the node controller marked the node not Ready (its grace period, ~20s).
		require.NoError(t, localcluster.SetNodeReady(t.Context(), framework.Clientset, n.Name, false))
	}
	start := time.Now()
	t.Logf("zone-b's node(s) NotReady after %s (node controller)", start.Sub(begin).Round(time.Millisecond))
	waitESTS(t, ns, "web", func(c *assert.CollectT, e *extendedv1alpha1.ExtendedStatefulSet) {
		cond := meta.FindStatusCondition(e.Status.Conditions, extendedv1alpha1.ConditionZonesAvailable)
		if assert.NotNil(c, cond) {
			assert.Equal(c, metav1.ConditionFalse, cond.Status)
			assert.Equal(c, extendedv1alpha1.ReasonZoneOutage, cond.Reason)
			assert.Contains(c, cond.Message, `"zone-b"`)
			assert.NotContains(c, cond.Message, `"zone-a"`)
		}
		if assert.Len(c, e.Status.Zones, len(localZones)) {
			assert.Equal(c, int32(0), e.Status.Zones[1].ReadyNodes, "zone-b")
			assert.Positive(c, e.Status.Zones[0].ReadyNodes, "zone-a")
		}
	}, "zone outage reported")
	t.Logf("zone outage of zone-b (%d node(s) NotReady) reported %s after the node was NotReady", len(nodes.Items), time.Since(start).Round(time.Millisecond))
	require.Eventually(t, func() bool { return eventWith(t.Context(), ns, extendedv1alpha1.EventZoneOutage, "zone-b") },
		framework.Timeout, framework.Tick, "Warning Event naming the zone")

	for _, n := range nodes.Items {
		require.NoError(t, localcluster.SetNodeReady(t.Context(), framework.Clientset, n.Name, true))
	}
	waitESTS(t, ns, "web", func(c *assert.CollectT, e *extendedv1alpha1.ExtendedStatefulSet) {
		assert.Equal(c, metav1.ConditionTrue, estsCondition(e, extendedv1alpha1.ConditionZonesAvailable))
	}, "zones available again")
}

// jobOrderViolations counts the pods of the version created before its pre Job completed, or after its
// post Job was created (the post Job runs once every pod of the version is Ready). Timestamps have
// second resolution, so equal seconds count as in order.
func jobOrderViolations(t *testing.T, ns, version string) int {
	t.Helper()
	pre, err := framework.Clientset.BatchV1().Jobs(ns).Get(t.Context(), "web-pre-v"+version, metav1.GetOptions{})
	require.NoError(t, err)
	post, err := framework.Clientset.BatchV1().Jobs(ns).Get(t.Context(), "web-post-v"+version, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, pre.Status.CompletionTime, "pre Job completed")
	pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{
		LabelSelector: extendedv1alpha1.NameLabel + "=web," + extendedv1alpha1.VersionLabel + "=" + version})
	require.NoError(t, err)
	require.NotEmpty(t, pods.Items)
	violations := 0
	for _, p := range pods.Items {
		if p.CreationTimestamp.Before(pre.Status.CompletionTime) || post.CreationTimestamp.Before(&p.CreationTimestamp) {
			violations++
			t.Logf("pod %s created %s; pre Job completed %s, post Job created %s", p.Name, p.CreationTimestamp, pre.Status.CompletionTime, post.CreationTimestamp)
		}
	}
	return violations
}
