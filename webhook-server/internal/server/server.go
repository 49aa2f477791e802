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
//
// The CA the status-sidecars trust for the singleton operator's grant endpoint comes from
// --grant-ca-file (local runs) or, in the cluster, from the ca.crt of the operator's rotated Secret
// (--grant-ca-secret), read through the API and followed as it rotates.
package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/statefulops/statefulops/shared/certfiles"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/shared/podmutation"
	"github.com/statefulops/statefulops/shared/version"
	"github.com/statefulops/statefulops/webhook-server/internal/imageconfig"
	"github.com/statefulops/statefulops/webhook-server/internal/podwebhook"
	"github.com/statefulops/statefulops/webhook-server/internal/pullsecrets"
)

// The webhook server reads StatefulSingletons; its certificate rotator updates its Secret and the
// caBundle of its MutatingWebhookConfiguration. Both by name only (resourceNames, the names of the
// manifest's namePrefix singleton-operator-): it must never rewrite another admission webhook or read
// another Secret, and its caches list and watch only those names (certfiles.Rotate, FollowSecret).
// +kubebuilder:rbac:groups=apps.openshift.statefulsingleton.com,resources=statefulsingletons,verbs=get;list;watch
// The rotator keeps the caBundle of its own configuration (an Update of the copy it watches).
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,resourceNames=singleton-operator-mutating-webhook-configuration,verbs=get;list;watch;update
// The rotator keeps its CA and serving certificate in its own Secret.
// +kubebuilder:rbac:groups="",namespace=system,resources=secrets,resourceNames=singleton-operator-webhook-server-cert,verbs=get;list;watch;update
// The grant endpoint's CA, which the status-sidecars trust, is read from the singleton operator's Secret.
// +kubebuilder:rbac:groups="",namespace=system,resources=secrets,resourceNames=singleton-operator-grant-cert,verbs=get;list;watch

// Config holds the webhook server's own flags.
type Config struct {
	fs *pflag.FlagSet

	// Mutation names the images and grant endpoint injected into Wrapper-mode pods.
	Mutation      podmutation.Config
	grantCAFile   string
	grantCASecret string
	grantCA       grantCA
	certNamespace string
	certSecret    string
	serviceName   string
	webhookConfig string
	images        imageconfig.Options
	readImages    bool
	pullSecrets   string
	caches        *pullsecrets.Caches
	nodeLabels    func(name string) (map[string]string, bool)
}

// AddFlags registers the flags on fs, which also holds the common --webhook-* flags, and turns
// --enable-http2 on by default (preferHTTP2).
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	c.fs = fs
	preferHTTP2(fs)
	v := version.Get()
	fs.String("wrapper-image", "", "Unused: the status-sidecar installs the wrapper itself (its postStart hook), so pods need no init container.")
	_ = fs.MarkDeprecated("wrapper-image", "the status-sidecar image now also provides the wrapper; the flag is ignored")
	fs.StringVar(&c.Mutation.SidecarImage, "sidecar-image", "statefulops/status-sidecar:"+v,
		"Image of the status-sidecar container of Wrapper-mode pods; its binary is also the app containers' entrypoint wrapper.")
	fs.StringVar(&c.Mutation.GrantURL, "grant-url", "https://singleton-operator-grant.singleton-operator-system.svc/v1/grant",
		"The singleton operator's grant endpoint, long-polled by the status-sidecar.")
	fs.StringVar(&c.grantCAFile, "grant-ca-file", "", "PEM CA bundle the status-sidecar trusts for --grant-url (local runs); empty: --grant-ca-secret, else the system roots.")
	fs.StringVar(&c.grantCASecret, "grant-ca-secret", "", "Secret of --cert-namespace whose ca.crt the status-sidecar trusts for --grant-url (the singleton operator's rotated grant-cert Secret), read through the API and followed as it rotates; the webhook serves only once it holds a CA.")
	fs.StringVar(&c.certNamespace, "cert-namespace", os.Getenv("POD_NAMESPACE"),
		"Namespace of the certificate Secret and the webhook Service (default: $POD_NAMESPACE). Unused with --webhook-cert-path.")
	fs.StringVar(&c.certSecret, "cert-secret", "webhook-server-cert", "Secret in which the certificate rotator keeps the CA and serving certificate.")
	fs.StringVar(&c.serviceName, "service-name", "webhook-service", "Service through which the API server calls the webhooks (the certificate's DNS name).")
	fs.BoolVar(&c.readImages, "image-config", true,
		"Read the ENTRYPOINT and CMD of the images of containers without command from their registries, so such pods get Wrapper mode; false: they are held with the scheduling gate.")
	fs.DurationVar(&c.images.Budget, "image-config-budget", imageconfig.DefaultBudget,
		"How long an admission waits for a registry (well inside the webhook's timeoutSeconds of 5). Past it the pod is held with the scheduling gate and the lookup goes on in the background for the next pod of that image.")
	fs.DurationVar(&c.images.TagTTL, "image-config-tag-ttl", imageconfig.DefaultTagTTL,
		"How long an image config read through a tag is reused (read through a digest: for good).")
	fs.StringVar(&c.pullSecrets, "pull-secret-reader-cluster-role", pullsecrets.DefaultClusterRole,
		"ClusterRole (get, list, watch Secrets and ServiceAccounts) the webhook server binds to itself in the namespaces holding a StatefulSingleton, to read image configs with the pods' pull secrets; empty: images are read anonymously and no RoleBinding is written.")
	fs.StringVar(&c.webhookConfig, "webhook-configuration", "mutating-webhook-configuration",
		"MutatingWebhookConfiguration whose caBundle the certificate rotator keeps current.")
}

// preferHTTP2 turns --enable-http2 on by default for this binary (the operators keep it off). The API
// server is the webhook's only client and sends it concurrent admission requests: over HTTP/1.1 it
// opens one TLS connection per request in flight (52 sockets at 50 concurrent pod creations, a
// handshake each, and half of them closed again after the burst), over HTTP/2 it multiplexes them on
// one connection. In `make bench` that was the bulk of the admission latency (see BENCHMARKS.md). The
// HTTP/2 Rapid Reset and stream-cancellation attacks (CVE-2023-44487, CVE-2023-39325) are bounded by
// Go's HTTP/2 server since Go 1.21.3; --enable-http2=false still forces HTTP/1.1.
func preferHTTP2(fs *pflag.FlagSet) {
	if f := fs.Lookup("enable-http2"); f != nil {
		_ = f.Value.Set("true")
		f.DefValue = "true"
		f.Usage = "Allow HTTP/2 on the metrics and webhook servers (on by default for the webhook server: the API server then multiplexes concurrent admission requests on one connection instead of a TLS handshake each)."
	}
}

// Setup registers the pod webhook and, without --webhook-cert-path, the certificate rotator.
func (c *Config) Setup(ctx context.Context, mgr ctrl.Manager) error {
	if err := readyOnceSingletonsSynced(ctx, mgr); err != nil {
		return err
	}
	caKnown, err := c.followGrantCA(mgr)
	if err != nil {
		return err
	}
	if err := c.setupPullSecrets(ctx, mgr); err != nil {
		return err
	}
	if err := c.followNodes(ctx, mgr); err != nil {
		return err
	}
	register := func() { c.registerMutator(mgr) }
	if c.fs.Lookup("webhook-cert-path").Value.String() != "" {
		if c.grantCAFile != "" {
			if _, err := os.Stat(c.grantCAFile); err != nil {
				return fmt.Errorf("reading --grant-ca-file: %w", err)
			}
		}
		if caKnown == nil {
			register()
			return nil
		}
		certReady := make(chan struct{})
		close(certReady) // the given certificate is served as it is
		return mgr.Add(&afterReady{ready: certReady, caKnown: caKnown, run: register})
	}
	if c.certNamespace == "" {
		return errors.New("--cert-namespace (or $POD_NAMESPACE) is required when the certificate is rotated in the cluster (no --webhook-cert-path)")
	}
	// The webhook server's certificate watcher reloads the files when the rotator renews them.
	_, ready, err := certfiles.Rotate(mgr, certfiles.Rotation{
		Secret:     types.NamespacedName{Namespace: c.certNamespace, Name: c.certSecret},
		Service:    c.serviceName,
		Dir:        defaultCertDir(),
		CAName:     "statefulops-webhook-server-ca",
		FieldOwner: "webhook-server",
		Webhooks:   []rotator.WebhookInfo{{Name: c.webhookConfig, Type: rotator.Mutating}},
	})
	if err != nil {
		return fmt.Errorf("the webhook certificate: %w", err)
	}
	return mgr.Add(&afterReady{ready: ready, caFile: c.grantCAFile, caKnown: caKnown, run: register})
}

// readyOnceSingletonsSynced starts following StatefulSingletons with the manager, not at the first
// admission request, and fails /readyz until they are known: an unsynced cache would fail (or delay)
// admissions.
func readyOnceSingletonsSynced(ctx context.Context, mgr ctrl.Manager) error {
	informer, err := mgr.GetCache().GetInformer(ctx, &singletonv1.StatefulSingleton{})
	if err != nil {
		return fmt.Errorf("watching StatefulSingletons: %w", err)
	}
	return mgr.AddReadyzCheck("statefulsingletons-synced", func(_ *http.Request) error {
		if !informer.HasSynced() {
			return errors.New("StatefulSingletons not synced yet")
		}
		return nil
	})
}

// setupPullSecrets registers the per-namespace pull secret caches and the RoleBindings that allow them
// (package pullsecrets), unless image configs are not read or --pull-secret-reader-cluster-role is empty.
func (c *Config) setupPullSecrets(ctx context.Context, mgr ctrl.Manager) error {
	if !c.readImages || c.pullSecrets == "" {
		return nil
	}
	subject, err := opsutil.SelfSubject(ctx, mgr.GetClient())
	if err != nil {
		return err
	}
	c.caches = &pullsecrets.Caches{Config: mgr.GetConfig(), Scheme: mgr.GetScheme()}
	return pullsecrets.Setup(mgr, c.caches, c.pullSecrets, subject)
}

// The platform of a multi-arch image is the node's when a pod names its node: the webhook server
// follows the nodes' metadata (labels kubernetes.io/os and kubernetes.io/arch), not their status.
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch

// followNodes keeps a metadata-only cache of the nodes when image configs are read, for
// imageconfig.Platform; a node not (yet) in it falls back to the pod's nodeSelector.
func (c *Config) followNodes(ctx context.Context, mgr ctrl.Manager) error {
	if !c.readImages {
		return nil
	}
	node := &metav1.PartialObjectMetadata{}
	node.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	informer, err := mgr.GetCache().GetInformer(ctx, node)
	if err != nil {
		return fmt.Errorf("watching the nodes' metadata: %w", err)
	}
	reader := mgr.GetCache()
	c.nodeLabels = func(name string) (map[string]string, bool) {
		if !informer.HasSynced() {
			return nil, false
		}
		got := &metav1.PartialObjectMetadata{}
		got.SetGroupVersionKind(node.GroupVersionKind())
		if err := reader.Get(context.Background(), types.NamespacedName{Name: name}, got); err != nil {
			return nil, false
		}
		return got.Labels, true
	}
	return nil
}

// followGrantCA follows the grant CA in the operator's Secret (--grant-ca-secret without
// --grant-ca-file), in both certificate modes: cert-manager's overlay serves a mounted certificate but
// still reads the grant CA through the API. The channel closes once a CA is held; it is nil when the CA
// does not come from a Secret.
func (c *Config) followGrantCA(mgr ctrl.Manager) (<-chan struct{}, error) {
	if c.grantCAFile != "" || c.grantCASecret == "" {
		return nil, nil
	}
	if c.certNamespace == "" {
		return nil, errors.New("--cert-namespace (or $POD_NAMESPACE) is required with --grant-ca-secret")
	}
	c.grantCA.known = make(chan struct{})
	if err := certfiles.FollowSecret(mgr, types.NamespacedName{Namespace: c.certNamespace, Name: c.grantCASecret}, c.grantCA.set); err != nil {
		return nil, fmt.Errorf("following the grant CA Secret: %w", err)
	}
	return c.grantCA.known, nil
}

// registerMutator registers the pod webhook with the webhook server, which starts it; with the grant CA
// the status-sidecars are to trust, from --grant-ca-file or the followed Secret.
func (c *Config) registerMutator(mgr ctrl.Manager) {
	mutator := &podwebhook.Mutator{
		Reader:  mgr.GetClient(),
		Decoder: admission.NewDecoder(mgr.GetScheme()),
		Config:  c.Mutation,
	}
	if c.readImages {
		mutator.Images = imageconfig.New(c.images)
		if c.caches != nil {
			mutator.Keychain = c.caches.Keychain
		}
		mutator.NodeLabels = c.nodeLabels
	}
	switch {
	case c.grantCAFile != "":
		ca, err := os.ReadFile(c.grantCAFile)
		if err != nil || len(ca) == 0 {
			// Only reached in loopback mode; in the cluster afterReady waited for the file.
			mgr.GetLogger().Error(err, "Reading --grant-ca-file; the status-sidecars will trust the system roots", "file", c.grantCAFile)
		}
		mutator.Config.GrantCA = string(ca)
	case c.grantCASecret != "":
		mutator.GrantCA = c.grantCA.get
	}
	mgr.GetWebhookServer().Register(podwebhook.Path, &webhook.Admission{Handler: mutator})
}

// defaultCertDir is where controller-runtime's webhook server reads its certificate when no directory is
// given; the manifest mounts a writable emptyDir there.
func defaultCertDir() string {
	return filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")
}

// afterReady runs a function once the certificate is ready and the grant CA is known (caKnown closed,
// or the file caFile exists); on every replica, leader or not. Until then the webhook server does not
// start and /readyz fails, so no pod is admitted with a sidecar that could not verify the grant endpoint.
type afterReady struct {
	ready   <-chan struct{}
	caFile  string
	caKnown <-chan struct{}
	run     func()
}

func (a *afterReady) Start(ctx context.Context) error {
	select {
	case <-a.ready:
	case <-ctx.Done():
		return nil
	}
	if a.caKnown != nil {
		select {
		case <-a.caKnown:
		case <-ctx.Done():
			return nil
		}
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

// grantCA is the CA of the singleton operator's grant endpoint, as its rotated Secret holds it now.
type grantCA struct {
	pem   atomic.Pointer[string]
	once  sync.Once
	known chan struct{} // closed once a CA is held
}

func (g *grantCA) set(secret *corev1.Secret) {
	ca := string(secret.Data["ca.crt"])
	if ca == "" {
		return // the operator's rotator has not filled it yet
	}
	g.pem.Store(&ca)
	g.once.Do(func() { close(g.known) })
}

func (g *grantCA) get() string {
	if p := g.pem.Load(); p != nil {
		return *p
	}
	return ""
}
