package v1alpha1

// Labels and annotations the operator writes on the StatefulSets (and their pod templates) it creates.
// All the state of a versioned upgrade lives in them, so an operator restart resumes where it stopped.
const (
	// VersionAnnotation is the version of a StatefulSet (auto-incremented on each
	// update, as in the original quarks/fissile ExtendedStatefulSet). Also a label of the StatefulSet, its selector and its pods, so
	// that the pods of two versions never match each other's selector.
	VersionAnnotation = "fissile.cloudfoundry.org/version"
	// VersionLabel is the label twin of VersionAnnotation (same key, value the version number).
	VersionLabel = VersionAnnotation
	// NameLabel names the ExtendedStatefulSet on its StatefulSets and their pods.
	NameLabel = "fissile.cloudfoundry.org/extendedstatefulset-name"
	// StaleAnnotation ("true") marks the StatefulSet of a version whose upgrade failed (the original
	// ExtendedStatefulSet's "annotated if stale"). A stale version is scaled to zero and never resumed; the next template change makes a new
	// version. With spec.updateStrategy.type InPlace the StatefulSet keeps its pods and its partition
	// stays where it was; the next template change starts over.
	StaleAnnotation = "fissile.cloudfoundry.org/stale"
	// TemplateHashAnnotation is the hash of spec.template (replicas excluded) a version was built from; a
	// different hash means a new version.
	TemplateHashAnnotation = "fissile.cloudfoundry.org/template-hash"
	// ConfigHashAnnotation, on the pod template, is the keyed hash (HMAC-SHA256) of the data of every
	// ConfigMap and Secret the pod template references (with updateOnEnvChange). A change rolls the pods.
	ConfigHashAnnotation = "fissile.cloudfoundry.org/config-hash"
	// PhaseAnnotation is where a version is in its upgrade: Canary, Rollout or Done.
	PhaseAnnotation = "fissile.cloudfoundry.org/phase"
	// PhaseStartAnnotation (RFC 3339) is when the current watch (canaryWatchTime or updateWatchTime) of a
	// version started; it restarts with each retry and each newly Ready pod.
	PhaseStartAnnotation = "fissile.cloudfoundry.org/phase-start"
	// ProgressAnnotation is the Ready pod count of a version when PhaseStartAnnotation was last set.
	ProgressAnnotation = "fissile.cloudfoundry.org/progress"
	// CanaryRetriesAnnotation counts the canary retries of a version (see updateStrategy.retryCount).
	CanaryRetriesAnnotation = "fissile.cloudfoundry.org/canary-retries"
	// StaleReasonAnnotation says why a version was marked stale.
	StaleReasonAnnotation = "fissile.cloudfoundry.org/stale-reason"
	// PreJobAnnotation names the pre upgrade Job a version waits for (or waited for) before its pods start.
	PreJobAnnotation = "fissile.cloudfoundry.org/pre-job"
	// CurrentVersionAnnotation, on the StatefulSet of spec.updateStrategy.type InPlace, is the version
	// whose template the pods below the partition run: the last version fully rolled out.
	CurrentVersionAnnotation = "fissile.cloudfoundry.org/current-version"
	// ClaimStorageAnnotation is the storage requests of the claim templates TemplateHashAnnotation was
	// computed with (JSON, template name to quantity). A StatefulSet's own claim templates keep their
	// creation form, so after a storage-only change (or an in-place template change) they are not what
	// the hash covers: this is, and a later storage-only change is recognized against it.
	ClaimStorageAnnotation = "fissile.cloudfoundry.org/claim-storage"
	// FixedFieldsAnnotation, on the StatefulSet of spec.updateStrategy.type InPlace, hashes field by field
	// (JSON, field to hash) what the StatefulSet API fixes at creation, as the spec had it: selector,
	// serviceName, podManagementPolicy and each claim template without its storage request. A template
	// change that changes one of them cannot be applied in place and is reported (ImmutableInPlace).
	FixedFieldsAnnotation = "fissile.cloudfoundry.org/fixed-fields"
	// UpgradeJobLabel is the kind of an upgrade Job ("pre" or "post"), on the Job and its pods.
	UpgradeJobLabel = "fissile.cloudfoundry.org/upgrade-job"
)

// Phases of a version (PhaseAnnotation).
const (
	// PhaseCanary: the version runs its canaries only; they must become Ready within canaryWatchTime.
	PhaseCanary = "Canary"
	// PhaseRollout: the version runs all its replicas; each must become Ready within updateWatchTime.
	PhaseRollout = "Rollout"
	// PhaseDone: the version is fully rolled out; lower versions are deleted.
	PhaseDone = "Done"
	// PhasePreJob: the version waits, at 0 replicas, for its pre upgrade Job (spec.upgradeJobs.pre).
	PhasePreJob = "PreJob"
	// PhasePostJob: the version is fully rolled out and serves; its post upgrade Job runs once every zone
	// runs it. With rollbackOnPostFailure the previous version is kept (at 0 replicas) until the Job
	// succeeded.
	PhasePostJob = "PostJob"
)

// Event reasons of the operator (besides the condition reasons).
const (
	// EventInPlaceUpdate: with spec.updateStrategy.type InPlace, a template or configuration change was
	// written into the StatefulSet, its partition set to replicas - canaries.
	EventInPlaceUpdate = "InPlaceUpdate"
	// EventVersionCreated: a StatefulSet for a new version was created.
	EventVersionCreated = "VersionCreated"
	// EventCanaryRetry: canaries did not become Ready in time and were restarted.
	EventCanaryRetry = "CanaryRetry"
	// EventVersionStale: a version failed and was annotated stale.
	EventVersionStale = "VersionStale"
	// EventVersionDeleted: a lower version was deleted after a higher one was rolled out.
	EventVersionDeleted = "VersionDeleted"
	// EventConfigRestart: referenced configuration data changed; the pods roll.
	EventConfigRestart = "ConfigRestart"
	// EventStuckPodRecreated (Warning): with updateNotReady, a pod stuck not Ready on an outdated
	// revision was deleted so that its StatefulSet recreates it from the update revision.
	EventStuckPodRecreated = "StuckPodRecreated"
	// EventReplicasRestored: a child StatefulSet's replicas were edited and put back.
	EventReplicasRestored = "ReplicasRestored"
	// EventRolledOut: a version's pods are all Ready; it is the current version.
	EventRolledOut = "RolledOut"
	// EventVolumeHandedOver: a PersistentVolume moved from one version's claim to another's.
	EventVolumeHandedOver = "VolumeHandedOver"
	// EventUpgradeJobCreated: an upgrade Job (pre or post) was created.
	EventUpgradeJobCreated = "UpgradeJobCreated"
	// EventUpgradeJobSucceeded: an upgrade Job completed.
	EventUpgradeJobSucceeded = "UpgradeJobSucceeded"
	// EventUpgradeJobDeleted: a finished upgrade Job beyond spec.upgradeJobs.historyLimit was deleted.
	EventUpgradeJobDeleted = "UpgradeJobDeleted"
	// EventClaimsResized: claims of a volumeClaimTemplate were patched to its larger storage request.
	EventClaimsResized = "ClaimsResized"
)

// Upgrade Job kinds (UpgradeJobLabel) and states (status.upgradeJobs[].state).
const (
	// UpgradeJobPre is a pre upgrade Job.
	UpgradeJobPre = "pre"
	// UpgradeJobPost is a post upgrade Job.
	UpgradeJobPost = "post"
	// UpgradeJobTypePre is status.upgradeJobs[].type of a pre upgrade Job.
	UpgradeJobTypePre = "Pre"
	// UpgradeJobTypePost is status.upgradeJobs[].type of a post upgrade Job.
	UpgradeJobTypePost = "Post"
	// JobRunning: the Job has neither finished condition yet.
	JobRunning = "Running"
	// JobComplete: the Job's Complete condition is True.
	JobComplete = "Complete"
	// JobFailed: the Job's Failed condition is True (after its backoffLimit).
	JobFailed = "Failed"
)

// EffectiveUpdateOnEnvChange is spec.updateOnEnvChange, else its alias spec.updateOnConfigChange, else
// false.
func (s *ExtendedStatefulSetSpec) EffectiveUpdateOnEnvChange() bool {
	if s.UpdateOnEnvChange != nil {
		return *s.UpdateOnEnvChange
	}
	return s.UpdateOnConfigChange != nil && *s.UpdateOnConfigChange
}

// DesiredReplicas is spec.template.spec.replicas, else scaling.min, else 1.
func (s *ExtendedStatefulSetSpec) DesiredReplicas() int32 {
	if s.Template.Spec.Replicas != nil {
		return *s.Template.Spec.Replicas
	}
	if s.Scaling != nil && s.Scaling.Min != nil {
		return *s.Scaling.Min
	}
	return 1
}

// Zone labels and environment (spec.az). The StatefulSet of a zone carries them, in its selector too, so
// that the pods and claims of two zones never match each other's StatefulSet.
const (
	// ZoneLabel is the name of a pod's zone (spec.az.zones[i]), on the zone's StatefulSets, their
	// selectors, pods and claims. Absent without zones.
	ZoneLabel = "fissile.cloudfoundry.org/az-name"
	// ZoneIndexLabel is the zone's 1-based index in spec.az.zones (the AZ_INDEX its pods see).
	ZoneIndexLabel = "fissile.cloudfoundry.org/az-index"
	// ZoneEnvName is the environment variable naming the zone in every container (as in quarks).
	ZoneEnvName = "KUBE_AZ"
	// ZoneIndexEnvName is the environment variable with the zone's 1-based index (as in quarks).
	ZoneIndexEnvName = "AZ_INDEX"
	// DefaultZoneNodeLabel is the node label naming a node's zone when spec.az.nodeLabel is unset.
	DefaultZoneNodeLabel = "topology.kubernetes.io/zone"
)

// The quarks names of the same zone facts, set beside ours on the StatefulSets and pods of a zone so that
// workloads and selectors written for quarks-statefulset find them unchanged (ES-10). Not in selectors:
// they add nothing to what ZoneLabel and ZoneIndexLabel already select.
const (
	// QuarksZoneLabel is quarks' label with the zone's name.
	QuarksZoneLabel = "quarks.cloudfoundry.org/az-name"
	// QuarksZoneIndexLabel is quarks' label with the zone's index, 0-based as quarks set it (the first
	// zone of spec.az.zones is "0"; AZ_INDEX and ZoneIndexLabel are 1-based, as in quarks too).
	QuarksZoneIndexLabel = "quarks.cloudfoundry.org/az-index"
	// BoshZoneEnvName and CFOperatorZoneEnvName are quarks' other environment variables naming the zone,
	// set beside KUBE_AZ with the same value: compatibility aliases, added only to a container that does
	// not set them itself (KUBE_AZ and AZ_INDEX replace the template's own).
	BoshZoneEnvName       = "BOSH_AZ"
	CFOperatorZoneEnvName = "CF_OPERATOR_AZ"
)

// Event reasons of zones.
const (
	// EventZoneOutage (Warning): a zone has no Ready node; the message names the zones.
	EventZoneOutage = "ZoneOutage"
	// EventZonesAvailable: every zone has a Ready node again.
	EventZonesAvailable = "ZonesAvailable"
	// EventZoneRemoved: a zone left spec.az.zones; its StatefulSets were deleted (its claims kept, unless
	// zoneRemovalPolicy is Delete).
	EventZoneRemoved = "ZoneRemoved"
)
