package manager

import (
	"bytes"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

func TestRootCommandHasTheKubebuilderFlagsWithTheirDefaults(t *testing.T) {
	cmd := NewRootCommand(Options{Name: "test-operator", LeaderElectionID: "test.statefulops.dev"})
	for name, want := range map[string]string{
		"metrics-bind-address":      ":8443",
		"metrics-secure":            "true",
		"health-probe-bind-address": ":8081",
		"pprof-bind-address":        "0",
		"leader-elect":              "true",
		"leader-election-namespace": "",
		"enable-http2":              "false",
		"kubeconfig":                "",
		"zap-log-level":             "",
		"zap-encoder":               "",
	} {
		f := cmd.Flags().Lookup(name)
		if assert.NotNil(t, f, "flag --%s", name) && want != "" {
			assert.Equal(t, want, f.DefValue, "default of --%s", name)
		}
	}
	assert.Nil(t, cmd.Flags().Lookup("webhook-cert-path"), "only webhook servers have --webhook-cert-path")
}

func TestWebhookServersHaveTheWebhookFlags(t *testing.T) {
	cmd := NewRootCommand(Options{Name: "webhook-server", Webhooks: true})
	for _, name := range []string{"webhook-cert-path", "webhook-cert-name", "webhook-cert-key", "webhook-host", "webhook-port"} {
		assert.NotNil(t, cmd.Flags().Lookup(name), "flag --%s", name)
	}
}

func TestVersionFlagPrintsTheVersion(t *testing.T) {
	cmd := NewRootCommand(Options{Name: "test-operator"})
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--version"})
	require.NoError(t, cmd.Execute())
	assert.Equal(t, "test-operator version devel\n", out.String())
}

func TestUnknownFlagsAndArgumentsAreRefused(t *testing.T) {
	for _, args := range [][]string{{"--no-such-flag"}, {"extra-argument"}, {"--leader-elect=maybe"}} {
		cmd := NewRootCommand(Options{Name: "test-operator"})
		cmd.SetArgs(args)
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		assert.Error(t, cmd.Execute(), "args %v", args)
	}
}

func TestBinariesAddTheirOwnFlags(t *testing.T) {
	var value string
	cmd := NewRootCommand(Options{Name: "webhook-server", Webhooks: true, Flags: func(fs *pflag.FlagSet) {
		require.NotNil(t, fs.Lookup("webhook-cert-path"), "the common flags are there first")
		fs.StringVar(&value, "own-flag", "default", "a binary's own flag")
	}})
	require.NoError(t, cmd.Flags().Parse([]string{"--own-flag=set"}))
	assert.Equal(t, "set", value)
}

func TestResourceKindsAreTheBinarysOwnKinds(t *testing.T) {
	kinds, err := resourceKinds([]func(*runtime.Scheme) error{leasev1.AddToScheme})
	require.NoError(t, err)
	assert.Equal(t, []schema.GroupVersionKind{leasev1.GroupVersion.WithKind("StatefulSetLock")}, kinds)
}
