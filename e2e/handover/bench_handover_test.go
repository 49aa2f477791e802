//go:build e2e && bench

// Package handover measures how long a binary built on the shared bootstrap (shared/manager) has no
// leader reconciling when its leader goes, with two replicas as processes against one envtest API
// server (shared/manager/replicatest). Part of `make bench`; it needs no cluster.
package handover

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/statefulops/statefulops/e2e/benchfmt"
	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/shared/manager"
	"github.com/statefulops/statefulops/shared/manager/replicatest"
)

// TestHandoverReplicaProcess is the replica process of the benchmark (replicatest).
func TestHandoverReplicaProcess(t *testing.T) { replicatest.ReplicaProcess(t) }

const (
	gracefulReps = 10
	abruptReps   = 5
)

// TestBenchLeaderHandover measures, per configuration of leader-election timings:
//
//   - graceful: from the SIGTERM sent to the leader (the kubelet's stop in a rollout, a drain, a
//     scale-down) to the first reconcile by the standby;
//   - abrupt: from the SIGKILL sent to the leader (what a standby sees of a lost node: renewals stop,
//     nothing is released) to the same.
//
// Our two configurations (manager.DefaultLeaderElection: cluster-, rollout- and extended-operator;
// manager.FastFailoverLeaderElection: singleton- and lease-operator) each beside controller-runtime's
// defaults as the baseline, all interleaved in the same run. The standby has run for 2 s plus a random
// part of a retry period when the leader is stopped, so the stop falls anywhere in the renew and poll
// cycles. The figures include the new leader's controller start and first list.
func TestBenchLeaderHandover(t *testing.T) {
	_, kubeconfig := replicatest.StartEnv(t)
	configs := []manager.LeaderElectionTimings{manager.DefaultLeaderElection, manager.FastFailoverLeaderElection, manager.ControllerRuntimeLeaderElection}
	families := []string{"cluster, rollout, extended", "singleton, lease"}
	for _, mode := range []struct {
		name   string
		signal syscall.Signal
		reps   int
		target []benchfmt.Target
	}{
		// The goal: a graceful handover well under 3 s.
		{"graceful stop (SIGTERM)", syscall.SIGTERM, gracefulReps, []benchfmt.Target{benchfmt.AtMost("max", 3000)}},
		{"abrupt stop (SIGKILL)", syscall.SIGKILL, abruptReps, nil},
	} {
		samples := measure(t, kubeconfig, configs, mode.signal, mode.reps)
		baseline := configs[len(configs)-1]
		for i, family := range families {
			c := configs[i]
			framework.RecordFigure(t, benchfmt.Figure{
				Operator: family,
				Name:     fmt.Sprintf("leader handover, %s, %s", mode.name, timingsName(c)),
				Unit:     "ms",
				Where:    "envtest",
				Samples:  samples[i],
				Baseline: "controller-runtime's defaults, " + timingsName(baseline), BaselineSamples: samples[len(configs)-1],
				Targets: mode.target,
				Note: fmt.Sprintf("two replicas of the shared bootstrap (processes, a trivial controller) against one envtest API server; "+
					"from the signal sent to the leader to the standby's first reconcile; Lease writes at rest %.0f/min (baseline %.0f/min); "+
					"the configurations interleaved in the same run. See docs/upgrading.md.",
					time.Minute.Seconds()/c.RetryPeriod.Seconds(), time.Minute.Seconds()/baseline.RetryPeriod.Seconds()),
			})
		}
	}
}

// measure runs reps handovers per configuration, interleaved, and returns their durations in ms.
func measure(t *testing.T, kubeconfig string, configs []manager.LeaderElectionTimings, signal syscall.Signal, reps int) [][]float64 {
	t.Helper()
	leaders := make([]*replicatest.Replica, len(configs))
	ids := make([]string, len(configs))
	for i, c := range configs {
		ids[i] = fmt.Sprintf("handover-bench-%d-%d.statefulops.dev", signal, i)
		leaders[i] = replicatest.Start(t, kubeconfig, ids[i], c)
		leaders[i].WaitFor(t, "reconciled ", time.Minute)
	}
	samples := make([][]float64, len(configs))
	for rep := range reps {
		for i, c := range configs {
			standby := replicatest.Start(t, kubeconfig, ids[i], c)
			standby.WaitFor(t, "standby", time.Minute)
			time.Sleep(2*time.Second + rand.N(c.RetryPeriod))
			stopped := leaders[i].Stop(t, signal)
			led := standby.WaitFor(t, "reconciled ", 2*time.Minute)
			samples[i] = append(samples[i], framework.LeaseBenchMillis(led.Sub(stopped)))
			if err := leaders[i].WaitExit(t, time.Minute); signal == syscall.SIGTERM && err != nil {
				t.Fatalf("%s, repetition %d: the SIGTERMed leader exited with %v", timingsName(c), rep+1, err)
			}
			leaders[i] = standby
		}
	}
	return samples
}

func timingsName(c manager.LeaderElectionTimings) string {
	return fmt.Sprintf("lease %s / renew %s / retry %s", c.LeaseDuration, c.RenewDeadline, c.RetryPeriod)
}
