package certfiles

import (
	"net/http"
	"strings"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
)

// The rotator lists and watches every Secret of its namespace and every webhook configuration of its
// kinds, through a cache it builds itself from the manager's rest.Config, with no option to scope it.
// Least privilege grants its identity only the objects it keeps, by name (RBAC resourceNames), and the
// API server authorizes a list or watch by resourceNames only with the field selector metadata.name=<that
// name>. So the rotator gets a manager whose rest.Config adds that selector to those list and watch
// requests: its cache holds exactly the Secret and the configurations it keeps, and no more is needed.

// scopedManager is the manager with the rest.Config given instead of its own.
type scopedManager struct {
	ctrl.Manager
	config *rest.Config
}

func (m scopedManager) GetConfig() *rest.Config { return m.config }

// scopedToNames returns mgr with a rest.Config whose collection GETs (list, watch) of the Secret's
// namespace's Secrets and of the webhook configurations' kinds select the one name each keeps.
func scopedToNames(mgr ctrl.Manager, r Rotation) ctrl.Manager {
	names := map[string]string{"/api/v1/namespaces/" + r.Secret.Namespace + "/secrets": r.Secret.Name}
	kept := map[string]int{}
	for _, w := range r.Webhooks {
		// A kind not in collectionPaths keeps the rotator's cluster-wide list.
		if path, ok := collectionPaths[w.Type]; ok {
			names[path] = w.Name
			kept[path]++
		}
	}
	for path, n := range kept {
		if n > 1 {
			// Two configurations of one kind cannot share one name selector: list them all (the
			// identity then needs list and watch of that kind without resourceNames).
			delete(names, path)
		}
	}
	cfg := rest.CopyConfig(mgr.GetConfig())
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return nameSelector{next: rt, names: names} })
	return scopedManager{Manager: mgr, config: cfg}
}

// collectionPaths are the API paths of the webhook configuration kinds the rotator can keep.
var collectionPaths = map[rotator.WebhookType]string{
	rotator.Mutating:   "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
	rotator.Validating: "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
}

// nameSelector adds fieldSelector=metadata.name=<name> to GETs of the collection paths in names that
// select no field already.
type nameSelector struct {
	next  http.RoundTripper
	names map[string]string
}

func (s nameSelector) RoundTrip(req *http.Request) (*http.Response, error) {
	name, ok := s.names[strings.TrimSuffix(req.URL.Path, "/")]
	if !ok || req.Method != http.MethodGet || req.URL.Query().Has("fieldSelector") {
		return s.next.RoundTrip(req)
	}
	scoped := req.Clone(req.Context()) // a RoundTripper must not change the request it is given
	query := scoped.URL.Query()
	query.Set("fieldSelector", fields.OneTermEqualSelector("metadata.name", name).String())
	scoped.URL.RawQuery = query.Encode()
	return s.next.RoundTrip(scoped)
}
