package server

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/statefulops/statefulops/shared/manager"
)

// The webhook server's flags sit beside the common ones, and it prefers HTTP/2 (the operators do not).
func TestAddFlagsRegistersTheServersFlagsAndPrefersHTTP2(t *testing.T) {
	cfg := &Config{}
	cmd := manager.NewRootCommand(manager.Options{Name: "webhook-server", Webhooks: true, Flags: cfg.AddFlags})
	fs := cmd.Flags()
	http2 := fs.Lookup("enable-http2")
	require.NotNil(t, http2)
	assert.Equal(t, "true", http2.DefValue)
	assert.Equal(t, "true", http2.Value.String())
	for _, name := range []string{"sidecar-image", "grant-url", "grant-ca-file", "grant-ca-secret", "cert-namespace", "cert-secret", "service-name", "webhook-configuration", "image-config", "image-config-budget", "image-config-tag-ttl", "pull-secret-reader-cluster-role"} {
		assert.NotNil(t, fs.Lookup(name), "--%s", name)
	}
	assert.Equal(t, "2s", fs.Lookup("image-config-budget").DefValue)
	assert.Equal(t, "5m0s", fs.Lookup("image-config-tag-ttl").DefValue)
	require.NoError(t, fs.Parse([]string{"--enable-http2=false", "--cert-secret=s", "--image-config-budget=500ms"}))
	assert.Equal(t, 500*time.Millisecond, cfg.images.Budget)
	assert.Equal(t, "false", http2.Value.String(), "--enable-http2=false still forces HTTP/1.1")
	assert.Equal(t, "s", cfg.certSecret)
}
