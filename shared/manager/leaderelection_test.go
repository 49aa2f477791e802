package manager

import (
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
)

// A binary's leader-election timings are the defaults of the three flags (DefaultLeaderElection where it
// sets none), the flags override them, and they reach the manager's options.
func TestLeaderElectionTimingsAreFlagsWithTheBinarysDefaults(t *testing.T) {
	defaults := func(cmdOpts Options) map[string]string {
		cmd := NewRootCommand(cmdOpts)
		out := map[string]string{}
		for _, name := range []string{"leader-elect-lease-duration", "leader-elect-renew-deadline", "leader-elect-retry-period"} {
			f := cmd.Flags().Lookup(name)
			require.NotNil(t, f, "flag --%s", name)
			out[name] = f.DefValue
		}
		return out
	}
	assert.Equal(t, map[string]string{
		"leader-elect-lease-duration": DefaultLeaderElection.LeaseDuration.String(),
		"leader-elect-renew-deadline": DefaultLeaderElection.RenewDeadline.String(),
		"leader-elect-retry-period":   DefaultLeaderElection.RetryPeriod.String(),
	}, defaults(Options{Name: "test-operator"}))
	assert.Equal(t, map[string]string{
		"leader-elect-lease-duration": "10s",
		"leader-elect-renew-deadline": "6s",
		"leader-elect-retry-period":   DefaultLeaderElection.RetryPeriod.String(),
	}, defaults(Options{Name: "test-operator", LeaderElection: LeaderElectionTimings{LeaseDuration: 10 * time.Second, RenewDeadline: 6 * time.Second}}),
		"a field the binary leaves zero takes the package default")

	// The flags override the binary's defaults, and the manager runs with what they hold.
	f := &flags{metricsAddr: "0", leaderElect: true, leaderElection: LeaderElectionTimings{LeaseDuration: 10 * time.Second}.orDefault()}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	f.leaderElection.addFlags(fs)
	require.NoError(t, fs.Parse([]string{"--leader-elect-renew-deadline=4s", "--leader-elect-retry-period=500ms"}))
	mgrOpts, _, err := managerOptions(Options{Name: "test-operator"}, f, runtime.NewScheme(), &drain{})
	require.NoError(t, err)
	require.NotNil(t, mgrOpts.LeaseDuration)
	require.NotNil(t, mgrOpts.RenewDeadline)
	require.NotNil(t, mgrOpts.RetryPeriod)
	assert.Equal(t, 10*time.Second, *mgrOpts.LeaseDuration)
	assert.Equal(t, 4*time.Second, *mgrOpts.RenewDeadline)
	assert.Equal(t, 500*time.Millisecond, *mgrOpts.RetryPeriod)
	assert.True(t, mgrOpts.LeaderElectionReleaseOnCancel, "a graceful stop releases the Lease")
}

func TestLeaderElectionTimingsThatClientGoRefusesAreRefusedUpFront(t *testing.T) {
	for name, timings := range map[string]LeaderElectionTimings{
		"lease not longer than renew":         {LeaseDuration: 10 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: time.Second},
		"renew not longer than 1.2×retry":     {LeaseDuration: 15 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 2 * time.Second},
		"lease duration not in whole seconds": {LeaseDuration: 7500 * time.Millisecond, RenewDeadline: 5 * time.Second, RetryPeriod: time.Second},
		"no retry period":                     {LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Error(t, timings.Validate())
			_, _, err := managerOptions(Options{Name: "test-operator"}, &flags{metricsAddr: "0", leaderElect: true, leaderElection: timings}, runtime.NewScheme(), &drain{})
			assert.Error(t, err, "the binary refuses to start")
			_, _, err = managerOptions(Options{Name: "test-operator"}, &flags{metricsAddr: "0", leaderElect: false, leaderElection: timings}, runtime.NewScheme(), &drain{})
			assert.NoError(t, err, "without leader election the timings are unused")
		})
	}
	for _, timings := range []LeaderElectionTimings{DefaultLeaderElection, ControllerRuntimeLeaderElection} {
		assert.NoError(t, timings.Validate())
	}
}
