//go:build e2e

package lease

import (
	"context"
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/e2e/framework"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

// TestChaosLease is the lease-operator campaign: writer failovers (the writer made not Ready through
// its readiness gate, or deleted) in several 3-replica StatefulSets at once, each with its own
// StatefulSetLock and namespace, while the operator is SIGKILLed and restarted, its API requests
// fail at random (through apiFaultProxy), pods are force-deleted, kwok nodes go NotReady and the API
// server restarts (between two rounds, since the checkers' watches end with it). The checker is
// TestLease's watchLease: watch events after which two pods carry sts-role=writer (must be 0).
// Operations: failovers completed.
func TestChaosLease(t *testing.T) {
	c := framework.NewCampaign(t, "lease", "writer failovers under operator kills, API errors, force deletes, NotReady nodes and API-server restarts",
		"instants with two pods labelled sts-role=writer")
	proxy := framework.StartAPIFaultProxy(t, c.Rand("proxy"))
	op := framework.StartChaosOperator(t, "lease-operator", proxy)

	c.Schedule("operator-kill", 10*time.Second, 30*time.Second, c.KillAndRestart(op))
	c.Schedule("operator-upgrade", 20*time.Second, 60*time.Second, c.UpgradeAndRestart(op))
	c.Schedule("api-errors", 2*time.Second, 8*time.Second, c.APIErrorBursts(proxy, 4*time.Second))
	c.Schedule("pod-force-delete", 3*time.Second, 10*time.Second, c.ForceDeletePod(metav1.NamespaceAll, "app=db", nil))
	c.Schedule("node-notready", 15*time.Second, 40*time.Second, c.FlipNode(8*time.Second))

	violations := c.ParallelRounds(t, c.N(15), "lock", leaseFailovers)
	c.Halt()
	c.RecordProxyFaults(proxy)
	c.Finish(violations)
}

// leaseFailovers runs n failovers of one StatefulSetLock in a namespace of its own and returns the
// instants with two writers its checker counted.
func leaseFailovers(t *testing.T, c *framework.Campaign, rng *rand.Rand, n int) int {
	ns := framework.NewNamespace(t)
	readinessKeeper(t, ns)
	ch := watchLease(t, ns)
	leaseStatefulSet(t, ns, "db", 3)
	createLock(t, ns, lockSpec{name: "db-lock", statefulSet: "db", lease: "db-lock-lease", duration: 10})
	waitFailover(t, ns, ch, "", "")
	for range n {
		if c.TimeUp() {
			break
		}
		leaseFailover(t, c, ns, ch, rng)
	}
	rolesSettled(t, ns)
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.doubles
}

// leaseFailover makes the current writer unusable in a random way, waits for another writer and
// restores the old one (its gate True again; a deleted pod is recreated by its StatefulSet).
func leaseFailover(t *testing.T, c *framework.Campaign, ns string, ch *checker, rng *rand.Rand) {
	t.Helper()
	waitFailover(t, ns, ch, "", "")
	old, _, _, _, _ := ch.snapshot()
	// The pod is recreated under the same name when it is force-deleted meanwhile; the operator then
	// rightly elects the new one, so the wait goes by the old pod's UID, not its name.
	var oldUID types.UID
	if p, err := framework.Clientset.CoreV1().Pods(ns).Get(t.Context(), old, metav1.GetOptions{}); err == nil {
		oldUID = p.UID
	}
	switch r := rng.Intn(10); {
	case r < 6: // readiness probe fails
		if patchGate(t.Context(), ns, old, false) != nil {
			return // force-deleted meanwhile: its replacement starts Ready
		}
		waitFailover(t, ns, ch, old, oldUID)
		// Restored after a random time, often within the failover, sometimes long after.
		go func(d time.Duration) {
			time.Sleep(d) // test driver, not a reconcile
			_ = patchGate(context.WithoutCancel(t.Context()), ns, old, true)
		}(time.Duration(rng.Intn(1500)) * time.Millisecond)
	case r < 9: // pod deleted gracefully (rollout, eviction)
		if framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), old, metav1.DeleteOptions{}) != nil {
			return
		}
		waitFailover(t, ns, ch, old, oldUID)
	default: // a very short readiness flap: may or may not cause a failover
		if patchGate(t.Context(), ns, old, false) != nil {
			return
		}
		_ = patchGate(t.Context(), ns, old, true) // gone meanwhile: nothing to restore
		return
	}
	c.Op(1)
	// Keep the StatefulSet whole, so that a writer can always be elected.
	require.Eventually(t, func() bool {
		sts, err := framework.Clientset.AppsV1().StatefulSets(ns).Get(t.Context(), "db", metav1.GetOptions{})
		return err == nil && sts.Status.ReadyReplicas >= 2 && ptr.Deref(sts.Spec.Replicas, 0) == 3
	}, 3*time.Minute, 50*time.Millisecond, "StatefulSet db has at least 2 Ready pods")
}

// waitFailover waits for a writer other than the pod old with UID oldUID (a pod recreated under that
// name is another writer), longer than the e2e tests do (the operator may be
// down for a while between a SIGKILL and winning its election again, on a loaded machine), and
// shows the namespace's pods and the lock when there is none.
func waitFailover(t *testing.T, ns string, ch *checker, old string, oldUID types.UID) {
	t.Helper()
	ok := assert.Eventually(t, func() bool {
		w, _, _, _, _ := ch.snapshot()
		if w == "" || w != old {
			return w != ""
		}
		p, err := framework.Clientset.CoreV1().Pods(ns).Get(t.Context(), w, metav1.GetOptions{})
		return err == nil && oldUID != "" && p.UID != oldUID
	}, 5*time.Minute, 20*time.Millisecond, "a writer other than %q (UID %s)", old, oldUID)
	if !ok {
		pods, _ := framework.Clientset.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		for _, p := range pods.Items {
			t.Logf("pod %s node %s ready %s deleting %t role %q", p.Name, p.Spec.NodeName, framework.PodCondition(&p, corev1.PodReady), p.DeletionTimestamp != nil, p.Labels[leasev1.RoleLabel])
		}
		lock := &leasev1.StatefulSetLock{}
		if err := framework.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "db-lock"}, lock); err == nil {
			t.Logf("lock status: %+v", lock.Status)
		}
		t.FailNow()
	}
}
