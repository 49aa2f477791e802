//go:build integration

package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// gateCall is one request a gate received.
type gateCall struct {
	method, contentType, auth string
	payload                   rolloutv1alpha1.WebhookPayload
	keys                      []string // the payload's top-level JSON keys, sorted
}

// gate is a webhook receiver: it records every request and answers with handle (200 when nil).
type gate struct {
	mu     sync.Mutex
	calls  []gateCall
	handle http.HandlerFunc
	srv    *httptest.Server
}

func newGate(t *testing.T, handle http.HandlerFunc) *gate {
	t.Helper()
	g := &gate{handle: handle}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c := gateCall{method: r.Method, contentType: r.Header.Get("Content-Type"), auth: r.Header.Get("Authorization")}
		var raw map[string]any
		if json.Unmarshal(body, &raw) == nil {
			for k := range raw {
				c.keys = append(c.keys, k)
			}
			slices.Sort(c.keys)
		}
		_ = json.Unmarshal(body, &c.payload)
		g.mu.Lock()
		g.calls = append(g.calls, c)
		g.mu.Unlock()
		if g.handle != nil {
			g.handle(w, r)
		}
	}))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *gate) recorded() []gateCall {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]gateCall(nil), g.calls...)
}

// webhookRollout makes the fixture's check a webhook gate to url (no query), one pass per step.
func webhookRollout(url string, mods ...func(*rolloutv1alpha1.WebhookCheck)) func(*rolloutv1alpha1.PhasedRollout) {
	return func(pr *rolloutv1alpha1.PhasedRollout) {
		pr.Spec.Check.Query = nil
		pr.Spec.Check.SuccessThreshold = 1
		wh := &rolloutv1alpha1.WebhookCheck{URL: url, TimeoutSeconds: 10}
		for _, m := range mods {
			m(wh)
		}
		pr.Spec.Check.Webhook = wh
	}
}

func (f *fixture) createSecret(name string, data map[string]string) {
	f.t.Helper()
	require.NoError(f.t, suite.Client.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, StringData: data,
	}))
}

// TestWebhookGatePassesAndMovesThePartition: a check that is a webhook gate is called (not
// Prometheus) with the documented payload and the Secret's bearer token; its 200 answers roll the
// StatefulSet 2→1→0 and finish the rollout.
func TestWebhookGatePassesAndMovesThePartition(t *testing.T) {
	checker := newFakeChecker(VerdictFail) // Prometheus would fail every step
	startOperator(t, checker)
	g := newGate(t, nil)
	f := newFixture(t, 2, 0)
	log := f.simulateStatefulSetController()
	f.createSecret("gate-secret", map[string]string{"token": "tok"})
	f.createRollout(webhookRollout(g.srv.URL+"/gate", func(wh *rolloutv1alpha1.WebhookCheck) { wh.SecretRef = "gate-secret" }))
	f.waitPartition(2)
	require.Empty(t, g.recorded(), "no call while idle")
	f.newRevision("web-r2")
	pr := f.waitRolledTo("web-r2")
	values, _ := log.get()
	assert.Equal(t, []int32{2, 1, 0}, values[:min(3, len(values))], "the partition moved one pod per passing call")
	assert.Empty(t, checker.recorded(), "a webhook check never queries Prometheus")
	assert.Contains(t, pr.Status.LastQueryResult, "answered 200 OK: check passed")

	calls := g.recorded()
	require.Len(t, calls, 3, "one call per step: before web-1, after web-1, after web-0")
	for _, c := range calls {
		assert.Equal(t, http.MethodPost, c.method)
		assert.Equal(t, "application/json", c.contentType)
		assert.Equal(t, "Bearer tok", c.auth)
		assert.Equal(t, []string{"apiVersion", "attempt", "checkName", "currentRevision", "name", "namespace", "partition", "phasedRollout", "pod", "targetRef", "updateRevision"}, c.keys,
			"the payload contract: every field, nothing else")
	}
	assert.Equal(t, rolloutv1alpha1.WebhookPayload{
		APIVersion: rolloutv1alpha1.WebhookPayloadAPIVersion, Name: "pr", Namespace: f.ns, PhasedRollout: "pr", TargetRef: "web",
		Pod: "web-1", Partition: 1, CurrentRevision: "web-r1", UpdateRevision: "web-r2", CheckName: "check", Attempt: 1,
	}, calls[1].payload, "the call of the step that rolled web-1")
	assert.Equal(t, "web-0", calls[2].payload.Pod)
	assert.Equal(t, int32(0), calls[2].payload.Partition)
}

// TestWebhookGateBasicAuth: a Secret with username and password authenticates the call with basic
// authentication.
func TestWebhookGateBasicAuth(t *testing.T) {
	startOperator(t, newFakeChecker(VerdictFail))
	g := newGate(t, func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "gate-user" || p != "gate-pass" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
		}
	})
	f := newFixture(t, 1, 0)
	f.simulateStatefulSetController()
	f.createSecret("gate-secret", map[string]string{"username": "gate-user", "password": "gate-pass"})
	f.createRollout(webhookRollout(g.srv.URL, func(wh *rolloutv1alpha1.WebhookCheck) { wh.SecretRef = "gate-secret" }))
	f.waitPartition(1)
	f.newRevision("web-r2")
	f.waitRolledTo("web-r2")
	require.NotEmpty(t, g.recorded())
	assert.True(t, strings.HasPrefix(g.recorded()[0].auth, "Basic "), "basic authentication: %q", g.recorded()[0].auth)
}

// TestWebhookGateFailures: a 500 (its body quoted up to 256 bytes), no answer within timeoutSeconds,
// a refused connection and a redirect (not followed) each fail the check: the partition does not
// move, and with maxTries the step fails, saying why.
func TestWebhookGateFailures(t *testing.T) {
	startOperator(t, newFakeChecker(VerdictPass)) // Prometheus would pass every step
	body := strings.Repeat("b", webhookBodyExcerpt) + "TAIL"
	redirected := newGate(t, nil)
	cases := []struct {
		name    string
		url     func(t *testing.T) string
		timeout int32
		want    []string
		notWant string
	}{
		{
			name: "500",
			url: func(t *testing.T) string {
				return newGate(t, func(w http.ResponseWriter, _ *http.Request) { http.Error(w, body, http.StatusInternalServerError) }).srv.URL
			},
			want:    []string{"answered 500 Internal Server Error: check failed: " + body[:webhookBodyExcerpt]},
			notWant: "TAIL",
		},
		{
			name: "timeout",
			url: func(t *testing.T) string {
				return newGate(t, func(_ http.ResponseWriter, r *http.Request) {
					select {
					case <-r.Context().Done():
					case <-time.After(5 * time.Second):
					}
				}).srv.URL
			},
			timeout: 1,
			want:    []string{"did not answer within 1s: check failed"},
		},
		{
			name: "connection refused",
			url:  func(t *testing.T) string { return fmt.Sprintf("http://127.0.0.1:%d/gate", freeLoopbackPort(t)) },
			want: []string{"unreachable: check failed", "refused"},
		},
		{
			name: "redirect",
			url: func(t *testing.T) string {
				return newGate(t, func(w http.ResponseWriter, r *http.Request) {
					http.Redirect(w, r, redirected.srv.URL+"/elsewhere", http.StatusFound)
				}).srv.URL
			},
			want: []string{"answered 302 Found, a redirect to", "/elsewhere", "not followed: check failed"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 2, 0)
			f.simulateStatefulSetController()
			f.createRollout(webhookRollout(tc.url(t), func(wh *rolloutv1alpha1.WebhookCheck) {
				if tc.timeout != 0 {
					wh.TimeoutSeconds = tc.timeout
				}
			}), func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Check.MaxTries = ptr.To[int32](2) })
			f.waitPartition(2)
			f.newRevision("web-r2")
			pr := f.waitPhase(rolloutv1alpha1.PhaseFailed)
			assert.Equal(t, int32(2), f.partition(), "a failing gate never moves the partition")
			assert.Equal(t, int32(2), pr.Status.RollingPodStatus.TotalFailedChecks)
			for _, w := range tc.want {
				assert.Contains(t, pr.Status.LastQueryResult, w)
			}
			if tc.notWant != "" {
				assert.NotContains(t, pr.Status.LastQueryResult, tc.notWant)
			}
			f.waitEventReason("pr", rolloutv1alpha1.EventRolloutFailed)
		})
	}
	assert.Empty(t, redirected.recorded(), "the redirect was not followed")
}

// TestWebhookSecretAccessUnderTheManifestRBAC: under the manifest's RBAC and admission policies, a
// webhook's secretRef makes the operator bind the secret reader in the PhasedRollout's namespace, as
// a Prometheus secretRef does (the policies admit that RoleBinding), and the call carries the token.
func TestWebhookSecretAccessUnderTheManifestRBAC(t *testing.T) {
	ctx := context.Background()
	sa := installManifestRBAC(t)
	asOperator := rest.CopyConfig(suite.Config)
	asOperator.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + sa.Namespace + ":" + sa.Name}
	startOperatorWith(t, asOperator, newFakeChecker(VerdictFail))
	g := newGate(t, nil)
	f := newFixture(t, 1, 0)
	f.simulateStatefulSetController()
	f.createSecret("gate-secret", map[string]string{"token": "tok-" + f.ns})
	f.createRollout(webhookRollout(g.srv.URL, func(wh *rolloutv1alpha1.WebhookCheck) { wh.SecretRef = "gate-secret" }))
	rb := &rbacv1.RoleBinding{}
	require.Eventually(t, func() bool {
		return suite.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: SecretReaderRoleBinding}, rb) == nil
	}, wait, tick, "a webhook secretRef gets the secret reader bound in the PhasedRollout's namespace")
	assert.Equal(t, DefaultSecretReaderClusterRole, rb.RoleRef.Name)
	f.waitPartition(1)
	f.newRevision("web-r2")
	f.waitRolledTo("web-r2")
	require.NotEmpty(t, g.recorded())
	assert.Equal(t, "Bearer tok-"+f.ns, g.recorded()[0].auth, "the Secret was read under the RoleBinding")
	assert.NoError(t, suite.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: SecretReaderRoleBinding}, &rbacv1.RoleBinding{}),
		"the grant stays while the PhasedRollout names the Secret")
}

// TestWebhookGateMissingSecret: a webhook whose Secret does not exist is not called; the check is an
// error (never a pass) that names the field, with a WebhookConfigError Event.
func TestWebhookGateMissingSecret(t *testing.T) {
	startOperator(t, newFakeChecker(VerdictPass))
	g := newGate(t, nil)
	f := newFixture(t, 2, 0)
	f.simulateStatefulSetController()
	f.createRollout(webhookRollout(g.srv.URL, func(wh *rolloutv1alpha1.WebhookCheck) { wh.SecretRef = "no-such-secret" }))
	f.waitPartition(2)
	f.newRevision("web-r2")
	pr := f.waitCheckErrors(2)
	assert.Contains(t, pr.Status.LastError, "reading Secret no-such-secret (check.webhook.secretRef)")
	f.waitEventReason("pr", rolloutv1alpha1.EventWebhookConfigError)
	assert.Equal(t, int32(2), f.partition())
	assert.Empty(t, g.recorded(), "no call without its credentials")
}
