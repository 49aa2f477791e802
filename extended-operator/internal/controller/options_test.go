package controller

import (
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// The command line's flags keep their names, defaults and help text, and set the Options Setup uses.
func TestOptionsAddFlags(t *testing.T) {
	var o Options
	fs := pflag.NewFlagSet("extended-operator", pflag.ContinueOnError)
	o.AddFlags(fs)

	for name, want := range map[string]struct{ def, usage string }{
		"config-quiet-period": {"2s", "How long referenced ConfigMap/Secret data must stay unchanged before pods roll (bursts roll once), for ExtendedStatefulSets without spec.updateStrategy.configChangeQuietPeriod."},
		"config-max-delay":    {"10s", "Longest a configuration roll waits for edits to stop."},
		"config-hash-key-secret": {DefaultHashKeySecret,
			"Secret (namespace/name) holding the key of the config hash; created with a random key when missing."},
	} {
		f := fs.Lookup(name)
		require.NotNil(t, f, name)
		require.Equal(t, want.def, f.DefValue, name)
		require.Equal(t, want.usage, f.Usage, name)
	}
	require.Equal(t, Options{ConfigQuietPeriod: DefaultConfigQuietPeriod, ConfigMaxDelay: DefaultConfigMaxDelay,
		HashKeySecret: DefaultHashKeySecret}, o)

	require.NoError(t, fs.Parse([]string{"--config-quiet-period=5s", "--config-max-delay=1m", "--config-hash-key-secret=ns/key"}))
	require.Equal(t, Options{ConfigQuietPeriod: 5 * time.Second, ConfigMaxDelay: time.Minute, HashKeySecret: "ns/key"}, o)
}
