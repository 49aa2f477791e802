package grant

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/statefulops/statefulops/shared/certfiles"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// The certificate rotator keeps the grant endpoint's CA and serving certificate in a Secret of the
// operator's namespace: that Secret only (resourceNames; its caches list and watch only that name,
// certfiles.Rotate).
// +kubebuilder:rbac:groups="",namespace=system,resources=secrets,resourceNames=singleton-operator-grant-cert,verbs=get;list;watch;update

// ServeConfig holds the flags of the grant endpoint.
//
// Certificates: with --grant-cert-path the files there (tls.crt, tls.key) are served and reloaded when
// they change. Otherwise open-policy-agent/cert-controller keeps a self-signed CA and a serving
// certificate for the Service (--grant-service-name) in the Secret --grant-cert-secret and rotates them;
// the operator follows that Secret through the API and copies the certificate into the default
// certificate directory (an emptyDir), so it serves seconds after the rotator wrote it instead of after
// the kubelet's Secret-volume sync. The webhook-server reads the same Secret's ca.crt the same way and
// passes it to the status-sidecars, which trust only that CA.
type ServeConfig struct {
	addr      string
	certPath  string
	secret    string
	service   string
	namespace string

	// Exits, when set, hands the exit reports this replica accepts to its controller (Exits).
	Exits *Exits
	// Successors, when set, answers the stopping notices (StoppingHandler).
	Successors SuccessorWaiter
	// grants is set by Setup; Released feeds it.
	grants *AnnotationGrants
}

// Released tells the grant endpoint of a release the controller of this process just wrote (pod as
// patched, with its start-granted annotation), so that the released pod's waiting long poll is
// answered now rather than once the patch's watch event reaches the cache. The patch succeeded: the
// grant is the API server's state already.
func (c *ServeConfig) Released(pod *corev1.Pod) {
	if c.grants != nil {
		c.grants.observe(pod)
	}
}

// AddFlags registers the grant endpoint's flags.
func (c *ServeConfig) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.addr, "grant-bind-address", ":9444", `Address of the HTTPS grant endpoint; "0" disables it (Wrapper pods then stay held).`)
	fs.StringVar(&c.certPath, "grant-cert-path", "", "Directory with tls.crt and tls.key for the grant endpoint; empty: rotate a certificate in --grant-cert-secret.")
	fs.StringVar(&c.secret, "grant-cert-secret", "grant-cert", "Secret in which the certificate rotator keeps the grant endpoint's CA and certificate.")
	fs.StringVar(&c.service, "grant-service-name", "grant", "Service of the grant endpoint (the certificate's DNS name).")
	fs.StringVar(&c.namespace, "grant-namespace", os.Getenv("POD_NAMESPACE"), "Namespace of the grant Secret and Service (default: $POD_NAMESPACE).")
}

// DefaultCertDir is where the grant endpoint reads its certificate when --grant-cert-path is empty; the
// operator writes the rotator's certificate there (the manifest mounts a writable emptyDir).
func DefaultCertDir() string {
	return filepath.Join(os.TempDir(), "grant-server", "serving-certs")
}

// Setup serves the grant endpoint on every replica (leader or not: grants are pod annotations, which
// every replica's cache sees). /readyz fails until the endpoint serves TLS, so the grant Service routes
// only to replicas that can answer.
func (c *ServeConfig) Setup(ctx context.Context, mgr ctrl.Manager) error {
	if c.addr == "0" {
		return nil
	}
	log := mgr.GetLogger().WithName("grant")
	dir := c.certPath
	var certReady <-chan struct{}
	if dir == "" {
		if c.namespace == "" {
			log.Info("Grant endpoint disabled: neither --grant-cert-path nor --grant-namespace ($POD_NAMESPACE) given; Wrapper pods stay held")
			return nil
		}
		dir = DefaultCertDir()
		// The certificate through the API, not a Secret volume: a fresh install serves grants about a
		// second after the rotator wrote it instead of after the kubelet's pod sync (~80 s), and no
		// certificate still means no endpoint, no grant.
		written, _, err := certfiles.Rotate(mgr, certfiles.Rotation{
			Secret:     types.NamespacedName{Namespace: c.namespace, Name: c.secret},
			Service:    c.service,
			Dir:        dir,
			CAName:     "statefulops-singleton-grant-ca",
			FieldOwner: "singleton-operator",
		})
		if err != nil {
			return fmt.Errorf("the grant certificate: %w", err)
		}
		certReady = written // the server waits for the files, not for the rotator's readiness
	}
	informer, err := mgr.GetCache().GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return err
	}
	grants, err := NewAnnotationGrants(ctx, informer)
	if err != nil {
		return err
	}
	c.grants = grants
	if c.Exits != nil {
		if err := c.Exits.forgetDeleted(informer); err != nil {
			return err
		}
	}
	authenticate := CachedAuthenticator(TokenReviewAuthenticator(mgr.GetClient()))
	mux := http.NewServeMux()
	mux.Handle(Path, &Handler{Authenticate: authenticate, Grants: grants})
	mux.Handle(StoppingPath, &StoppingHandler{Authenticate: authenticate, Cache: mgr.GetCache(), APIReader: mgr.GetAPIReader(),
		Successors: c.Successors})
	mux.Handle(ExitPath, &ExitHandler{Authenticate: authenticate, Cache: mgr.GetCache(), APIReader: mgr.GetAPIReader(),
		Client: mgr.GetClient(), Exits: c.Exits, PredecessorExited: grants.PredecessorExited})
	srv := &server{addr: c.addr, dir: dir, certReady: certReady, handler: mux}
	if err := mgr.AddReadyzCheck("grant-endpoint", srv.serving); err != nil {
		return err
	}
	return mgr.Add(srv)
}

// server is the HTTPS grant endpoint (the grant and the exit report); it starts once the certificate
// files exist.
type server struct {
	addr      string
	dir       string
	certReady <-chan struct{} // closed once the files are written; nil: wait for them to appear
	handler   http.Handler
	listening atomic.Bool
}

// serving is the readiness check: the endpoint listens with a certificate.
func (s *server) serving(_ *http.Request) error {
	if !s.listening.Load() {
		return errors.New("the grant endpoint does not serve yet (no certificate)")
	}
	return nil
}

func (s *server) NeedLeaderElection() bool { return false }

func (s *server) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("grant")
	certFile, keyFile := filepath.Join(s.dir, "tls.crt"), filepath.Join(s.dir, "tls.key")
	if s.certReady != nil {
		select {
		case <-s.certReady:
		case <-ctx.Done():
			return nil // stopped before a certificate appeared
		}
	} else if err := wait.PollUntilContextCancel(ctx, time.Second, true, func(context.Context) (bool, error) {
		_, errCert := os.Stat(certFile)
		_, errKey := os.Stat(keyFile)
		return errCert == nil && errKey == nil, nil
	}); err != nil {
		return nil // stopped before a certificate appeared
	}
	watcher, err := certwatcher.New(certFile, keyFile)
	if err != nil {
		return fmt.Errorf("loading the grant certificate: %w", err)
	}
	go func() { _ = watcher.Start(ctx) }()
	srv := &http.Server{
		Addr:              s.addr,
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: watcher.GetCertificate, NextProtos: []string{"http/1.1"}},
		BaseContext:       func(_ net.Listener) context.Context { return ctx },
	}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("serving the grant endpoint: %w", err)
	}
	s.listening.Store(true)
	defer s.listening.Store(false)
	log.Info("Serving the grant endpoint", "address", s.addr, "paths", []string{Path, StoppingPath, ExitPath})
	if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving the grant endpoint: %w", err)
	}
	return nil
}
