package certfiles

import (
	"fmt"
	"os"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Rotation is a serving certificate for a Service that open-policy-agent/cert-controller keeps, with its
// self-signed CA, in a Secret of the Service's namespace, rotating both before they expire.
type Rotation struct {
	// Secret holds the CA and the serving certificate; its namespace is the Service's.
	Secret client.ObjectKey
	// Service names the certificate: <Service>.<namespace>.svc and <Service>.<namespace>.svc.cluster.local.
	Service string
	// Dir is where the certificate (tls.crt, tls.key) is written for the server to read.
	Dir string
	// CAName is the CA's common name.
	CAName string
	// FieldOwner names the rotator's writes.
	FieldOwner string
	// Webhooks are the webhook configurations whose caBundle the rotator keeps current (none for a
	// server that is no admission webhook).
	Webhooks []rotator.WebhookInfo
}

// Rotate has the certificate rotated and copied into r.Dir (Sync) on every replica, leader or not: every
// replica serves with it. written closes after the first complete copy of the files; ready closes once
// the files are there and the CA is in the caBundle of every configuration of r.Webhooks (the rotator's
// IsReady). The identity needs get, list, watch and update of the Secret and of each configuration by
// name only (resourceNames): the rotator reads nothing else.
func Rotate(mgr ctrl.Manager, r Rotation) (written, ready <-chan struct{}, err error) {
	if err := os.MkdirAll(r.Dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("creating the certificate directory: %w", err)
	}
	// Through the API, not a Secret volume (see the package documentation); the server's certificate
	// watcher reloads the files when they change.
	written, err = Sync(mgr, r.Secret, r.Dir)
	if err != nil {
		return nil, nil, fmt.Errorf("following the certificate Secret %s: %w", r.Secret, err)
	}
	isReady := make(chan struct{})
	dns := fmt.Sprintf("%s.%s.svc", r.Service, r.Secret.Namespace)
	// The rotator's cache lists and watches only the Secret and the configurations it keeps (scope.go).
	if err := rotator.AddRotator(scopedToNames(mgr, r), &rotator.CertRotator{
		SecretKey:             r.Secret,
		CertDir:               r.Dir,
		CAName:                r.CAName,
		CAOrganization:        "statefulops",
		DNSName:               dns,
		ExtraDNSNames:         []string{dns + ".cluster.local"},
		IsReady:               isReady,
		Webhooks:              r.Webhooks,
		FieldOwner:            r.FieldOwner,
		RequireLeaderElection: false,
		// Controller names are unique per process: one rotator per Secret, named after it.
		ControllerName: "cert-rotator-" + r.Secret.Name,
	}); err != nil {
		return nil, nil, fmt.Errorf("adding the certificate rotator: %w", err)
	}
	return written, isReady, nil
}
