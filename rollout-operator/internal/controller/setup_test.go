package controller

import (
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAddFlags(t *testing.T) {
	var opts Options
	fs := pflag.NewFlagSet("rollout-operator", pflag.ContinueOnError)
	opts.AddFlags(fs)
	require.NoError(t, fs.Parse(nil))
	assert.Equal(t, DefaultSecretReaderClusterRole, opts.SecretReaderClusterRole, "the default")
	f := fs.Lookup("secret-reader-cluster-role")
	require.NotNil(t, f)
	assert.Equal(t, "ClusterRole granting get on Secrets that the operator binds in the namespaces whose PhasedRollouts name a credentials Secret", f.Usage)

	require.NoError(t, fs.Parse([]string{"--secret-reader-cluster-role=my-reader"}))
	assert.Equal(t, "my-reader", opts.SecretReaderClusterRole)
}
