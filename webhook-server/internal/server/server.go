// Package server wires the webhook server's admission webhooks and certificates into the manager.
//
// Certificates come one of two ways:
//   - --webhook-cert-path given (loopback mode, e.g. local e2e runs): the files there are served and
//     reloaded when they change; whoever wrote them also put the CA into the webhook configuration.
//   - otherwise (in the cluster): open-policy-agent/cert-controller keeps a self-signed CA and a serving
//     certificate in a Secret, rotates them before expiry and injects the CA into the caBundle of the
//     MutatingWebhookConfiguration. Each replica copies the certificate from the Secret into the webhook
//     server's default certificate directory (an emptyDir); the webhook server starts — and /readyz
//     passes — only once the certificate is there and the CA injected, so the Service never routes an
//     admission request to a replica without it.
package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/shared/podmutation"
	"github.com/statefulops/statefulops/shared/version"
	"github.com/statefulops/statefulops/webhook-server/internal/podwebhook"
)

// The webhook server reads StatefulSingletons; its certificate rotator updates its Secret and the
// caBundle of its MutatingWebhookConfiguration.
// +kubebuilder:rbac:groups=apps.openshift.statefulsingleton.com,resources=statefulsingletons,verbs=get;list;watch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups="",namespace=system,resources=secrets,verbs=get;list;watch;update

// Config holds the webhook server's own flags.
type Config struct {
	fs *pflag.FlagSet

	// Mutation names the images and grant endpoint injected into Wrapper-mode pods.
	Mutation      podmutation.Config
	grantCAFile   string
	certNamespace string
	certSecret    string
	serviceName   string
	webhookConfig string
}

// AddFlags registers the flags on fs, which also holds the common --webhook-* flags.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	c.fs = fs
	v := version.Get()
	fs.StringVar(&c.Mutation.WrapperImage, "wrapper-image", "statefulops/singleton-wrapper:"+v,
		"Image whose /singleton-wrapper the init container copies into Wrapper-mode pods.")
	fs.StringVar(&c.Mutation.SidecarImage, "sidecar-image", "statefulops/status-sidecar:"+v,
		"Image of the status-sidecar container of Wrapper-mode pods.")
	fs.StringVar(&c.Mutation.GrantURL, "grant-url", "https://singleton-operator-grant.singleton-operator-system.svc/v1/grant",
		"The singleton operator's grant endpoint, long-polled by the status-sidecar.")
	fs.StringVar(&c.grantCAFile, "grant-ca-file", "", "PEM CA bundle the status-sidecar trusts for --grant-url; empty means the system roots. In the cluster the webhook waits until the file exists (the singleton operator's rotated grant-cert Secret, mounted optional).")
	fs.StringVar(&c.certNamespace, "cert-namespace", os.Getenv("POD_NAMESPACE"),
		"Namespace of the certificate Secret and the webhook Service (default: $POD_NAMESPACE). Unused with --webhook-cert-path.")
	fs.StringVar(&c.certSecret, "cert-secret", "webhook-server-cert", "Secret in which the certificate rotator keeps the CA and serving certificate.")
	fs.StringVar(&c.serviceName, "service-name", "webhook-service", "Service through which the API server calls the webhooks (the certificate's DNS name).")
	fs.StringVar(&c.webhookConfig, "webhook-configuration", "mutating-webhook-configuration",
		"MutatingWebhookConfiguration whose caBundle the certificate rotator keeps current.")
}

// Setup registers the pod webhook and, without --webhook-cert-path, the certificate rotator.
func (c *Config) Setup(ctx context.Context, mgr ctrl.Manager) error {
	// Start following StatefulSingletons with the manager, not at the first admission request, and be
	// ready only once they are known: an unsynced cache would fail (or delay) admissions.
	informer, err := mgr.GetCache().GetInformer(ctx, &singletonv1.StatefulSingleton{})
	if err != nil {
		return fmt.Errorf("watching StatefulSingletons: %w", err)
	}
	if err := mgr.AddReadyzCheck("statefulsingletons-synced", func(_ *http.Request) error {
		if !informer.HasSynced() {
			return errors.New("StatefulSingletons not synced yet")
		}
		return nil
	}); err != nil {
		return err
	}

	register := func() {
		if c.grantCAFile != "" {
			ca, err := os.ReadFile(c.grantCAFile)
			if err != nil || len(ca) == 0 {
				// Only reached in loopback mode; in the cluster afterReady waited for the file.
				mgr.GetLogger().Error(err, "Reading --grant-ca-file; the status-sidecars will trust the system roots", "file", c.grantCAFile)
			}
			c.Mutation.GrantCA = string(ca)
		}
		mgr.GetWebhookServer().Register(podwebhook.Path, &webhook.Admission{Handler: &podwebhook.Mutator{
			Reader:  mgr.GetClient(),
			Decoder: admission.NewDecoder(mgr.GetScheme()),
			Config:  c.Mutation,
		}})
	}
	if c.fs.Lookup("webhook-cert-path").Value.String() != "" {
		if c.grantCAFile != "" {
			if _, err := os.Stat(c.grantCAFile); err != nil {
				return fmt.Errorf("reading --grant-ca-file: %w", err)
			}
		}
		register()
		return nil
	}
	if c.certNamespace == "" {
		return errors.New("--cert-namespace (or $POD_NAMESPACE) is required when the certificate is rotated in the cluster (no --webhook-cert-path)")
	}
	ready := make(chan struct{})
	secret := types.NamespacedName{Namespace: c.certNamespace, Name: c.certSecret}
	if err := os.MkdirAll(defaultCertDir(), 0o700); err != nil {
		return fmt.Errorf("creating the certificate directory: %w", err)
	}
	if err := addCertFileSync(mgr, secret, defaultCertDir()); err != nil {
		return fmt.Errorf("following the certificate Secret: %w", err)
	}
	dns := fmt.Sprintf("%s.%s.svc", c.serviceName, c.certNamespace)
	if err := rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:      secret,
		CertDir:        defaultCertDir(),
		CAName:         "statefulops-webhook-server-ca",
		CAOrganization: "statefulops",
		DNSName:        dns,
		ExtraDNSNames:  []string{dns + ".cluster.local"},
		IsReady:        ready,
		Webhooks:       []rotator.WebhookInfo{{Name: c.webhookConfig, Type: rotator.Mutating}},
		FieldOwner:     "webhook-server",
		// Every replica serves admissions, so every replica keeps its certificate current.
		RequireLeaderElection: false,
	}); err != nil {
		return fmt.Errorf("adding the certificate rotator: %w", err)
	}
	return mgr.Add(&afterReady{ready: ready, caFile: c.grantCAFile, run: register})
}

// defaultCertDir is where controller-runtime's webhook server reads its certificate when no directory is
// given; the manifest mounts a writable emptyDir there.
func defaultCertDir() string {
	return filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")
}

// afterReady runs a function once the certificate is ready and, when caFile is set, the grant CA file
// (the singleton operator's rotated Secret, mounted optional) is there; on every replica, leader or not.
// Until then the webhook server does not start and /readyz fails, so no pod is admitted with a sidecar
// that could not verify the grant endpoint.
type afterReady struct {
	ready  <-chan struct{}
	caFile string
	run    func()
}

func (a *afterReady) Start(ctx context.Context) error {
	select {
	case <-a.ready:
	case <-ctx.Done():
		return nil
	}
	if a.caFile != "" {
		if err := wait.PollUntilContextCancel(ctx, time.Second, true, func(context.Context) (bool, error) {
			info, err := os.Stat(a.caFile)
			return err == nil && info.Size() > 0, nil
		}); err != nil {
			return nil // stopped while waiting
		}
	}
	a.run()
	return nil
}

func (a *afterReady) NeedLeaderElection() bool { return false }
