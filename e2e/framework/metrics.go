//go:build e2e

package framework

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// MetricsReaderRole returns the namespace and name of the Role that lets a scraper read binary's metrics,
// as deploy/<operator>.yaml ships it (the webhook-server's comes with singleton-operator's manifest).
func MetricsReaderRole(binary string) (namespace, role string) {
	if binary == "webhook-server" {
		return "singleton-operator-system", "singleton-operator-webhook-server-metrics-reader"
	}
	return binary + "-system", binary + "-metrics-reader"
}

// ServiceAccountToken creates a ServiceAccount in a fresh namespace and returns its name, namespace and a
// token of it (one hour).
func ServiceAccountToken(t *testing.T, name string) (namespace, token string) {
	t.Helper()
	ctx := t.Context()
	ns := NewNamespace(t)
	_, err := Clientset.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	tok, err := Clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return ns, tok.Status.Token
}

// MetricsToken returns a token of a ServiceAccount bound, in each binary's namespace, to the Role
// <binary>-metrics-reader that its manifest ships (get on services/metrics of its metrics Service,
// nothing on the API server). The bindings are removed when the test ends.
func MetricsToken(t *testing.T, binaries ...string) string {
	t.Helper()
	ctx := t.Context()
	ns, token := ServiceAccountToken(t, "metrics-scraper")
	for _, b := range binaries {
		roleNS, role := MetricsReaderRole(b)
		created, err := Clientset.RbacV1().RoleBindings(roleNS).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "metrics-scraper-"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "metrics-scraper"}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = Clientset.RbacV1().RoleBindings(roleNS).Delete(context.Background(), created.Name, metav1.DeleteOptions{})
		})
	}
	return token
}

// ScrapeMetrics reads https://127.0.0.1:<port>/metrics of a local process with token and returns the
// status code and body.
func ScrapeMetrics(ctx context.Context, port int, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/metrics", port), nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	// The process's metrics certificate is self-signed, generated at its start: nothing to verify it with.
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback, self-signed
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}
