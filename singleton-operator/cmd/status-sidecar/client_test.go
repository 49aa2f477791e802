package main

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A grant endpoint that takes the connection but never completes the TLS handshake (as a listener of a
// stopping operator pod may) costs the sidecar connectTimeout, not the long poll's 45 s: ask fails
// fast, so run retries and dials again.
func TestAskGivesUpOnAConnectionThatNeverHandshakes(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() }) // held open, never answered
		}
	}()
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("tok"), 0o600))
	cfg := config{url: "https://" + l.Addr().String() + "/v1/grant", tokenFile: tokenFile,
		req: request{Namespace: "ns", Name: "p", UID: "u"}, client: grantClient(&tls.Config{MinVersion: tls.VersionTLS12})}

	start := time.Now()
	granted, err := ask(t.Context(), cfg)
	took := time.Since(start)
	assert.False(t, granted)
	require.Error(t, err)
	assert.Less(t, took, 10*time.Second, "ask waited %s on a connection that never handshakes (the long poll's timeout is 45 s)", took)
	t.Logf("gave up after %s: %v", took.Round(time.Millisecond), err)
}
