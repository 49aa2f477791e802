package controller

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the operator, served on the manager's metrics endpoint.
var (
	stepsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rollout_operator_steps_total",
		Help: "Rollout steps that passed their checks (the partition moved, or the last pod was verified).",
	}, []string{"namespace", "phasedrollout"})
	checksTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rollout_operator_check_results_total",
		Help: "Prometheus checks run, by result (pass, fail, error, inconclusive) and check (\"check\" for spec.check, else the spec.checks element's name).",
	}, []string{"namespace", "phasedrollout", "result", "check"})
	stepDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rollout_operator_step_duration_seconds",
		Help:    "Duration of a rollout step, from its start to its last passing check.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 14),
	}, []string{"namespace", "phasedrollout"})
	stepOverhead = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "rollout_operator_step_overhead_seconds",
		Help:    "Time from the last passing check of a step to the partition being written.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	})
)
