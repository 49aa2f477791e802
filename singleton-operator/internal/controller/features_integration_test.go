//go:build integration

package controller

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// crashLooping reports the pod Running between restarts of a crash-looping container, as the kubelet
// would: the container waits in CrashLoopBackOff after restarts restarts.
func (f *fixture) crashLooping(name string, restarts int32) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod := f.pod(name)
		pod.Status.Phase = corev1.PodRunning
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", Image: "db", ImageID: "db", RestartCount: restarts,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 5m0s restarting failed container"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, FinishedAt: metav1.Now()}}}}
		return suite.Client.Status().Update(f.t.Context(), pod)
	}))
}

// activeOldPod starts the operator on a fixture with StatefulSingleton db whose pod "old" is active
// (released with epoch 1), the overlap checker watching.
func activeOldPod(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	watchOverlaps(t, f.ns)
	startOperator(t, nil)
	f.createSingleton("db")
	f.createPod("old", releasedAt(1))
	return f
}

// SS-06: an old pod crash-looping (CrashLoopBackOff, restartCount 5) is neither gone nor terminal: the
// new pod stays held; once the old pod is gone the new one is released.
func TestCrashLoopingOldPodKeepsTheNewOneHeld(t *testing.T) {
	f := activeOldPod(t)
	f.crashLooping("old", 5)
	f.createPod("new", held(singletonv1.HoldModeWrapper))
	// The status write may come after the reconciles that kept "new" held (a loaded CI machine).
	require.Eventually(t, func() bool { return f.singleton("db").Status.ActivePod == "old" }, wait, tick, "pod old is the active pod")
	f.neverReleased("new", 2*time.Second)
	assert.Equal(t, "old", f.singleton("db").Status.ActivePod)

	// Running again between restarts, restartCount 5 (seed 000 released on restartCount > 3).
	f.setPhase("old", corev1.PodRunning)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod := f.pod("old")
		pod.Status.ContainerStatuses[0].RestartCount = 5
		return suite.Client.Status().Update(t.Context(), pod)
	}))
	f.neverReleased("new", time.Second)

	f.confirmStop("old")
	f.waitReleased("new")
}

// SS-15: after a handover the status names the released pod by UID and reports the handover's
// duration, and the metrics registry served on the manager's metrics endpoint exposes the handover
// histogram and the overlap counter.
func TestHandoverStatusAndMetrics(t *testing.T) {
	f := newFixture(t)
	metrics := startOperatorServingMetrics(t)
	const histogram, counter = "singleton_operator_handover_duration_seconds_count", "singleton_operator_overlaps_detected_total"
	handoversBefore, overlapsBefore := scraped(t, metrics, histogram), scraped(t, metrics, counter)

	f.createSingleton("db")
	f.createPod("old", releasedAt(1))
	f.createPod("new", held(singletonv1.HoldModeWrapper))
	require.Eventually(t, func() bool {
		st := f.singleton("db").Status
		return st.ActivePod == "old" && st.Phase == singletonv1.PhaseTransitioning
	}, wait, tick, "the handover started with pod old active")
	f.neverReleased("new", 500*time.Millisecond)
	f.confirmStop("old")
	f.waitReleased("new")
	uid := string(f.pod("new").UID)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st := f.singleton("db").Status
		assert.Equal(c, uid, st.ActivePodUID)
		assert.NotNil(c, st.LastTransitionDuration, "lastTransitionDuration (transition started %s)", st.TransitionTimestamp)
	}, wait, tick, "activePodUID and lastTransitionDuration set")
	ss := f.singleton("db")
	assert.Equal(t, "new", ss.Status.ActivePod)
	assert.Positive(t, ss.Status.LastTransitionDuration.Duration)
	assert.Less(t, ss.Status.LastTransitionDuration.Duration, wait)
	assert.Equal(t, handoversBefore+1, scraped(t, metrics, histogram), "one handover observed")

	// Two released, non-terminal pods: the overlap counter rises and OverlapDetected is set.
	f.createPod("intruder", releasedAt(7))
	f.waitCondition("db", singletonv1.ConditionOverlapDetected, metav1.ConditionTrue)
	assert.Greater(t, scraped(t, metrics, counter), overlapsBefore)
	t.Logf("lastTransitionDuration %s", ss.Status.LastTransitionDuration.Duration)
}

// startOperatorServingMetrics is startOperator with the manager's metrics endpoint served (plain HTTP)
// on a free local port, as main serves it; it returns the endpoint's URL.
func startOperatorServingMetrics(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	suite.StartManager(t, func(ctx context.Context, m ctrl.Manager) error { return (&Options{}).Setup(ctx, m) },
		func(o *ctrl.Options) {
			CacheOptions(&o.Cache)
			o.Metrics = metricsserver.Options{BindAddress: addr}
		})
	return "http://" + addr + "/metrics"
}

// scraped is the value of the sample name (a counter, or a histogram's _count) that the metrics
// endpoint at url serves, in the Prometheus text format; it waits for the endpoint to serve.
func scraped(t *testing.T, url, name string) float64 {
	t.Helper()
	var value float64
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := http.Get(url) //nolint:gosec,noctx // the test's own endpoint
		if !assert.NoError(c, err) {
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		assert.NoError(c, err)
		if !assert.Equal(c, http.StatusOK, resp.StatusCode, string(body)) {
			return
		}
		for line := range strings.SplitSeq(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				value, err = strconv.ParseFloat(v, 64)
				assert.NoError(c, err, line)
				return
			}
		}
		assert.Fail(c, "not served", "sample %s", name)
	}, wait, tick, "the metrics endpoint serves %s", name)
	return value
}

// SS-09: while a handover waits for a terminating pod, status.handover reports its grace-period
// progress: terminatingSince = deletionTimestamp − deletionGracePeriodSeconds, and the grace period,
// from which a reader computes the elapsed time; it is cleared once the handover is done.
func TestHandoverReportsGracePeriodProgress(t *testing.T) {
	f := activeOldPod(t)
	f.createPod("new", held(singletonv1.HoldModeWrapper))
	f.neverReleased("new", 500*time.Millisecond)
	assert.Nil(t, f.singleton("db").Status.Handover, "nothing terminates yet")

	require.NoError(t, suite.Client.Delete(t.Context(), f.pod("old"), client.GracePeriodSeconds(20)))
	old := f.pod("old")
	require.NotNil(t, old.DeletionTimestamp)
	var progress *singletonv1.HandoverStatus
	require.Eventually(t, func() bool {
		progress = f.singleton("db").Status.Handover
		return progress != nil
	}, wait, tick, "status.handover set")
	assert.Equal(t, "old", progress.WaitingFor)
	assert.Equal(t, string(old.UID), progress.WaitingForUID)
	assert.Equal(t, int64(20), progress.GracePeriodSeconds)
	assert.True(t, progress.TerminatingSince.Equal(&metav1.Time{Time: old.DeletionTimestamp.Add(-20 * time.Second)}),
		"terminatingSince %s = deletionTimestamp %s − 20s", progress.TerminatingSince, old.DeletionTimestamp)
	elapsed := time.Since(progress.TerminatingSince.Time)
	assert.True(t, elapsed >= 0 && elapsed < 10*time.Second, "elapsed %s: the deletion was just requested", elapsed)
	ss := f.singleton("db")
	assert.Contains(t, ss.Status.Message, "terminating since")
	assert.Contains(t, ss.Status.Message, "20s grace period")
	f.neverReleased("new", 500*time.Millisecond)

	f.confirmStop("old")
	f.waitReleased("new")
	require.Eventually(t, func() bool { return f.singleton("db").Status.Handover == nil }, wait, tick, "status.handover cleared")
}

// aheadClock is the real clock, ahead by d.
type aheadClock struct{ d time.Duration }

func (c aheadClock) Now() time.Time                   { return time.Now().Add(c.d) }
func (c aheadClock) Since(ts time.Time) time.Duration { return c.Now().Sub(ts) }

// SS-09, the criterion: with the operator's clock 10 s ahead of the API server's, a deletion with a 30 s
// grace period is, as the operator sees it, deletionTimestamp = now+20s with deletionGracePeriodSeconds
// = 30: the status message and the Ready condition report elapsed 10s, 20s left. Nothing is requeued to
// refresh it: without events, the status stays as written.
func TestHandoverMessageReportsElapsedGrace(t *testing.T) {
	f := newFixture(t)
	watchOverlaps(t, f.ns)
	startOperatorWithOptions(t, Options{Overrides: opsutil.Overrides{Clock: aheadClock{10 * time.Second}}}, nil)
	f.createSingleton("db")
	f.createPod("old", releasedAt(1))
	f.createPod("new", held(singletonv1.HoldModeWrapper))
	f.neverReleased("new", 500*time.Millisecond)

	require.NoError(t, suite.Client.Delete(t.Context(), f.pod("old"), client.GracePeriodSeconds(30)))
	elapsedRE := regexp.MustCompile(`; pod old terminating since \S+ with a 30s grace period: elapsed (\d+)s, (\d+)s left$`)
	var ss *singletonv1.StatefulSingleton
	var m []string
	require.Eventually(t, func() bool {
		ss = f.singleton("db")
		m = elapsedRE.FindStringSubmatch(ss.Status.Message)
		return m != nil
	}, wait, tick, "the message reports the elapsed grace period")
	t.Logf("message: %s", ss.Status.Message)
	elapsed, _ := strconv.Atoi(m[1])
	left, _ := strconv.Atoi(m[2])
	// deletionTimestamp is in whole seconds, and the reconcile follows the deletion by a moment.
	assert.True(t, elapsed >= 10 && elapsed <= 12, "elapsed %ds ≈ 10s: %s", elapsed, ss.Status.Message)
	assert.Equal(t, 30, elapsed+left, ss.Status.Message)
	ready := findCondition(ss, singletonv1.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, ss.Status.Message, ready.Message)

	// The elapsed time is measured on reconciles that run anyway: the write's own reconcile (graceEcho)
	// and no timer rewrite the status.
	time.Sleep(300 * time.Millisecond) // the write's own reconcile
	rv := f.singleton("db").ResourceVersion
	testsupport.NeverWithin(t, 2500*time.Millisecond, 100*time.Millisecond,
		func() bool { return f.singleton("db").ResourceVersion != rv }, "the status is rewritten without an event")

	f.confirmStop("old")
	f.waitReleased("new")
}

// SS-06: an old pod kept by a finalizer after its deletion (deletionTimestamp set, even the zero-grace
// delete done) is not gone: the new pod stays held while the finalizer is there, and is released within
// 5 s of its removal.
func TestFinalizerKeptOldPodHoldsUntilRemoved(t *testing.T) {
	f := newFixture(t)
	watchOverlaps(t, f.ns)
	startOperator(t, nil)
	f.createSingleton("db")
	f.createPod("old", releasedAt(1), func(p *corev1.Pod) { p.Finalizers = []string{"test.statefulops.io/keep"} })
	t.Cleanup(func() {
		old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "old"}}
		_ = suite.Client.Patch(context.Background(), old, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	f.createPod("new", held(singletonv1.HoldModeWrapper))
	f.confirmStop("old") // the kubelet's confirmation: only the finalizer keeps the object
	old := f.pod("old")
	require.False(t, old.DeletionTimestamp.IsZero())
	f.neverReleased("new", 2*time.Second)

	require.NoError(t, suite.Client.Patch(t.Context(), old, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))))
	removed := time.Now()
	require.Eventually(t, func() bool { return f.released("new") }, 5*time.Second, tick, "released within 5 s of the finalizer's removal")
	t.Logf("released %s after the finalizer's removal", time.Since(removed).Round(time.Millisecond))
}

// SS-08: a Wrapper singleton whose Deployment creates the new pod only after the old one is gone
// (Recreate, or RollingUpdate with maxSurge 0) gets StrategyAdvice=True with the advice and one Event;
// with a surge, or a claim volume (which needs Recreate), the condition is absent.
func TestStrategyAdvice(t *testing.T) {
	f := newFixture(t)
	startOperator(t, nil)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: f.ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "db"}}},
			},
		},
	}
	require.NoError(t, suite.Client.Create(t.Context(), d))
	rs := f.createReplicaSet("db-1", 1)
	rs.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID, Controller: ptr.To(true)}}
	require.NoError(t, suite.Client.Update(t.Context(), rs))
	f.createSingleton("db")
	f.createPod("a", held(singletonv1.HoldModeWrapper), ownedBy(rs))
	f.waitReleased("a")

	touch := 0
	reconcileAgain := func() { // the audit runs on the singleton's reconciles, which pod events queue
		touch++
		pod := f.pod("a")
		pod.Annotations["test/touch"] = fmt.Sprint(touch)
		require.NoError(t, suite.Client.Update(t.Context(), pod))
	}
	setStrategy := func(s appsv1.DeploymentStrategy, volumes ...corev1.Volume) {
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			require.NoError(t, suite.Client.Get(t.Context(), client.ObjectKeyFromObject(d), d))
			d.Spec.Strategy = s
			d.Spec.Template.Spec.Volumes = volumes
			return suite.Client.Update(t.Context(), d)
		}))
	}
	advice := func() *metav1.Condition {
		return findCondition(f.singleton("db"), singletonv1.ConditionStrategyAdvice)
	}

	ss := f.waitCondition("db", singletonv1.ConditionStrategyAdvice, metav1.ConditionTrue)
	c := findCondition(ss, singletonv1.ConditionStrategyAdvice)
	assert.Equal(t, singletonv1.ReasonSlowHandoverStrategy, c.Reason)
	assert.Contains(t, c.Message, "Recreate")
	assert.Contains(t, c.Message, "maxSurge 1")
	reconcileAgain()
	reconcileAgain()
	time.Sleep(500 * time.Millisecond) // let the reconciles the touches queued run: the Event must stay one
	assert.Equal(t, 1, f.countEvents(singletonv1.ReasonSlowHandoverStrategy), "one Event while the advice stands")

	surge := func(n int) *intstr.IntOrString { v := intstr.FromInt32(int32(n)); return &v }
	setStrategy(appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: surge(1), MaxUnavailable: surge(0)}})
	require.Eventually(t, func() bool { reconcileAgain(); return advice() == nil }, wait, 200*time.Millisecond, "no advice with a surge")

	setStrategy(appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: surge(0), MaxUnavailable: surge(1)}})
	require.Eventually(t, func() bool { reconcileAgain(); c := advice(); return c != nil && c.Status == metav1.ConditionTrue }, wait, 200*time.Millisecond, "advice with maxSurge 0")
	assert.Contains(t, advice().Message, "maxSurge 0")

	claim := corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}
	setStrategy(appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}, claim)
	require.Eventually(t, func() bool { reconcileAgain(); return advice() == nil }, wait, 200*time.Millisecond, "no advice for Recreate with a claim volume")
}

// countEvents counts the Events of the fixture's namespace with the reason.
func (f *fixture) countEvents(reason string) int {
	f.t.Helper()
	var events corev1.EventList
	require.NoError(f.t, suite.Client.List(f.t.Context(), &events, client.InNamespace(f.ns)))
	n := 0
	for _, e := range events.Items {
		if e.Reason == reason {
			n++
		}
	}
	return n
}
