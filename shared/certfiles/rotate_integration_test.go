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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

	for name, ch := range map[string]<-chan struct{}{"written": written, "ready": ready} {
		select {
		case <-ch:
		case <-time.After(time.Minute):
			t.Fatalf("%s not closed within a minute", name)
		}
	}

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
