//go:build integration

package certfiles

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/shared/testsupport"
)

var suite testsupport.Suite

func TestMain(m *testing.M) {
	noCRDs, err := os.MkdirTemp("", "certfiles-no-crds")
	if err != nil {
		panic(err)
	}
	code := testsupport.RunSuite(m, &suite, noCRDs)
	_ = os.RemoveAll(noCRDs)
	os.Exit(code)
}

// Rotate keeps a CA and a serving certificate for the Service in the Secret, writes the certificate
// into the directory (written), and puts the CA into the webhook configuration's caBundle (ready).
func TestRotateWritesTheServiceCertificateAndInjectsTheCA(t *testing.T) {
	c, ctx := suite.Client, t.Context()
	// The rotator fills a Secret the manifests create.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "test-cert", Namespace: "default"}}
	require.NoError(t, c.Create(ctx, secret))
	// A configuration without rules: it never intercepts a request of the test's API server.
	require.NoError(t, c.Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "test-webhooks"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "pods.test.statefulops.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "default", Name: "test-svc", Path: ptr.To("/mutate")}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
		}},
	}))

	dir := filepath.Join(t.TempDir(), "certs")
	var written, ready <-chan struct{}
	suite.StartManager(t, func(_ context.Context, mgr ctrl.Manager) (err error) {
		written, ready, err = Rotate(mgr, Rotation{
			Secret:     client.ObjectKeyFromObject(secret),
			Service:    "test-svc",
			Dir:        dir,
			CAName:     "test-ca",
			FieldOwner: "certfiles-test",
			Webhooks:   []rotator.WebhookInfo{{Name: "test-webhooks", Type: rotator.Mutating}},
		})
		return err
	})

	waitClosed(t, map[string]<-chan struct{}{"written": written, "ready": ready})

	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(secret), secret))
	caPEM := secret.Data["ca.crt"]
	require.NotEmpty(t, caPEM, "the Secret holds the CA")
	certPEM, err := os.ReadFile(filepath.Join(dir, corev1.TLSCertKey))
	require.NoError(t, err)
	keyPEM, err := os.ReadFile(filepath.Join(dir, corev1.TLSPrivateKeyKey))
	require.NoError(t, err)
	assert.Equal(t, secret.Data[corev1.TLSCertKey], certPEM, "the files are the Secret's certificate")
	assert.Equal(t, secret.Data[corev1.TLSPrivateKeyKey], keyPEM)

	block, _ := pem.Decode(certPEM)
	require.NotNil(t, block)
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	for _, dns := range []string{"test-svc.default.svc", "test-svc.default.svc.cluster.local"} {
		_, err := cert.Verify(x509.VerifyOptions{DNSName: dns, Roots: roots})
		assert.NoError(t, err, "the certificate serves %s under the Secret's CA", dns)
	}

	webhooks := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "test-webhooks"}, webhooks))
	assert.Equal(t, caPEM, webhooks.Webhooks[0].ClientConfig.CABundle, "the CA is injected into the webhook configuration")
}

// An identity granted the Secret and the webhook configuration by name only (RBAC resourceNames, as
// the webhook-server's manifest grants them) can run Rotate: its caches list and watch those names
// only.
func TestRotateNeedsOnlyTheNamedSecretAndConfiguration(t *testing.T) {
	c, ctx := suite.Client, t.Context()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "scoped-cert", Namespace: "default"}}
	require.NoError(t, c.Create(ctx, secret))
	require.NoError(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "not-its-secret", Namespace: "default"}}))
	require.NoError(t, c.Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "scoped-webhooks"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "pods.scoped.statefulops.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "default", Name: "scoped-svc", Path: ptr.To("/mutate")}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
		}},
	}))
	const user = "system:serviceaccount:default:scoped-rotator"
	verbs := []string{"get", "list", "watch", "update"}
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user}}
	for _, o := range []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "scoped-rotator"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"}, ResourceNames: []string{"scoped-webhooks"}, Verbs: verbs,
		}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "scoped-rotator"}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "scoped-rotator"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "scoped-rotator", Namespace: "default"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"scoped-cert"}, Verbs: verbs,
		}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "scoped-rotator", Namespace: "default"}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "scoped-rotator"}},
	} {
		require.NoError(t, c.Create(ctx, o))
	}
	cfg := rest.CopyConfig(suite.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}

	var written, ready <-chan struct{}
	suite.StartManagerAs(t, cfg, func(_ context.Context, mgr ctrl.Manager) (err error) {
		written, ready, err = Rotate(mgr, Rotation{
			Secret:     client.ObjectKeyFromObject(secret),
			Service:    "scoped-svc",
			Dir:        filepath.Join(t.TempDir(), "certs"),
			CAName:     "scoped-ca",
			FieldOwner: "certfiles-test",
			Webhooks:   []rotator.WebhookInfo{{Name: "scoped-webhooks", Type: rotator.Mutating}},
		})
		return err
	})
	waitClosed(t, map[string]<-chan struct{}{"written": written, "ready": ready})
	webhooks := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "scoped-webhooks"}, webhooks))
	assert.NotEmpty(t, webhooks.Webhooks[0].ClientConfig.CABundle, "the CA is injected under resourceNames-only RBAC")
}

// waitClosed fails the test unless each channel closes within a minute.
func waitClosed(t *testing.T, chans map[string]<-chan struct{}) {
	t.Helper()
	for name, ch := range chans {
		select {
		case <-ch:
		case <-time.After(time.Minute):
			t.Fatalf("%s not closed within a minute", name)
		}
	}
}
