//go:build integration

package manager

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	certutil "k8s.io/client-go/util/cert"
	ctrl "sigs.k8s.io/controller-runtime"
)

// A webhook server started with --shutdown-delay drains on SIGTERM (its context ending): /readyz fails
// at once, while the webhook keeps answering, each answer closing its connection, and the command
// returns only after the delay. Without the delay, the webhook stops answering with the context.
func TestWebhookServerDrainsBeforeItStops(t *testing.T) {
	_, kubeconfig := startEnvtest(t)
	certDir := t.TempDir()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", nil, nil)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(certDir, "tls.crt"), certPEM, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(certDir, "tls.key"), keyPEM, 0o600))
	https := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a self-signed test certificate

	for _, tc := range []struct {
		name  string
		delay time.Duration
	}{{"with a shutdown delay", 20 * time.Second}, {"without", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			probePort, webhookPort := freePort(t), freePort(t)
			cmd := NewRootCommand(Options{
				Name:             "test-webhook",
				LeaderElectionID: "test-webhook.statefulops.dev",
				Webhooks:         true,
				Setup: func(_ context.Context, mgr ctrl.Manager) error {
					mgr.GetWebhookServer().Register("/admit", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
						_, _ = io.WriteString(w, "admitted")
					}))
					return nil
				},
			})
			cmd.SetArgs([]string{
				"--kubeconfig", kubeconfig,
				"--leader-elect=false",
				"--metrics-bind-address=0",
				fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probePort),
				"--webhook-cert-path", certDir,
				"--webhook-host=127.0.0.1",
				fmt.Sprintf("--webhook-port=%d", webhookPort),
				"--shutdown-delay=" + tc.delay.String(),
			})
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- cmd.ExecuteContext(ctx) }()

			probe := func() int {
				resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort))
				if err != nil {
					return 0
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			admit := func() (*http.Response, error) {
				resp, err := https.Get(fmt.Sprintf("https://127.0.0.1:%d/admit", webhookPort))
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				return resp, err
			}
			require.Eventually(t, func() bool { return probe() == http.StatusOK }, 30*time.Second, 50*time.Millisecond, "/readyz never passed")
			resp, err := admit()
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.False(t, resp.Close, "a serving webhook keeps its connections")

			cancel() // SIGTERM
			if tc.delay == 0 {
				require.NoError(t, waitDone(t, done))
				_, err := admit()
				assert.Error(t, err, "without a delay the webhook stops with its context")
				return
			}
			require.Eventually(t, func() bool { code := probe(); return code != 0 && code != http.StatusOK }, 10*time.Second, 20*time.Millisecond,
				"/readyz fails as soon as the drain starts")
			resp, err = admit()
			require.NoError(t, err, "the draining webhook still answers")
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.True(t, resp.Close, "a draining webhook asks its client to close the connection")
			select {
			case err := <-done:
				t.Fatalf("the command returned during the drain: %v", err)
			default:
			}
			require.NoError(t, waitDone(t, done))
		})
	}
}

func waitDone(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("the command did not return")
		return nil
	}
}
