// Command webhook-server serves the admission webhooks of statefulops: the checks and pod mutations that
// CRD schemas and CEL cannot express. It serves over TLS (--webhook-cert-path) and is ready only once
// its certificate is loaded.
package main

import (
	"github.com/statefulops/statefulops/shared/manager"
)

func main() {
	manager.Main(manager.Options{
		Name:             "webhook-server",
		Short:            "Serves the admission webhooks of the statefulops operators.",
		LeaderElectionID: "webhook-server.statefulops.dev",
		Webhooks:         true,
	})
}
