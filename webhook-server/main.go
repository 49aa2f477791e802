// Command webhook-server serves the admission webhooks of statefulops: the checks and pod mutations that
// CRD schemas and CEL cannot express — today the StatefulSingleton pod mutation (package podwebhook). In
// a cluster it rotates its own certificate (cert-controller) and is ready only once the certificate is
// in place; with --webhook-cert-path it serves the given certificate instead (local runs).
package main

import (
	"k8s.io/apimachinery/pkg/runtime"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/shared/manager"
	"github.com/statefulops/statefulops/webhook-server/internal/server"
)

func main() {
	cfg := &server.Config{}
	manager.Main(manager.Options{
		Name:             "webhook-server",
		Short:            "Serves the admission webhooks of the statefulops operators.",
		LeaderElectionID: "webhook-server.statefulops.dev",
		Webhooks:         true,
		Schemes:          []func(*runtime.Scheme) error{singletonv1.AddToScheme},
		Flags:            cfg.AddFlags,
		Setup:            cfg.Setup,
	})
}
