//go:build integration

package manager_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/statefulops/statefulops/shared/manager"
	"github.com/statefulops/statefulops/shared/manager/replicatest"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// TestHandoverReplicaProcess is the replica process of the tests below (replicatest).
func TestHandoverReplicaProcess(t *testing.T) { replicatest.ReplicaProcess(t) }

// Two replicas of a binary against one API server: only the leader reconciles; when the leader stops
// gracefully (SIGTERM, as the kubelet stops a pod in a rollout or a drain), it exits cleanly, the standby
// takes the Lease over and reconciles. Behaviour only: how long it takes is e2e/handover's
// TestBenchLeaderHandover.
func TestStandbyReconcilesAfterTheLeadersGracefulStop(t *testing.T) {
	clientset, kubeconfig := replicatest.StartEnv(t)
	const id = "handover-graceful.statefulops.dev"

	leader := replicatest.Start(t, kubeconfig, id, manager.DefaultLeaderElection)
	leader.WaitFor(t, "reconciled ", time.Minute)
	first := holder(t, clientset, id)
	require.NotEmpty(t, first, "the leader holds the Lease")

	standby := replicatest.Start(t, kubeconfig, id, manager.DefaultLeaderElection)
	standby.WaitFor(t, "standby", time.Minute)
	testsupport.NeverWithin(t, 3*time.Second, 100*time.Millisecond, func() bool { return standby.Printed("reconciled ") },
		"the standby does not reconcile while the leader leads")
	assert.Equal(t, first, holder(t, clientset, id), "the leader keeps the Lease")

	leader.Stop(t, syscall.SIGTERM)
	require.NoError(t, leader.WaitExit(t, time.Minute), "a SIGTERMed leader exits cleanly")
	standby.WaitFor(t, "reconciled ", time.Minute)
	now := holder(t, clientset, id)
	assert.NotEmpty(t, now)
	assert.NotEqual(t, first, now, "the standby holds the Lease")
	assertLeaseTimings(t, lease(t, clientset, id), manager.DefaultLeaderElection)
}

// When the leader stops without releasing the Lease (SIGKILL: what a standby sees of a lost node), the
// standby takes it over once it expires and reconciles. Short timings keep the test short; the figures
// of the shipped ones are e2e/handover's TestBenchLeaderHandover.
func TestStandbyReconcilesAfterTheLeaderIsKilled(t *testing.T) {
	clientset, kubeconfig := replicatest.StartEnv(t)
	const id = "handover-killed.statefulops.dev"
	timings := manager.LeaderElectionTimings{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond}
	leader := replicatest.Start(t, kubeconfig, id, timings)
	leader.WaitFor(t, "reconciled ", time.Minute)
	standby := replicatest.Start(t, kubeconfig, id, timings)
	standby.WaitFor(t, "standby", time.Minute)
	first := holder(t, clientset, id)
	require.NotEmpty(t, first)

	leader.Stop(t, syscall.SIGKILL)
	require.Error(t, leader.WaitExit(t, time.Minute), "killed")
	assert.Equal(t, first, holder(t, clientset, id), "a killed leader releases nothing")
	standby.WaitFor(t, "reconciled ", time.Minute)
	assert.NotEqual(t, first, holder(t, clientset, id), "the standby holds the Lease")
	assertLeaseTimings(t, lease(t, clientset, id), timings)
}

func lease(t *testing.T, clientset kubernetes.Interface, id string) *coordinationv1.Lease {
	t.Helper()
	l, err := clientset.CoordinationV1().Leases("default").Get(t.Context(), id, metav1.GetOptions{})
	require.NoError(t, err)
	return l
}

func holder(t *testing.T, clientset kubernetes.Interface, id string) string {
	t.Helper()
	if h := lease(t, clientset, id).Spec.HolderIdentity; h != nil {
		return *h
	}
	return ""
}

// The leader wrote the Lease with the duration of its flags.
func assertLeaseTimings(t *testing.T, lease *coordinationv1.Lease, timings manager.LeaderElectionTimings) {
	t.Helper()
	require.NotNil(t, lease.Spec.LeaseDurationSeconds)
	assert.EqualValues(t, timings.LeaseDuration/time.Second, *lease.Spec.LeaseDurationSeconds)
}
