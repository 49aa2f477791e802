package controller

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the operator, served on the manager's metrics endpoint.
var (
	podsCreated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_operator_pods_created_total",
		Help: "Pods of new identities created.",
	}, []string{"namespace", "statefulcluster"})
	podsRetired = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_operator_pods_retired_total",
		Help: "Identities retired (their pod deleted), by reason: NodeLost, Unhealthy, Pending, Failed, ScaledDown, Updated.",
	}, []string{"namespace", "statefulcluster", "reason"})
	claimsRetired = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_operator_claims_retired_total",
		Help: "Claims of retired identities, by what the retention policy did with them (Retain, Delete).",
	}, []string{"namespace", "statefulcluster", "policy"})
	createFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_operator_create_failures_total",
		Help: "Pod or claim creations that failed.",
	}, []string{"namespace", "statefulcluster"})
	deleteFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_operator_delete_failures_total",
		Help: "Pod deletions that failed.",
	}, []string{"namespace", "statefulcluster"})
	replacementLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "cluster_operator_replacement_latency_seconds",
		Help:    "Time from a pod becoming unusable (its node lost, it failed, stayed unhealthy; or gone, deleted by someone else) to the creation of its replacement; includes the configured threshold.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
	}, []string{"namespace", "statefulcluster"})
)
