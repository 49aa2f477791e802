//go:build e2e

package lease

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/e2e/framework"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

// upgradeLocks is the number of StatefulSets, each with its lock (and namespace, as the checker
// follows one writer per namespace), whose failovers are in flight at each move.
const upgradeLocks = 3

// upgradeFailoverDelay is the failoverDelaySeconds of the test locks. It is what keeps a failover in
// flight across a move: the writer is made not Ready just before the move, and the old operator
// would replace it within milliseconds without a delay; with it, the old operator holds the failover
// (FailoverDelayed) until it is replaced, and the new one, which counts the delay from when it first
// sees the pod not Ready (the operator keeps that in memory), completes it. It is longer than a move
// takes to a new leader (a few seconds: the new pod's readiness, then the old one releases its
// Lease on SIGTERM), so that on a quiet machine the new leader finds each failover still pending.
const upgradeFailoverDelay = 15

// upgradeLock is one StatefulSet "db" of 3 kwok pods with its lock "db-lock" and its checker.
type upgradeLock struct {
	ns string
	ch *checker
}

// TestLeaseUpgradeUnderLoad: lease-operator installed from deploy/lease-operator.yaml runs as a real
// pod on the real node and manages 3 StatefulSets of kwok pods, each with a StatefulSetLock. Before
// each move of framework.UpgradeSteps, the writer of every lock is made not Ready (its readiness gate
// set False, as TestLease does), so that the failovers are delayed (failoverDelaySeconds) and pending
// when the operator's Deployment is moved to another image. After the move, every lock elects another
// Ready pod, with exactly one Lease transition, and the checkers (TestLease's watchLease: watch events
// after which two pods carry sts-role=writer) count 0 for the whole test.
func TestLeaseUpgradeUnderLoad(t *testing.T) {
	if !framework.PrepareUpgradeTest(t, "lease-operator") {
		return
	}

	locks := make([]upgradeLock, upgradeLocks)
	for i := range locks {
		ns := framework.NewNamespace(t)
		readinessKeeper(t, ns)
		ch := watchLease(t, ns)
		ch.excludeLatency() // failoverDelaySeconds and the operator's replacement make them long on purpose
		leaseStatefulSet(t, ns, "db", 3)
		createLock(t, ns, lockSpec{name: "db-lock", statefulSet: "db", lease: "db-lock-lease", duration: 10, failoverDelay: upgradeFailoverDelay})
		locks[i] = upgradeLock{ns: ns, ch: ch}
	}
	for _, l := range locks {
		require.Equal(t, "db-0", l.ch.waitWriter(t), "%s: initial election: lowest ordinal", l.ns)
		rolesSettled(t, l.ns)
	}

	var leadership []time.Duration
	inFlight, pendingAtNewLeader := 0, 0
	for i, step := range framework.UpgradeSteps() {
		// Start one failover per lock: its writer stops being Ready.
		olds := make([]string, len(locks))
		epochs := make([]int32, len(locks))
		for j, l := range locks {
			olds[j], _, _, _, _ = l.ch.snapshot()
			holder, n := leaseState(t, l.ns, "db-lock-lease")
			require.Equal(t, olds[j], holder, "%s: the Lease names the labelled writer", l.ns)
			epochs[j] = n
			setGate(t, l.ns, olds[j], false)
		}
		// Started: the operator reports each failover delayed. Not finished: the writer is still the
		// old pod when the move is made.
		for j, l := range locks {
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				status, reason := lockCondition(t, l.ns, "db-lock", leasev1.ConditionProgressing)
				assert.Equal(c, "True", status)
				assert.Equal(c, leasev1.ReasonFailoverDelayed, reason)
			}, framework.Timeout, 50*time.Millisecond, "%s: failover of %s delayed", l.ns, olds[j])
		}
		var pending []string
		for j, l := range locks {
			w, _, _, _, _ := l.ch.snapshot()
			require.Equal(t, olds[j], w, "%s: the failover finished before the move (failoverDelaySeconds=%d)", l.ns, upgradeFailoverDelay)
			pending = append(pending, l.ns+"/"+olds[j])
		}
		inFlight += len(pending)
		t.Logf("move %d (%s to %s): %d failovers in flight (writer not Ready, lock FailoverDelayed): %s",
			i+1, step.Move, step.Version, len(pending), strings.Join(pending, ", "))

		took := framework.UpgradeOperator(t, "lease-operator", step.Version, step.Move)
		leadership = append(leadership, took.Round(time.Millisecond))

		// Which failovers the new leader found pending (the old operator completes the others when a
		// slow move keeps it leading past the delay): logged, as it depends on the machine's load.
		var byNew []string
		for j, l := range locks {
			if w, _, _, _, _ := l.ch.snapshot(); w == olds[j] {
				byNew = append(byNew, l.ns)
			}
		}
		pendingAtNewLeader += len(byNew)

		// Completed: each lock elects another Ready pod, once, and says so in its status.
		for j, l := range locks {
			w := l.ch.waitNewWriter(t, olds[j])
			pod := framework.GetPod(t, l.ns, w)
			assert.True(t, usablePod(pod), "%s: new writer %s is Ready and not terminating", l.ns, w)
			require.Equal(t, w, rolesSettled(t, l.ns), "%s: one writer, every pod labelled", l.ns)
			holder, n := leaseState(t, l.ns, "db-lock-lease")
			assert.Equal(t, w, holder, "%s: the Lease names the new writer", l.ns)
			assert.Equal(t, epochs[j]+1, n, "%s: exactly one transition for the failover across the move", l.ns)
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				lock := &leasev1.StatefulSetLock{}
				require.NoError(c, framework.Client.Get(t.Context(), client.ObjectKey{Namespace: l.ns, Name: "db-lock"}, lock))
				assert.Equal(c, w, lock.Status.WriterPod)
				assert.Equal(c, leasev1.FailoverReasonWriterNotReady, lock.Status.LastFailoverReason)
				status, reason := lockCondition(t, l.ns, "db-lock", leasev1.ConditionReady)
				assert.Equal(c, "True", status, "Ready condition (%s)", reason)
			}, framework.Timeout, framework.Tick, "%s: lock status after the failover to %s", l.ns, w)
			t.Logf("move %d: %s: writer %s -> %s (epoch %d -> %d)", i+1, l.ns, olds[j], w, epochs[j], n)
		}
		require.Zero(t, upgradeViolations(locks), "instants with two writers after move %d", i+1)
		t.Logf("move %d: %d of %d failovers were still pending when the new leader took over (%s after the move)",
			i+1, len(byNew), len(locks), took.Round(time.Millisecond))

		// The old writers recover: 3 Ready pods again for the next move's failovers (the new writers
		// keep the role: the writer is sticky).
		for j, l := range locks {
			setGate(t, l.ns, olds[j], true)
			framework.WaitStatefulSetReady(t, l.ns, "db", 3)
		}
	}

	violations := upgradeViolations(locks)
	require.Zero(t, violations, "instants with two pods labelled sts-role=writer")
	t.Logf("upgrade: %s: %d moves, %d operations in flight across moves, %d violations, leadership after each move: %v",
		"lease-operator", len(framework.UpgradeSteps()), inFlight, violations, leadership)
	t.Logf("upgrade: lease-operator: %d of %d failovers completed by the new leader (failoverDelaySeconds=%d)",
		pendingAtNewLeader, inFlight, upgradeFailoverDelay)
}

// upgradeViolations is the sum of the checkers' instants with two writers.
func upgradeViolations(locks []upgradeLock) int {
	n := 0
	for _, l := range locks {
		l.ch.mu.Lock()
		n += l.ch.doubles
		l.ch.mu.Unlock()
	}
	return n
}
