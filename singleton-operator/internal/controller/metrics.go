package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// Metrics of the singleton operator, served on the manager's metrics endpoint.
var (
	handoverSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "singleton_operator_handover_duration_seconds",
		Help:    "Time from the previous pod of a singleton being gone (as the operator observed it) to the release of the next pod.",
		Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
	})
	transitions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "singleton_operator_transitions_total",
		Help: "Pods released (each release is one transition to a new active pod).",
	})
	heldPods = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "singleton_operator_held_pods",
		Help: "Pods of a StatefulSingleton currently held.",
	}, []string{"namespace", "name"})
	overlaps = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "singleton_operator_overlaps_detected_total",
		Help: "Times the operator found two released, non-terminal pods of one singleton (should stay 0).",
	})
)

func registerMetrics() {
	opsutil.RegisterMetrics(handoverSeconds, transitions, heldPods, overlaps)
}
