package controller

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the operator, served on the manager's metrics endpoint.
var (
	versionsCreated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "extended_operator_versions_created_total",
		Help: "StatefulSets created for new versions.",
	}, []string{"namespace", "extendedstatefulset"})
	versionsDeleted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "extended_operator_versions_deleted_total",
		Help: "StatefulSets of lower or superseded versions deleted.",
	}, []string{"namespace", "extendedstatefulset"})
	staleVersions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "extended_operator_stale_versions_total",
		Help: "Versions marked stale, by reason (CanaryFailed, UpdateFailed).",
	}, []string{"namespace", "extendedstatefulset", "reason"})
	canaryRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "extended_operator_canary_retries_total",
		Help: "Canary restarts after a canary was not Ready within canaryWatchTime.",
	}, []string{"namespace", "extendedstatefulset"})
	configRestarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "extended_operator_config_restarts_total",
		Help: "Pod-template config-hash changes (each rolls one StatefulSet's pods).",
	}, []string{"namespace", "extendedstatefulset"})
	replicasRestored = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "extended_operator_replicas_restored_total",
		Help: "Child StatefulSet replica counts edited outside the ExtendedStatefulSet and put back.",
	}, []string{"namespace", "extendedstatefulset"})
	volumeHandovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "extended_operator_volume_handovers_total",
		Help: "PersistentVolumes moved from one version's claim to another's (ordinal by ordinal).",
	}, []string{"namespace", "extendedstatefulset"})
	configDelay = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "extended_operator_config_restart_delay_seconds",
		Help:    "Time from the first observed configuration change of a burst to the pod template update (the debounce).",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
	})
	upgradeDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "extended_operator_upgrade_duration_seconds",
		Help:    "Time from a version's StatefulSet creation to all its pods Ready (versioned upgrades only).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 14),
	})
	zonesRemoved = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "extended_operator_zones_removed_total",
		Help: "Zones removed from spec.az.zones whose StatefulSets were deleted.",
	}, []string{"namespace", "extendedstatefulset"})
	zoneUpgradesWaiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "extended_operator_zones_waiting",
		Help: "Zones whose upgrade or configuration roll waits for another zone (zone by zone).",
	}, []string{"namespace", "extendedstatefulset"})
	upgradeJobsCreated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "extended_operator_upgrade_jobs_created_total",
		Help: "Upgrade Jobs (kind pre or post) created.",
	}, []string{"namespace", "extendedstatefulset", "kind"})
	claimsResized = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "extended_operator_claims_resized_total",
		Help: "Claims patched to their claim template's larger storage request.",
	}, []string{"namespace", "extendedstatefulset"})
	zonesWithoutReadyNode = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "extended_operator_zones_unavailable",
		Help: "Zones of spec.az.zones without a Ready node (zone outage).",
	}, []string{"namespace", "extendedstatefulset"})
)
