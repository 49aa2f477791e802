// Command webhook-server serves the admission webhooks of statefulops: the checks and pod mutations that
// CRD schemas and CEL cannot express — today the StatefulSingleton pod mutation (package podwebhook). In
// a cluster it rotates its own certificate (cert-controller) and is ready only once the certificate is
// in place; with --webhook-cert-path it serves the given certificate instead (local runs).
package main

import (
	"github.com/spf13/pflag"
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
		Flags: func(fs *pflag.FlagSet) {
			cfg.AddFlags(fs)
			preferHTTP2(fs)
		},
		Setup: cfg.Setup,
	})
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
