//go:build integration

package manager

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/statefulops/statefulops/shared/testsupport"
)

// Two replicas of a binary against one API server: only the leader reconciles; when the leader stops
// gracefully (SIGTERM, as the kubelet stops a pod in a rollout or a drain), it exits cleanly, the standby
// takes the Lease over and reconciles. Behaviour only: how long it takes is BenchmarkLeaderHandover's
// figure (TestBenchLeaderHandover, build tag bench).
func TestStandbyReconcilesAfterTheLeadersGracefulStop(t *testing.T) {
	clientset, kubeconfig := startHandoverEnv(t)
	const id = "handover-graceful.statefulops.dev"
	holder := func() string {
		lease, err := clientset.CoordinationV1().Leases("default").Get(t.Context(), id, metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil {
			return ""
		}
		return *lease.Spec.HolderIdentity
	}

	leader := startReplica(t, kubeconfig, id, DefaultLeaderElection)
	leader.waitFor(t, "reconciled ", time.Minute)
	first := holder()
	require.NotEmpty(t, first, "the leader holds the Lease")

	standby := startReplica(t, kubeconfig, id, DefaultLeaderElection)
	standby.waitFor(t, "standby", time.Minute)
	testsupport.NeverWithin(t, 3*time.Second, 100*time.Millisecond, func() bool {
		select {
		case l := <-standby.lines:
			return l.text != "standby"
		default:
			return false
		}
	}, "the standby does not reconcile while the leader leads")
	assert.Equal(t, first, holder(), "the leader keeps the Lease")

	leader.stop(t, syscall.SIGTERM)
	require.NoError(t, leader.waitExit(t, time.Minute), "a SIGTERMed leader exits cleanly")
	standby.waitFor(t, "reconciled ", time.Minute)
	now := holder()
	assert.NotEmpty(t, now)
	assert.NotEqual(t, first, now, "the standby holds the Lease")
	lease, err := clientset.CoordinationV1().Leases("default").Get(t.Context(), id, metav1.GetOptions{})
	require.NoError(t, err)
	assertLeaseTimings(t, lease, DefaultLeaderElection)
}

// When the leader stops without releasing the Lease (SIGKILL: what a standby sees of a lost node), the
// standby takes it over once it expires and reconciles. Short timings keep the test short; the figures
// of the shipped ones are TestBenchLeaderHandover's.
func TestStandbyReconcilesAfterTheLeaderIsKilled(t *testing.T) {
	clientset, kubeconfig := startHandoverEnv(t)
	const id = "handover-killed.statefulops.dev"
	timings := LeaderElectionTimings{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond}
	leader := startReplica(t, kubeconfig, id, timings)
	leader.waitFor(t, "reconciled ", time.Minute)
	standby := startReplica(t, kubeconfig, id, timings)
	standby.waitFor(t, "standby", time.Minute)
	lease, err := clientset.CoordinationV1().Leases("default").Get(t.Context(), id, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, lease.Spec.HolderIdentity)
	first := *lease.Spec.HolderIdentity

	leader.stop(t, syscall.SIGKILL)
	require.Error(t, leader.waitExit(t, time.Minute), "killed")
	lease, err = clientset.CoordinationV1().Leases("default").Get(t.Context(), id, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, lease.Spec.HolderIdentity)
	assert.Equal(t, first, *lease.Spec.HolderIdentity, "a killed leader releases nothing")
	standby.waitFor(t, "reconciled ", time.Minute)
	lease, err = clientset.CoordinationV1().Leases("default").Get(t.Context(), id, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, lease.Spec.HolderIdentity)
	assert.NotEqual(t, first, *lease.Spec.HolderIdentity, "the standby holds the Lease")
	assertLeaseTimings(t, lease, timings)
}

// The new leader wrote the Lease with the duration of its flags.
func assertLeaseTimings(t *testing.T, lease *coordinationv1.Lease, timings LeaderElectionTimings) {
	t.Helper()
	require.NotNil(t, lease.Spec.LeaseDurationSeconds)
	assert.EqualValues(t, timings.LeaseDuration/time.Second, *lease.Spec.LeaseDurationSeconds)
}
