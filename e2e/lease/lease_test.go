//go:build e2e

package lease

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// TestLease runs lease-operator (StatefulSetLock) as a local process under its manifest's RBAC and
// drives failovers on the local cluster: each subtest has its own namespace and StatefulSet, and an
// invariant checker that must see no instant with two writers. The summary at the end gives the
// double-writer count, the failovers measured and their latency.
//
// The real-node scenario (the operator installed from deploy/ on the real node, the e2e test
// app's readiness probe failing, then its process killed) is TestLeaseOnTheRealNode.
func TestLease(t *testing.T) {
	op := startLeaseOperator(t)
	t.Cleanup(func() {
		r := leaseResults
		r.mu.Lock()
		defer r.mu.Unlock()
		t.Logf("SUMMARY lease-operator e2e: %d scenarios, double-writer instants %d, failovers exercised %d; failover latency with the operator running and failoverDelaySeconds=0: %s",
			r.tests, r.doubles, r.failovers, summarize(r.latencies))
	})

	// setup makes a namespace with a 3-replica StatefulSet "db", its checker and a lock "db-lock".
	setup := func(t *testing.T, lock lockSpec) (string, *checker) {
		ns := framework.NewNamespace(t)
		readinessKeeper(t, ns)
		c := watchLease(t, ns)
		leaseStatefulSet(t, ns, "db", 3)
		if lock.name == "" {
			lock.name = "db-lock"
		}
		lock.statefulSet, lock.lease = "db", lock.name+"-lease"
		if lock.duration == 0 {
			lock.duration = 10
		}
		createLock(t, ns, lock)
		require.Equal(t, "db-0", c.waitWriter(t), "initial election: lowest ordinal")
		rolesSettled(t, ns)
		return ns, c
	}

	t.Run("writer-pod-deleted", func(t *testing.T) {
		ns, c := setup(t, lockSpec{})
		_, _, p0, l0, k0 := c.snapshot()
		for i := range 3 {
			old, _, _, _, _ := c.snapshot()
			require.NoError(t, framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), old, metav1.DeleteOptions{}))
			c.waitNewWriter(t, old)
			framework.WaitStatefulSetReady(t, ns, "db", 3)
			rolesSettled(t, ns)
			t.Logf("failover %d: %s deleted", i+1, old)
		}
		_, failovers, p, l, k := c.snapshot()
		t.Logf("API writes seen for %d failovers: %d pod label/epoch writes, %d Lease writes, %d lock writes (incl. recreated pods' reader labels and renewals)",
			failovers, p-p0, l-l0, k-k0)
		assert.GreaterOrEqual(t, failovers, 3)
	})

	t.Run("writer-not-ready", func(t *testing.T) {
		ns, c := setup(t, lockSpec{})
		const failovers = 20
		for i := range failovers {
			old, _, p0, l0, k0 := c.snapshot()
			setGate(t, ns, old, false)
			c.waitNewWriter(t, old)
			rolesSettled(t, ns)
			_, _, p, l, k := c.snapshot()
			t.Logf("failover %d: %s not Ready; writes: %d pod, %d Lease, %d lock", i+1, old, p-p0, l-l0, k-k0)
			setGate(t, ns, old, true)
		}
		_, measured, _, _, _ := c.snapshot()
		assert.GreaterOrEqual(t, measured, failovers)
		_, transitions := leaseState(t, ns, "db-lock-lease")
		assert.EqualValues(t, failovers+1, transitions, "one transition per failover, plus the initial election")
	})

	t.Run("writer-node-not-ready", func(t *testing.T) {
		ns, c := setup(t, lockSpec{})
		c.excludeLatency() // the pods' Ready lags the node's: the checker's pod-based clock does not apply
		old, _, _, _, _ := c.snapshot()
		node := framework.GetPod(t, ns, old).Spec.NodeName
		t.Cleanup(func() {
			assert.NoError(t, localcluster.SetNodeReady(context.Background(), framework.Clientset, node, true))
		})
		start := time.Now()
		require.NoError(t, localcluster.SetNodeReady(t.Context(), framework.Clientset, node, false))
		notReady := time.Since(start)
		w := c.waitNewWriter(t, old)
		t.Logf("node %s of writer %s made NotReady: the node controller reported it after %s (node-monitor grace period), writer %s labelled %s after that report was seen here",
			node, old, notReady.Round(time.Millisecond), w, (time.Since(start) - notReady).Round(time.Millisecond))
		assert.NotEqual(t, node, framework.GetPod(t, ns, w).Spec.NodeName, "the new writer runs on a Ready node")
	})

	t.Run("readiness-flapping", func(t *testing.T) {
		ns, c := setup(t, lockSpec{failoverDelay: 3})
		c.excludeLatency()
		_, before := leaseState(t, ns, "db-lock-lease")
		// Flaps shorter than failoverDelaySeconds: no transition.
		for range 5 {
			setGate(t, ns, "db-0", false)
			time.Sleep(300 * time.Millisecond)
			setGate(t, ns, "db-0", true)
			time.Sleep(300 * time.Millisecond)
		}
		testsupport.NeverWithin(t, 4*time.Second, 100*time.Millisecond, func() bool { _, n := leaseState(t, ns, "db-lock-lease"); return n != before })
		w, _, _, _, _ := c.snapshot()
		assert.Equal(t, "db-0", w)
		// Without the delay, every flap that the operator sees moves the writer; never two writers.
		patchLock(t, ns, "db-lock", map[string]any{"spec": map[string]any{"failoverDelaySeconds": 0}})
		for range 5 {
			w, _, _, _, _ := c.snapshot()
			setGate(t, ns, w, false)
			time.Sleep(150 * time.Millisecond)
			setGate(t, ns, w, true)
		}
		rolesSettled(t, ns)
		// A NotReady longer than the delay fails over exactly once.
		patchLock(t, ns, "db-lock", map[string]any{"spec": map[string]any{"failoverDelaySeconds": 2}})
		w, _, _, _, _ = c.snapshot()
		_, n0 := leaseState(t, ns, "db-lock-lease")
		start := time.Now()
		setGate(t, ns, w, false)
		c.waitNewWriter(t, w)
		t.Logf("with failoverDelaySeconds=2 the writer moved after %s", time.Since(start).Round(time.Millisecond))
		assert.GreaterOrEqual(t, time.Since(start), 2*time.Second)
		_, n1 := leaseState(t, ns, "db-lock-lease")
		assert.Equal(t, n0+1, n1)
	})

	t.Run("scale-down-removes-writer", func(t *testing.T) {
		ns, c := setup(t, lockSpec{})
		patchLock(t, ns, "db-lock", map[string]any{"metadata": map[string]any{"annotations": map[string]any{leasev1.SwitchoverAnnotation: "db-2"}}})
		require.Equal(t, "db-2", c.waitNewWriter(t, "db-0"), "planned switchover")
		framework.RetryOnConflict(t, func() error {
			sts, err := framework.Clientset.AppsV1().StatefulSets(ns).Get(t.Context(), "db", metav1.GetOptions{})
			if err != nil {
				return err
			}
			sts.Spec.Replicas = ptr.To[int32](2)
			_, err = framework.Clientset.AppsV1().StatefulSets(ns).Update(t.Context(), sts, metav1.UpdateOptions{})
			return err
		})
		require.Equal(t, "db-0", c.waitNewWriter(t, "db-2"), "handed over when db-2 started terminating")
		require.Eventually(t, func() bool { return framework.PodGone(t, ns, "db-2") }, framework.Timeout, framework.Tick)
		rolesSettled(t, ns)
	})

	t.Run("rollout", func(t *testing.T) {
		ns, c := setup(t, lockSpec{})
		framework.RetryOnConflict(t, func() error {
			sts, err := framework.Clientset.AppsV1().StatefulSets(ns).Get(t.Context(), "db", metav1.GetOptions{})
			if err != nil {
				return err
			}
			sts.Spec.Template.Annotations["rollout"] = "2"
			sts.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}
			_, err = framework.Clientset.AppsV1().StatefulSets(ns).Update(t.Context(), sts, metav1.UpdateOptions{})
			return err
		})
		time.Sleep(2 * time.Second) // let the StatefulSet controller see the new revision
		framework.WaitStatefulSetReady(t, ns, "db", 3)
		rolesSettled(t, ns)
		_, failovers, _, _, _ := c.snapshot()
		t.Logf("a full rollout moved the writer %d times", failovers)
		assert.GreaterOrEqual(t, failovers, 1, "db-0 was replaced, so the writer moved at least once")
	})

	t.Run("operator-sigkilled-mid-failover", func(t *testing.T) {
		ns, c := setup(t, lockSpec{})
		c.excludeLatency()
		for i, delay := range []time.Duration{0, 20 * time.Millisecond} {
			old, _, _, _, _ := c.snapshot()
			_, n0 := leaseState(t, ns, "db-lock-lease")
			setGate(t, ns, old, false)
			time.Sleep(delay)
			op.Kill()
			op.Start()
			c.waitNewWriter(t, old)
			rolesSettled(t, ns)
			_, n1 := leaseState(t, ns, "db-lock-lease")
			assert.Equal(t, n0+1, n1, "exactly one transition")
			t.Logf("kill %d (%s after the writer went not Ready): writer %s -> %s", i+1, delay, old, rolesSettled(t, ns))
			setGate(t, ns, old, true)
		}
	})

	t.Run("operator-stopped-longer-than-lease", func(t *testing.T) {
		ns, c := setup(t, lockSpec{duration: 2})
		// A non-default writer first, so that a re-election of the lowest ordinal would show.
		patchLock(t, ns, "db-lock", map[string]any{"metadata": map[string]any{"annotations": map[string]any{leasev1.SwitchoverAnnotation: "db-1"}}})
		require.Equal(t, "db-1", c.waitNewWriter(t, "db-0"))
		rolesSettled(t, ns)
		holder, n0 := leaseState(t, ns, "db-lock-lease")
		require.Equal(t, "db-1", holder)

		// Quiet at rest: 30s with leaseDurationSeconds=2, after the switchover's last writes (the
		// annotation's removal, the status) have been seen.
		time.Sleep(3 * time.Second)
		_, _, p0, l0, k0 := c.snapshot()
		time.Sleep(30 * time.Second)
		_, _, p1, l1, k1 := c.snapshot()
		t.Logf("at rest for 30s (leaseDurationSeconds=2): %d pod writes, %d Lease writes, %d lock writes => %d API writes per minute",
			p1-p0, l1-l0, k1-k0, 2*((p1-p0)+(l1-l0)+(k1-k0)))
		assert.Zero(t, p1-p0+k1-k0, "only Lease renewals at rest")
		assert.InDelta(t, 30, l1-l0, 4, "one renewal per half lease duration")

		op.Stop()
		time.Sleep(6 * time.Second) // 3x the lease duration: the Lease has expired
		op.Start()
		testsupport.NeverWithin(t, 5*time.Second, 100*time.Millisecond, func() bool {
			h, n := leaseState(t, ns, "db-lock-lease")
			return h != "db-1" || n != n0
		}, "no needless flip after the operator's downtime")
		assert.Equal(t, "db-1", rolesSettled(t, ns))
	})

	t.Run("two-locks-same-lease", func(t *testing.T) {
		ns, _ := setup(t, lockSpec{})
		leaseStatefulSet(t, ns, "other", 2)
		createLock(t, ns, lockSpec{name: "other-lock", statefulSet: "other", lease: "db-lock-lease", duration: 10})
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			status, reason := lockCondition(t, ns, "other-lock", leasev1.ConditionAvailable)
			assert.Equal(c, "False", status)
			assert.Equal(c, leasev1.ReasonLeaseConflict, reason)
		}, framework.Timeout, framework.Tick)
		holder, _ := leaseState(t, ns, "db-lock-lease")
		assert.Equal(t, "db-0", holder, "the first lock's Lease is untouched")
		for _, name := range []string{"other-0", "other-1"} {
			assert.Empty(t, framework.GetPod(t, ns, name).Labels[leasev1.RoleLabel], "pods of the conflicting lock are not labelled")
		}
		// Once the first lock is deleted (its pods lose their role labels, its Lease goes with the garbage
		// collector or the operator), the second takes over; never two writers (the invariant checker).
		require.NoError(t, framework.Client.Delete(t.Context(), &leasev1.StatefulSetLock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-lock"}}))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, leasev1.RoleWriter, getPodOrEmpty(t, ns, "other-0"))
			for _, name := range []string{"db-0", "db-1"} {
				assert.Empty(c, getPodOrEmpty(t, ns, name), "db pods lose their role with their lock")
			}
		}, framework.Timeout, framework.Tick)
	})
}

func getPodOrEmpty(t *testing.T, ns, name string) string {
	pod, err := framework.FetchPod(t, ns, name)
	if err != nil {
		return "?"
	}
	return pod.Labels[leasev1.RoleLabel]
}
