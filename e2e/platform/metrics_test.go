//go:build e2e

package platform

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/operators"
)

// Every binary's secure metrics endpoint, run under its manifest's RBAC (the operators' clients
// impersonate their ServiceAccounts, so their TokenReviews and SubjectAccessReviews are the manifest's
// rights), serves a token bound to the Role <binary>-metrics-reader its manifest ships, refuses a
// token of an account without the binding (403) and a request without a token (401); and the bound
// token opens nothing on the API server: its /metrics answers 403. Local processes, also beside a real
// node (where they only wait as non-leaders): their loopback ports are what the test can reach.
func TestMetricsReaderRoleOpensTheBinarysMetricsAndNothingElse(t *testing.T) {
	framework.Install(t)
	stateDir := filepath.Join(filepath.Dir(framework.Kubeconfig), "metrics-e2e")
	binaries := operators.All()
	started, err := operators.Start(t.Context(), operators.Options{StateDir: stateDir, Kubeconfig: framework.Kubeconfig, Log: framework.TestLog{T: t}}, binaries)
	t.Cleanup(func() {
		assert.NoError(t, operators.Stop(context.Background(), stateDir, 15*time.Second, started...))
	})
	require.NoError(t, err)

	names := make([]string, 0, len(binaries))
	for _, b := range binaries {
		names = append(names, b.Name)
	}
	reader := framework.MetricsToken(t, names...)
	_, stranger := framework.ServiceAccountToken(t, "stranger")

	attempts, refused := 0, 0
	for _, b := range binaries {
		t.Run(b.Name, func(t *testing.T) {
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				code, body, err := framework.ScrapeMetrics(t.Context(), b.MetricsPort, reader)
				assert.NoError(c, err)
				assert.Equal(c, http.StatusOK, code, body)
				assert.Contains(c, body, "controller_runtime_", "the body is the binary's metrics")
			}, framework.Timeout, framework.Tick, "%s serves its metrics to the reader", b.Name)
			for _, tc := range []struct {
				who, token string
				want       int
			}{{"an account without the binding", stranger, http.StatusForbidden}, {"no token", "", http.StatusUnauthorized}} {
				code, body, err := framework.ScrapeMetrics(t.Context(), b.MetricsPort, tc.token)
				require.NoError(t, err)
				attempts++
				if code == tc.want {
					refused++
				}
				assert.Equal(t, tc.want, code, "%s is refused: %s", tc.who, body)
			}
		})
	}

	// The reader's grant opens nothing on the API server.
	cfg := rest.AnonymousClientConfig(framework.RESTConfig)
	cfg.BearerToken = reader
	c, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	var status int
	err = c.CoreV1().RESTClient().Get().AbsPath("/metrics").Do(t.Context()).StatusCode(&status).Error()
	attempts++
	if status == http.StatusForbidden {
		refused++
	}
	assert.Equal(t, http.StatusForbidden, status, "the kube-apiserver's /metrics refuses the reader: %v", err)
	t.Logf("metrics: %d binaries scraped by the reader; %d refusals expected, %d refused", len(binaries), attempts, refused)
}
