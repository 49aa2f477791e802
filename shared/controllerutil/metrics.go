package controllerutil

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// RegisterMetrics registers the collectors with controller-runtime's registry (served on the
// manager's metrics endpoint). Call it from the controller's setup: registering the same collector
// again (a second manager in a test binary) is a no-op; another collector of the same name panics.
func RegisterMetrics(cs ...prometheus.Collector) {
	for _, c := range cs {
		err := metrics.Registry.Register(c)
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) && already.ExistingCollector == c {
			continue
		}
		if err != nil {
			panic(fmt.Sprintf("registering metrics: %v", err))
		}
	}
}
