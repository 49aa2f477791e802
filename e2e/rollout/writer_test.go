//go:build e2e

package rollout

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/e2e/framework"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// TestRolloutAwareWriter (issue 22, SL-B4 and PR-B3) runs both operators of deploy/ together, the
// lease-operator and the rollout-operator, each as a local process under its manifest's
// ServiceAccount (so their RBAC and the admission policy rollout-operator-lock-writes apply), on a
// 3-replica StatefulSet that a StatefulSetLock guards and a PhasedRollout rolls, with checks against a
// real Prometheus. A recorder watches the lock and the pods from before the template change and
// replays their events in resourceVersion order (one etcd, so one order for both kinds) to assert:
// no pod is deleted while it is the lock's writer (status.writerPod) or labelled writer; the writer
// moves once, by a switchover the rollout-operator asked for (the annotation), with
// lastFailoverReason Switchover and leaseTransitions (the epoch) one higher; the writer's original
// pod is rolled last; the rollout completes with one writer, on an updated pod.
//
// Each operator alone is covered elsewhere: the envtest TestRolloutWithoutTheLockKind (no
// StatefulSetLock kind served) for the rollout-operator, TestLease/rollout (e2e/lease, a native
// rolling update under a lock, no PhasedRollout) for the lease-operator.
func TestRolloutAwareWriter(t *testing.T) {
	framework.StartLocalOperator(t, "lease-operator") // also serves the StatefulSetLock kind
	startRolloutOperator(t)
	exp := newMetricsExporter(t)
	prom := startPrometheusFor(t, exp.srv.Listener.Addr().String())

	ns := framework.NewNamespace(t)
	for i := range 3 {
		exp.setErrors(ns, fmt.Sprintf("web-%d", i), 0)
	}
	framework.RolloutStatefulSet(t, ns, "web", 3, 0)
	require.NoError(t, framework.Client.Create(t.Context(), &leasev1.StatefulSetLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-lock"},
		Spec:       leasev1.StatefulSetLockSpec{StatefulSetName: "web", LeaseName: "web-lease", LeaseDurationSeconds: 10},
	}))
	first := waitLockWriter(t, ns, "web-lock")
	require.Equal(t, "web-0", first.Status.WriterPod, "initial election: the lowest ordinal")
	createPhasedRollout(t, ns, "pr", "web", prom.url, 1, 0, nil)
	waitRolloutPhase(t, ns, "pr", "Updated")
	waitPartitionValue(t, ns, "web", 3)

	rec := recordWriter(t, ns, "web-lock")
	framework.BumpTemplate(t, ns, "web", "2")
	waitRolloutPhase(t, ns, "pr", "Updated")
	framework.WaitStatefulSetReady(t, ns, "web", 3)
	updateRev := stsUpdateRevisionOf(t, ns, "web")

	// (4) One writer at the end, on an updated pod, the one the lock's status names, with its epoch.
	var lock *leasev1.StatefulSetLock
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		lock = &leasev1.StatefulSetLock{}
		require.NoError(c, framework.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web-lock"}, lock))
		pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
		require.NoError(c, err)
		var writers []string
		for _, p := range pods.Items {
			if p.Labels[leasev1.RoleLabel] == leasev1.RoleWriter {
				writers = append(writers, p.Name)
				assert.Equal(c, updateRev, p.Labels[appsv1.ControllerRevisionHashLabelKey], "the writer %s runs the update revision", p.Name)
				assert.Equal(c, strconv.Itoa(int(lock.Status.LeaseTransitions)), p.Annotations[leasev1.WriterEpochAnnotation], "the writer carries the lock's epoch")
			}
		}
		assert.Equal(c, []string{lock.Status.WriterPod}, writers, "one pod labelled writer, the lock's writerPod")
		assert.Empty(c, lock.Annotations[leasev1.SwitchoverAnnotation], "the switchover annotation is removed")
	}, framework.Timeout, framework.Tick, "one writer on an updated pod")
	pr, err := getPhasedRollout(t, ns, "pr")
	require.NoError(t, err)
	assert.Nil(t, pr.Status.Switchover, "no switchover pending once the rollout is over")

	// Replay the recorded events in resourceVersion order.
	h := rec.stop(t)
	writer, transitions := first.Status.WriterPod, first.Status.LeaseTransitions
	var (
		asked    []string // switchover annotation values, as they appeared
		moves    []string // "from->to" of each writer change
		deleted  []string // the first deletion of each pod, in order
		deleting = map[string]bool{}
		// The write outage as the pods' labels show it: from the event that left no pod labelled
		// writer to the one that labelled the next (watch delivery times, for the log only).
		labelled   = map[string]bool{first.Status.WriterPod: true}
		noWriterAt time.Time
		outages    []time.Duration
	)
	for _, e := range h {
		if e.lock {
			if e.switchoverTo != "" && (len(asked) == 0 || asked[len(asked)-1] != e.switchoverTo) {
				asked = append(asked, e.switchoverTo)
			}
			if e.writer != "" && e.writer != writer {
				moves = append(moves, writer+"->"+e.writer)
				// (2) Moved by the switchover asked for, not by a failover; the epoch goes up by one.
				assert.Equal(t, leasev1.FailoverReasonSwitchover, e.reason, "writer %s->%s at resourceVersion %d", writer, e.writer, e.rv)
				assert.Equal(t, transitions+1, e.transitions, "epoch of the move %s->%s", writer, e.writer)
				assert.Contains(t, asked, e.writer, "the writer moved to a pod the switchover annotation named")
				writer = e.writer
			} else if e.writer == writer {
				assert.Equal(t, transitions, e.transitions, "the epoch changes only with the writer (resourceVersion %d)", e.rv)
			}
			if e.writer != "" {
				transitions = e.transitions
			}
			continue
		}
		had := len(labelled) > 0
		if e.role == leasev1.RoleWriter && !e.deleting {
			labelled[e.pod] = true
		} else {
			delete(labelled, e.pod)
		}
		switch {
		case had && len(labelled) == 0:
			noWriterAt = e.at
		case !had && len(labelled) > 0 && !noWriterAt.IsZero():
			outages = append(outages, e.at.Sub(noWriterAt))
		}
		if !e.deleting {
			deleting[e.pod] = false // a pod (re)created
			continue
		}
		if deleting[e.pod] {
			continue
		}
		deleting[e.pod] = true
		// (1) No pod deleted while it is the writer, by the lock's status or by its own label.
		assert.NotEqual(t, writer, e.pod, "pod %s deleted (resourceVersion %d) while the lock's writer", e.pod, e.rv)
		assert.NotEqual(t, leasev1.RoleWriter, e.role, "pod %s deleted (resourceVersion %d) while labelled writer", e.pod, e.rv)
		if !slices.Contains(deleted, e.pod) {
			deleted = append(deleted, e.pod)
		}
	}
	t.Logf("rollout with the writer: switchover asked to %v, writer moves %v (epoch %d -> %d), pods rolled in order %v, no pod labelled writer for %v (as the watch saw it), %d events replayed",
		asked, moves, first.Status.LeaseTransitions, transitions, deleted, outages, len(h))
	require.Len(t, moves, 1, "the writer moved once: %v", moves)
	assert.Equal(t, "web-0->web-1", moves[0], "to the lowest-ordinal pod already on the update revision")
	assert.Equal(t, first.Status.LeaseTransitions+1, lock.Status.LeaseTransitions, "one epoch per writer move")
	assert.Equal(t, leasev1.FailoverReasonSwitchover, lock.Status.LastFailoverReason)
	// (3) The original writer's pod web-0 is rolled last, once the writer left it.
	assert.Equal(t, []string{"web-2", "web-1", "web-0"}, deleted, "each pod rolled once, the original writer last")

	// The Events say the same: the rollout-operator asked for the switchover and never gave up
	// waiting; the lease-operator elected web-1 by switchover, never by a failover.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		events, err := framework.Clientset.EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
		require.NoError(c, err)
		var requested, elected bool
		for _, e := range events.Items {
			switch e.Reason {
			case rolloutv1alpha1.EventSwitchoverRequested:
				requested = requested || strings.Contains(e.Note, "from pod web-0 to pod web-1")
			case rolloutv1alpha1.EventSwitchoverTimedOut, rolloutv1alpha1.EventNoSwitchoverTarget:
				assert.Fail(c, "the rollout did not wait for the switchover", "%s: %s", e.Reason, e.Note)
			case leasev1.EventWriterElected:
				elected = elected || strings.HasPrefix(e.Note, "Pod web-1 is the writer") && strings.HasSuffix(e.Note, "("+leasev1.FailoverReasonSwitchover+")")
				for _, r := range []string{leasev1.FailoverReasonWriterTerminating, leasev1.FailoverReasonWriterGone, leasev1.FailoverReasonWriterNotReady, leasev1.FailoverReasonNodeNotReady} {
					assert.NotContains(c, e.Note, "("+r+")", "a failover")
				}
			}
		}
		assert.True(c, requested, "Event %s on the PhasedRollout", rolloutv1alpha1.EventSwitchoverRequested)
		assert.True(c, elected, "Event %s for web-1 by %s on the lock", leasev1.EventWriterElected, leasev1.FailoverReasonSwitchover)
	}, framework.Timeout, framework.Tick, "the Events of the switchover")
}

// waitLockWriter waits until the lock's status names a writer and returns the lock.
func waitLockWriter(t *testing.T, ns, name string) *leasev1.StatefulSetLock {
	t.Helper()
	lock := &leasev1.StatefulSetLock{}
	require.Eventually(t, func() bool {
		return framework.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, lock) == nil && lock.Status.WriterPod != ""
	}, framework.Timeout, framework.Tick, "StatefulSetLock %s has a writer", name)
	return lock
}

// writerEvent is one watch event of the lock (lock true) or of a pod, with its resourceVersion.
type writerEvent struct {
	rv   uint64
	at   time.Time // when the watch delivered it
	lock bool
	// Of the lock: status.writerPod, status.leaseTransitions, status.lastFailoverReason and the
	// switchover annotation.
	writer, reason, switchoverTo string
	transitions                  int32
	// Of a pod: its name, whether it is being deleted (deletionTimestamp set, or gone) and its role label.
	pod, role string
	deleting  bool
}

// writerRecorder records the watch events of one lock and of the pods of its namespace.
type writerRecorder struct {
	mu      sync.Mutex
	events  []writerEvent
	closed  []string // watches that ended before stop
	stopped bool
	stops   []func()
	done    sync.WaitGroup
}

func recordWriter(t *testing.T, ns, lockName string) *writerRecorder {
	t.Helper()
	r := &writerRecorder{}
	pods, err := framework.Clientset.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	locks, err := framework.Client.Watch(t.Context(), &leasev1.StatefulSetLockList{}, client.InNamespace(ns))
	require.NoError(t, err)
	r.stops = []func(){pods.Stop, locks.Stop}
	t.Cleanup(func() { r.stopWatches() })
	r.follow(t, "pods", pods, func(typ watch.EventType, obj any) (writerEvent, bool) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return writerEvent{}, false
		}
		return writerEvent{pod: pod.Name, role: pod.Labels[leasev1.RoleLabel], deleting: typ == watch.Deleted || pod.DeletionTimestamp != nil}, true
	})
	r.follow(t, "locks", locks, func(_ watch.EventType, obj any) (writerEvent, bool) {
		lock, ok := obj.(*leasev1.StatefulSetLock)
		if !ok || lock.Name != lockName {
			return writerEvent{}, false
		}
		return writerEvent{lock: true, writer: lock.Status.WriterPod, transitions: lock.Status.LeaseTransitions,
			reason: lock.Status.LastFailoverReason, switchoverTo: lock.Annotations[leasev1.SwitchoverAnnotation]}, true
	})
	return r
}

// follow records the events of one watch; a watch that ends before stop is reported by stop, since
// the events it would have seen are missing.
func (r *writerRecorder) follow(t *testing.T, name string, w watch.Interface, convert func(watch.EventType, any) (writerEvent, bool)) {
	r.done.Add(1)
	go func() {
		defer r.done.Done()
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				continue
			}
			e, ok := convert(ev.Type, ev.Object)
			if !ok {
				continue
			}
			meta, ok := ev.Object.(metav1.Object)
			if !ok {
				continue
			}
			rv, err := strconv.ParseUint(meta.GetResourceVersion(), 10, 64)
			if err != nil {
				t.Errorf("%s watch: resourceVersion %q: %v", name, meta.GetResourceVersion(), err)
				continue
			}
			e.rv, e.at = rv, time.Now()
			r.mu.Lock()
			r.events = append(r.events, e)
			r.mu.Unlock()
		}
		r.mu.Lock()
		if !r.stopped {
			r.closed = append(r.closed, name)
		}
		r.mu.Unlock()
	}()
}

func (r *writerRecorder) stopWatches() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	for _, stop := range r.stops {
		stop()
	}
	r.done.Wait()
}

// stop ends the watches and returns the events in resourceVersion order.
func (r *writerRecorder) stop(t *testing.T) []writerEvent {
	t.Helper()
	r.stopWatches()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Empty(t, r.closed, "watches that ended early: the record misses events")
	h := slices.Clone(r.events)
	slices.SortStableFunc(h, func(a, b writerEvent) int {
		switch {
		case a.rv < b.rv:
			return -1
		case a.rv > b.rv:
			return 1
		}
		return 0
	})
	return h
}
