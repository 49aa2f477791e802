package manager

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/leaderelection"
)

// LeaderElectionTimings are the three durations of client-go's leader election, which controller-runtime
// runs for the manager. With client-go's algorithm (k8s.io/client-go/tools/leaderelection):
//
//   - the leader renews the Lease every RetryPeriod: 60/RetryPeriod Lease writes per minute at rest, per
//     operator, whatever the number of replicas (a standby only reads the Lease, at the same pace);
//   - a standby polls the Lease every RetryPeriod to 2.2×RetryPeriod (client-go's JitterFactor 1.2) and
//     takes it as soon as it is free. A graceful stop (SIGTERM: rollout, drain, scale-down) releases the
//     Lease (LeaderElectionReleaseOnCancel), so the standby leads within one of its polls: at most
//     2.2×RetryPeriod after the release;
//   - a leader that stops renewing without releasing (SIGKILL, node lost, partition) is replaced once
//     LeaseDuration has passed since the standby last saw the Lease change, at its next poll: about
//     LeaseDuration + RetryPeriod, at most LeaseDuration + 2×2.2×RetryPeriod;
//   - a leader that cannot renew for RenewDeadline (API server unreachable) gives the Lease up and the
//     process exits (the kubelet restarts it): a longer RenewDeadline rides out longer API server
//     outages; LeaseDuration − RenewDeadline is the margin in which an old leader that lost the Lease
//     may still finish a reconcile before a successor may start.
//
// controller-runtime's defaults are 15s / 10s / 2s: 30 writes per minute, a graceful handover of up to
// 4.4s, about 17s after a SIGKILL. docs/upgrading.md has the figures measured with ours
// (e2e/handover, TestBenchLeaderHandover, part of make bench).
type LeaderElectionTimings struct {
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// DefaultLeaderElection are the timings of a binary whose Options leave them unset: controller-runtime's
// LeaseDuration and RenewDeadline with a 1s RetryPeriod, so that a graceful handover (every rollout and
// drain) takes at most 2.2s instead of 4.4s, for 60 Lease writes per minute instead of 30. The failover
// after a SIGKILL stays about 16s, long enough to ride out a 10s API server outage without a restart.
var DefaultLeaderElection = LeaderElectionTimings{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: time.Second}

// FastFailoverLeaderElection are the timings of the operators a workload waits on when a node is lost
// with the operator's leader on it: singleton-operator (a held pod waits for its release) and
// lease-operator (a StatefulSet has no writer until the operator promotes one). A 10s LeaseDuration
// brings the failover after a SIGKILL to about 11s instead of 16s; the cost is a 6s RenewDeadline, so an
// API server unreachable for more than 6s restarts the leader (its standby, or itself, takes over), and
// a 4s margin between an old leader giving up and a successor starting.
var FastFailoverLeaderElection = LeaderElectionTimings{LeaseDuration: 10 * time.Second, RenewDeadline: 6 * time.Second, RetryPeriod: time.Second}

// ControllerRuntimeLeaderElection are controller-runtime's own defaults, the baseline of the handover
// benchmark.
var ControllerRuntimeLeaderElection = LeaderElectionTimings{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}

// orDefault fills the zero fields of t from DefaultLeaderElection.
func (t LeaderElectionTimings) orDefault() LeaderElectionTimings {
	if t.LeaseDuration == 0 {
		t.LeaseDuration = DefaultLeaderElection.LeaseDuration
	}
	if t.RenewDeadline == 0 {
		t.RenewDeadline = DefaultLeaderElection.RenewDeadline
	}
	if t.RetryPeriod == 0 {
		t.RetryPeriod = DefaultLeaderElection.RetryPeriod
	}
	return t
}

// Validate refuses timings client-go would refuse when the manager starts (LeaseDuration >
// RenewDeadline > 1.2×RetryPeriod), and a LeaseDuration that is not whole seconds (the Lease stores
// seconds, so a standby would wait a truncated duration).
func (t LeaderElectionTimings) Validate() error {
	switch {
	case t.RetryPeriod <= 0:
		return fmt.Errorf("--leader-elect-retry-period must be positive, not %s", t.RetryPeriod)
	case t.LeaseDuration%time.Second != 0:
		return fmt.Errorf("--leader-elect-lease-duration must be whole seconds (the Lease stores seconds), not %s", t.LeaseDuration)
	case t.LeaseDuration <= t.RenewDeadline:
		return fmt.Errorf("--leader-elect-lease-duration (%s) must be greater than --leader-elect-renew-deadline (%s)", t.LeaseDuration, t.RenewDeadline)
	case t.RenewDeadline <= time.Duration(leaderelection.JitterFactor*float64(t.RetryPeriod)):
		return fmt.Errorf("--leader-elect-renew-deadline (%s) must be greater than %.1f × --leader-elect-retry-period (%s)",
			t.RenewDeadline, leaderelection.JitterFactor, t.RetryPeriod)
	}
	return nil
}

// addFlags registers the three timings on fs with t's values as defaults (kube-controller-manager's flag
// names).
func (t *LeaderElectionTimings) addFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&t.LeaseDuration, "leader-elect-lease-duration", t.LeaseDuration,
		"How long a standby waits, after the leader last renewed, before it takes a Lease that was not released (leader SIGKILLed or its node lost). Whole seconds.")
	fs.DurationVar(&t.RenewDeadline, "leader-elect-renew-deadline", t.RenewDeadline,
		"How long the leader retries renewing its Lease before it gives leadership up and exits. Less than --leader-elect-lease-duration.")
	fs.DurationVar(&t.RetryPeriod, "leader-elect-retry-period", t.RetryPeriod,
		"How often the leader renews the Lease (60/period writes per minute) and a standby polls it; a released Lease is taken within 2.2 periods.")
}
