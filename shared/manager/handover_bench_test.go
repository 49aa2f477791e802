//go:build bench

package manager

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestBenchLeaderHandover measures how long a binary built on this bootstrap has no leader reconciling
// when its leader goes, with two replicas (processes) against one envtest API server:
//
//   - graceful: from the SIGTERM sent to the leader (the kubelet's stop in a rollout, a drain, a
//     scale-down) to the first reconcile by the standby;
//   - abrupt: from the SIGKILL sent to the leader (what a standby sees of a lost node: renewals stop,
//     nothing is released) to the same.
//
// Each with our timings (DefaultLeaderElection, FastFailoverLeaderElection) and controller-runtime's
// defaults, interleaved in the same run. The standby has been running for 2s plus a random part of a
// retry period when the leader is stopped, so the stop falls anywhere in the renew and poll cycles.
// HANDOVER_GRACEFUL_REPS and HANDOVER_ABRUPT_REPS set the repetitions (default 10 and 5). Figures only,
// no assertion on them (TestStandbyReconcilesAfterTheLeadersGracefulStop asserts the behaviour):
//
//	cd shared && go test -tags bench -count=1 -v -run '^TestBenchLeaderHandover$' ./manager/
func TestBenchLeaderHandover(t *testing.T) {
	_, kubeconfig := startHandoverEnv(t)
	configs := []struct {
		name    string
		timings LeaderElectionTimings
	}{
		{"ours (DefaultLeaderElection)", DefaultLeaderElection},
		{"ours (FastFailoverLeaderElection: singleton, lease)", FastFailoverLeaderElection},
		{"controller-runtime defaults", ControllerRuntimeLeaderElection},
	}
	for _, mode := range []struct {
		name   string
		signal syscall.Signal
		reps   int
	}{
		{"graceful stop (SIGTERM)", syscall.SIGTERM, repsFromEnv(t, "HANDOVER_GRACEFUL_REPS", 10)},
		{"abrupt stop (SIGKILL)", syscall.SIGKILL, repsFromEnv(t, "HANDOVER_ABRUPT_REPS", 5)},
	} {
		leaders := make([]*replica, len(configs))
		samples := make([][]time.Duration, len(configs))
		for i, c := range configs {
			id := fmt.Sprintf("handover-bench-%d-%d.statefulops.dev", mode.signal, i)
			leaders[i] = startReplica(t, kubeconfig, id, c.timings)
			leaders[i].waitFor(t, "reconciled ", time.Minute)
		}
		for rep := range mode.reps {
			for i, c := range configs {
				id := fmt.Sprintf("handover-bench-%d-%d.statefulops.dev", mode.signal, i)
				standby := startReplica(t, kubeconfig, id, c.timings)
				standby.waitFor(t, "standby", time.Minute)
				time.Sleep(2*time.Second + rand.N(c.timings.RetryPeriod))
				stopped := leaders[i].stop(t, mode.signal)
				led := standby.waitFor(t, "reconciled ", 2*time.Minute)
				samples[i] = append(samples[i], led.Sub(stopped))
				err := leaders[i].waitExit(t, time.Minute)
				if mode.signal == syscall.SIGTERM && err != nil {
					t.Fatalf("%s, repetition %d: the SIGTERMed leader exited with %v", c.name, rep+1, err)
				}
				leaders[i] = standby
			}
		}
		for i, c := range configs {
			d := samples[i]
			slices.Sort(d)
			t.Logf("bench: leader handover: %s, %s %s/%s/%s: n=%d p50=%s max=%s; Lease writes at rest %.0f/min",
				mode.name, c.name, c.timings.LeaseDuration, c.timings.RenewDeadline, c.timings.RetryPeriod,
				len(d), d[len(d)/2].Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond),
				time.Minute.Seconds()/c.timings.RetryPeriod.Seconds())
		}
	}
}

func repsFromEnv(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}
