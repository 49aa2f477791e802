//go:build integration

package manager

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The secure metrics endpoint authorizes a scrape on services/metrics of its Service: a ServiceAccount
// bound to the shipped metrics-reader Role (in the operator's namespace) scrapes; one without the binding
// is refused (403), an unauthenticated request too (401); and the reader's binding opens nothing on the
// API server, whose own /metrics refuses the same token (403).
func TestMetricsReaderRoleScrapesTheOperatorAndNothingElse(t *testing.T) {
	cfg, kubeconfig := startEnvtest(t)
	clientset, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ctx := t.Context()

	// The shipped Role, unprefixed (the operator's namespace is "system" before kustomize renames it).
	const ns, svc = "system", "controller-manager-metrics-service"
	_, err = clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	role := shippedMetricsReaderRole(t)
	_, err = clientset.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{})
	require.NoError(t, err)
	reader, stranger := serviceAccountToken(t, clientset, ns, "reader"), serviceAccountToken(t, clientset, ns, "stranger")
	_, err = clientset.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "reader"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	metricsPort := freePort(t)
	cmd := NewRootCommand(Options{Name: "test-operator", LeaderElectionID: "test-operator-metrics.statefulops.dev"})
	cmd.SetArgs([]string{
		"--kubeconfig", kubeconfig,
		"--leader-elect=false",
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", freePort(t)),
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metricsPort),
		"--metrics-service-namespace=" + ns, "--metrics-service-name=" + svc,
	})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })

	scrape := func(url, token string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		// The metrics endpoint's certificate is self-signed here; the API server's is envtest's CA.
		resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}).Do(req) //nolint:gosec // test client
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	metricsURL := fmt.Sprintf("https://127.0.0.1:%d/metrics", metricsPort)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, body := scrape(metricsURL, reader)
		assert.Equal(c, http.StatusOK, code, body)
		assert.Contains(c, body, "controller_runtime_", "the scrape returns the operator's metrics")
	}, 30*time.Second, 200*time.Millisecond, "the account bound to the metrics-reader Role scrapes")

	code, body := scrape(metricsURL, stranger)
	assert.Equal(t, http.StatusForbidden, code, "an account without the binding is refused: %s", body)
	code, body = scrape(metricsURL, "")
	assert.Equal(t, http.StatusUnauthorized, code, "an anonymous scrape is refused: %s", body)
	code, body = scrape(cfg.Host+"/metrics", reader)
	assert.Equal(t, http.StatusForbidden, code, "the reader's binding opens nothing on the API server's /metrics: %s", body)
}

// A secure metrics endpoint without a namespace for its Service refuses to start rather than authorize
// against anything broader.
func TestSecureMetricsNeedTheServiceNamespace(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	_, err := resolveMetricsService(&flags{metricsServiceName: "svc"}, "/nonexistent")
	require.Error(t, err)
	s, err := resolveMetricsService(&flags{metricsServiceName: "svc", leaderElectionNamespace: "ops"}, "/nonexistent")
	require.NoError(t, err)
	assert.Equal(t, metricsService{Namespace: "ops", Name: "svc"}, s)
	t.Setenv("POD_NAMESPACE", "pod-ns")
	s, err = resolveMetricsService(&flags{metricsServiceName: "svc", leaderElectionNamespace: "ops"}, "/nonexistent")
	require.NoError(t, err)
	assert.Equal(t, "pod-ns", s.Namespace)
}

// shippedMetricsReaderRole reads the metrics-reader Role from shared/config/operator.
func shippedMetricsReaderRole(t *testing.T) *rbacv1.Role {
	t.Helper()
	raw, err := os.ReadFile("../config/operator/metrics_auth_role.yaml")
	require.NoError(t, err)
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		var role rbacv1.Role
		if err := dec.Decode(&role); err != nil {
			require.ErrorIs(t, err, io.EOF)
			break
		}
		if role.Kind == "Role" && role.Name == "metrics-reader" {
			return &role
		}
	}
	t.Fatal("shared/config/operator/metrics_auth_role.yaml has no Role metrics-reader")
	return nil
}

// serviceAccountToken creates a ServiceAccount and returns a token of it.
func serviceAccountToken(t *testing.T, c kubernetes.Interface, ns, name string) string {
	t.Helper()
	_, err := c.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	tok, err := c.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return tok.Status.Token
}
