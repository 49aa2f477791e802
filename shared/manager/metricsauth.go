package manager

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// MetricsSubresource is the subresource of the metrics Service that a scraper must be allowed to get.
// The API server serves no such subresource, so granting it (the <operator>-metrics-reader Role, with
// resourceNames the Service, in the operator's namespace) opens nothing on the API server: unlike a
// nonResourceURL /metrics grant, which would also open the kube-apiserver's own /metrics.
const MetricsSubresource = "metrics"

// serviceAccountNamespaceFile holds the namespace of the pod the binary runs in.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// metricsService is the Service whose services/metrics subresource authorizes a scrape.
type metricsService struct {
	Namespace, Name string
}

// resolveMetricsService returns the metrics Service from the flags: the namespace is the flag's, else
// POD_NAMESPACE, else the pod's ServiceAccount namespace, else the leader-election namespace (a process
// run outside a cluster). Without a namespace the secure endpoint could authorize nothing, so it is an
// error rather than a silent fallback to a broader check.
func resolveMetricsService(f *flags, nsFile string) (metricsService, error) {
	ns := f.metricsServiceNamespace
	if ns == "" {
		ns = os.Getenv("POD_NAMESPACE")
	}
	if ns == "" {
		if b, err := os.ReadFile(nsFile); err == nil {
			ns = strings.TrimSpace(string(b))
		}
	}
	if ns == "" {
		ns = f.leaderElectionNamespace
	}
	if ns == "" {
		return metricsService{}, errors.New("the secure metrics endpoint needs the namespace of its Service: set --metrics-service-namespace")
	}
	if f.metricsServiceName == "" {
		return metricsService{}, errors.New("the secure metrics endpoint needs the name of its Service: set --metrics-service-name")
	}
	return metricsService{Namespace: ns, Name: f.metricsServiceName}, nil
}

// attributes are what a scrape by user asks the API server (SubjectAccessReview): get on
// services/metrics of the metrics Service, as kube-rbac-proxy's --resource-attributes do.
func (s metricsService) attributes(u user.Info) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		User:            u,
		Verb:            "get",
		Namespace:       s.Namespace,
		APIGroup:        "",
		APIVersion:      "v1",
		Resource:        "services",
		Subresource:     MetricsSubresource,
		Name:            s.Name,
		ResourceRequest: true,
	}
}

// webhookRetryBackoff is the API server's default for TokenReview and SubjectAccessReview retries
// (k8s.io/apiserver/pkg/server/options, not imported for this one value).
var webhookRetryBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// metricsAuthFilter authenticates a scrape with a TokenReview, as controller-runtime's
// filters.WithAuthenticationAndAuthorization does, and authorizes it with a SubjectAccessReview on the
// resource attributes of svc instead of on the nonResourceURL /metrics. Results are cached (allow 5
// minutes, deny 30 seconds), so a scrape every few seconds costs no API call.
func metricsAuthFilter(svc metricsService) func(*rest.Config, *http.Client) (metricsserver.Filter, error) {
	return func(config *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
		authn, err := authenticationv1.NewForConfigAndClient(config, httpClient)
		if err != nil {
			return nil, err
		}
		authz, err := authorizationv1.NewForConfigAndClient(config, httpClient)
		if err != nil {
			return nil, err
		}
		backoff := webhookRetryBackoff
		authenticator, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
			Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
			CacheTTL:                 time.Minute,
			TokenAccessReviewClient:  authn,
			TokenAccessReviewTimeout: 10 * time.Second,
			WebhookRetryBackoff:      &backoff,
		}.New()
		if err != nil {
			return nil, fmt.Errorf("creating the metrics authenticator: %w", err)
		}
		authorizerBackoff := webhookRetryBackoff
		authz8r, err := authorizerfactory.DelegatingAuthorizerConfig{
			SubjectAccessReviewClient: authz,
			AllowCacheTTL:             5 * time.Minute,
			DenyCacheTTL:              30 * time.Second,
			WebhookRetryBackoff:       &authorizerBackoff,
		}.New()
		if err != nil {
			return nil, fmt.Errorf("creating the metrics authorizer: %w", err)
		}
		return func(log logr.Logger, handler http.Handler) (http.Handler, error) {
			return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				res, ok, err := authenticator.AuthenticateRequest(req)
				if err != nil {
					log.Error(err, "Authenticating a metrics scrape failed")
					http.Error(w, "Authentication failed", http.StatusInternalServerError)
					return
				}
				if !ok {
					http.Error(w, "Unauthorized", http.StatusUnauthorized)
					return
				}
				attrs := svc.attributes(res.User)
				decision, reason, err := authz8r.Authorize(req.Context(), attrs)
				if err != nil {
					log.Error(err, "Authorizing a metrics scrape failed", "user", res.User.GetName())
					http.Error(w, "Authorization failed", http.StatusInternalServerError)
					return
				}
				if decision != authorizer.DecisionAllow {
					log.V(4).Info("Metrics scrape denied", "user", res.User.GetName(), "reason", reason)
					http.Error(w, fmt.Sprintf("Forbidden: %s may not get services/%s %s/%s", res.User.GetName(),
						MetricsSubresource, svc.Namespace, svc.Name), http.StatusForbidden)
					return
				}
				handler.ServeHTTP(w, req)
			}), nil
		}, nil
	}
}
