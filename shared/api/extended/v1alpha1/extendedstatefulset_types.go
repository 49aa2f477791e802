package v1alpha1

import (
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ZoneRemovalPolicy says what happens to the volumes of a zone removed from spec.az.zones.
// +kubebuilder:validation:Enum=Retain;Delete
type ZoneRemovalPolicy string

const (
	// RetainZoneRemovalPolicy deletes the zone's StatefulSets but keeps their PersistentVolumeClaims.
	RetainZoneRemovalPolicy ZoneRemovalPolicy = "Retain"
	// DeleteZoneRemovalPolicy deletes the zone's StatefulSets and their PersistentVolumeClaims.
	DeleteZoneRemovalPolicy ZoneRemovalPolicy = "Delete"
)

// ExtendedStatefulSetSpec is the desired state of an ExtendedStatefulSet: a StatefulSet template plus
// scaling limits, restarts on configuration change, versioned canary upgrades, zones and upgrade Jobs.
//
// The replica count lives where a StatefulSet keeps it, at template.spec.replicas; the scale subresource
// points there. When it is unset the operator runs scaling.min pods (1 without scaling): a schema default
// cannot refer to another field, so that default is the operator's.
// +kubebuilder:validation:XValidation:rule="!has(self.updateOnEnvChange) || !has(self.updateOnConfigChange) || self.updateOnEnvChange == self.updateOnConfigChange",message="spec.updateOnEnvChange and spec.updateOnConfigChange are aliases and must not disagree",fieldPath=".updateOnConfigChange"
// +kubebuilder:validation:XValidation:rule="!has(self.scaling) || !has(self.template.spec.replicas) || (self.template.spec.replicas >= self.scaling.min && (!has(self.scaling.max) || self.template.spec.replicas <= self.scaling.max))",messageExpression="has(self.scaling.max) ? 'spec.template.spec.replicas (%d) must be between spec.scaling.min (%d) and spec.scaling.max (%d)'.format([self.template.spec.replicas, self.scaling.min, self.scaling.max]) : 'spec.template.spec.replicas (%d) must be at least spec.scaling.min (%d)'.format([self.template.spec.replicas, self.scaling.min])",fieldPath=".template.spec.replicas"
// +kubebuilder:validation:XValidation:rule="!has(self.scaling) || !self.scaling.oddOnly || !has(self.template.spec.replicas) || self.template.spec.replicas % 2 == 1",messageExpression="'spec.template.spec.replicas (%d) must be odd because spec.scaling.oddOnly is true'.format([self.template.spec.replicas])",fieldPath=".template.spec.replicas"
// +kubebuilder:validation:XValidation:rule="!has(self.updateStrategy) || !has(self.updateStrategy.type) || self.updateStrategy.type != 'InPlace' || !has(self.upgradeJobs)",message="spec.upgradeJobs needs spec.updateStrategy.type Versioned: an in-place update has no version waiting without pods for a pre Job, and no previous StatefulSet to roll back to",fieldPath=".upgradeJobs"
// +kubebuilder:validation:XValidation:rule="!has(self.updateStrategy) || !has(self.updateStrategy.type) || self.updateStrategy.type != 'InPlace' || !has(self.template.spec.updateStrategy) || ((!has(self.template.spec.updateStrategy.type) || self.template.spec.updateStrategy.type == 'RollingUpdate') && (!has(self.template.spec.updateStrategy.rollingUpdate) || !has(self.template.spec.updateStrategy.rollingUpdate.partition)))",message="with spec.updateStrategy.type InPlace the operator owns the StatefulSet's partition: spec.template.spec.updateStrategy must not set type OnDelete or rollingUpdate.partition",fieldPath=".template.spec.updateStrategy"
// In place the StatefulSet is one for good and the StatefulSet API fixes these fields at creation: a
// change the operator could not apply is refused here rather than ignored (an unset podManagementPolicy is the API's default, OrderedReady).
// +kubebuilder:validation:XValidation:rule="!has(self.updateStrategy) || !has(self.updateStrategy.type) || self.updateStrategy.type != 'InPlace' || (has(self.template.spec.selector) == has(oldSelf.template.spec.selector) && (!has(self.template.spec.selector) || self.template.spec.selector == oldSelf.template.spec.selector))",message="with spec.updateStrategy.type InPlace spec.template.spec.selector cannot be changed: the one StatefulSet keeps its selector for good; revert it, or create a new ExtendedStatefulSet (type Versioned makes a new StatefulSet per version)",fieldPath=".template.spec.selector"
// +kubebuilder:validation:XValidation:rule="!has(self.updateStrategy) || !has(self.updateStrategy.type) || self.updateStrategy.type != 'InPlace' || (has(self.template.spec.serviceName) == has(oldSelf.template.spec.serviceName) && (!has(self.template.spec.serviceName) || self.template.spec.serviceName == oldSelf.template.spec.serviceName))",message="with spec.updateStrategy.type InPlace spec.template.spec.serviceName cannot be changed: the one StatefulSet keeps its serviceName for good; revert it, or create a new ExtendedStatefulSet (type Versioned makes a new StatefulSet per version)",fieldPath=".template.spec.serviceName"
// +kubebuilder:validation:XValidation:rule="!has(self.updateStrategy) || !has(self.updateStrategy.type) || self.updateStrategy.type != 'InPlace' || (has(self.template.spec.podManagementPolicy) ? self.template.spec.podManagementPolicy : 'OrderedReady') == (has(oldSelf.template.spec.podManagementPolicy) ? oldSelf.template.spec.podManagementPolicy : 'OrderedReady')",message="with spec.updateStrategy.type InPlace spec.template.spec.podManagementPolicy cannot be changed: the one StatefulSet keeps its podManagementPolicy for good; revert it, or create a new ExtendedStatefulSet (type Versioned makes a new StatefulSet per version)",fieldPath=".template.spec.podManagementPolicy"
type ExtendedStatefulSetSpec struct {
	// scaling restricts the replica count (spec.template.spec.replicas), wherever it is set: kubectl
	// apply, kubectl scale, a HorizontalPodAutoscaler. Unset: no restriction.
	// +optional
	Scaling *Scaling `json:"scaling,omitempty"`

	// updateOnEnvChange, when true, restarts the pods (a rolling update) whenever the data of a ConfigMap
	// or Secret referenced by the pod template (env, envFrom, volumes, projected volumes) changes: a keyed
	// hash of the referenced data is kept in the pod template. Metadata-only changes do not restart.
	// Unset means false. updateOnConfigChange is an alias; set either, or both to the same value.
	// +optional
	UpdateOnEnvChange *bool `json:"updateOnEnvChange,omitempty"`

	// updateOnConfigChange is an alias of updateOnEnvChange (the name quarks-statefulset uses). The
	// effective value is updateOnEnvChange when set, else updateOnConfigChange, else false.
	// +optional
	UpdateOnConfigChange *bool `json:"updateOnConfigChange,omitempty"`

	// reloadKeys narrows, per referenced ConfigMap or Secret, which data keys restart the pods (with
	// updateOnEnvChange): a workload that reloads the rest of its configuration by itself lists here
	// only the keys it cannot reload. An object not listed counts whole, as before; a listed one counts
	// only the keys named (a key being added or removed counts as a change). Changing this list can
	// change the config hash and so roll the pods once. An entry naming an object the template does not
	// reference is reported with a Warning Event (ReloadKeysUnused).
	// +optional
	// +listType=map
	// +listMapKey=kind
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	ReloadKeys []ReloadKeys `json:"reloadKeys,omitempty"`

	// updateStrategy tunes upgrades: by default (type Versioned) each template change is a new version,
	// deployed as its own StatefulSet beside the running one; canaries pods of it come up first, then the
	// rest, and lower versions are deleted once it runs. With type InPlace the one StatefulSet is updated
	// in place, its highest ordinals first.
	// +optional
	// +kubebuilder:default={}
	UpdateStrategy UpdateStrategy `json:"updateStrategy,omitzero"`

	// template is the StatefulSet to run: its metadata (labels and annotations for the StatefulSets the
	// operator creates) and an apps/v1 StatefulSetSpec. The operator names the StatefulSets and adds its
	// own labels, annotations and (with az) zone affinity and environment.
	// +required
	Template StatefulSetTemplate `json:"template"`

	// az spreads the pods over availability zones: one StatefulSet per zone. Null or unset: one
	// StatefulSet, no zone placement (the original ExtendedStatefulSet's example sets az to null).
	// +optional
	// +nullable
	AZ *AvailabilityZones `json:"az,omitempty"`

	// upgradeJobs are Jobs run before (pre) and after (post) each upgrade to a new version. A failed pre
	// Job stops the upgrade; a failed post Job is reported and, with rollbackOnPostFailure, rolls back.
	// +optional
	UpgradeJobs *UpgradeJobs `json:"upgradeJobs,omitempty"`
}

// Scaling restricts the replica count.
// +kubebuilder:validation:XValidation:rule="!has(self.max) || self.min <= self.max",messageExpression="'spec.scaling.min (%d) must be <= spec.scaling.max (%d)'.format([self.min, self.max])",fieldPath=".min"
// +kubebuilder:validation:XValidation:rule="!self.oddOnly || self.min % 2 == 1",messageExpression="'spec.scaling.min (%d) must be odd because spec.scaling.oddOnly is true'.format([self.min])",fieldPath=".min"
type Scaling struct {
	// min is the minimum replica count, and the count used when spec.template.spec.replicas is unset.
	// Defaults to 1; set 0 to allow scaling to zero. With oddOnly it must be odd.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	Min *int32 `json:"min,omitempty"`

	// max is the maximum replica count. Unset: no maximum. With oddOnly the highest count allowed is the
	// largest odd number <= max.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	Max *int32 `json:"max,omitempty"`

	// oddOnly, when true, allows only odd replica counts (quorum-based applications). Defaults to false.
	// +optional
	// +kubebuilder:default=false
	OddOnly bool `json:"oddOnly,omitempty"`
}

// UpdateStrategyType says how a template change reaches the pods (spec.updateStrategy.type).
// +kubebuilder:validation:Enum=Versioned;InPlace
type UpdateStrategyType string

const (
	// VersionedUpdateStrategy (the default): each template change is a new version, its own StatefulSet
	// <name>[-z<i>]-v<N> beside the running one; its first pods are the canaries.
	VersionedUpdateStrategy UpdateStrategyType = "Versioned"
	// InPlaceUpdateStrategy: one StatefulSet <name>[-z<i>] for good, updated in place with a
	// RollingUpdate partition the operator owns; its highest ordinals are the canaries. No second set of
	// pods or volumes is ever created.
	InPlaceUpdateStrategy UpdateStrategyType = "InPlace"
)

// RestartVia says who rolls an in-place update once it is written into the StatefulSet
// (spec.updateStrategy.restartVia).
// +kubebuilder:validation:Enum=ExtendedStatefulSet;PhasedRollout
type RestartVia string

const (
	// RestartViaExtendedStatefulSet (unset means the same): this operator rolls the update, canaries
	// first, with its watch times.
	RestartViaExtendedStatefulSet RestartVia = "ExtendedStatefulSet"
	// RestartViaPhasedRollout: the PhasedRollout that manages the StatefulSet (rollout-operator) rolls
	// it, one pod per passed check; this operator never writes the partition.
	RestartViaPhasedRollout RestartVia = "PhasedRollout"
)

// UpdateStrategy tunes versioned canary upgrades.
// +kubebuilder:validation:XValidation:rule="!has(self.restartVia) || self.restartVia != 'PhasedRollout' || (has(self.type) && self.type == 'InPlace')",message="spec.updateStrategy.restartVia PhasedRollout needs spec.updateStrategy.type InPlace: a PhasedRollout steps the partition of one StatefulSet, and only InPlace keeps one StatefulSet (per zone) for good",fieldPath=".restartVia"
type UpdateStrategy struct {
	// type says how a template change reaches the pods. Versioned (the default): each template change
	// is a new version, deployed as its own StatefulSet <name>[-z<i>]-v<N> beside the running one (with
	// volumes, each ordinal's volume moves over). InPlace, for workloads that cannot afford a second set
	// of pods or volumes: one StatefulSet <name>[-z<i>] whose template is updated in place; the operator
	// sets its RollingUpdate partition to replicas - canaries, so the highest ordinals update first, and
	// once they are updated and Ready within canaryWatchTime it lowers the partition one pod at a time,
	// each within updateWatchTime. A failure freezes the partition and marks the StatefulSet stale; the
	// pods below the partition keep the previous template. The version number still counts template
	// changes (status.versions has one entry, the StatefulSet's). It cannot be changed once set, and
	// InPlace refuses spec.upgradeJobs and a template update strategy of its own.
	// +optional
	// +kubebuilder:default=Versioned
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.updateStrategy.type cannot be changed: Versioned and InPlace keep their pods in differently named StatefulSets; create a new ExtendedStatefulSet to switch"
	Type UpdateStrategyType `json:"type,omitempty"`

	// restartVia says who rolls an in-place update (type InPlace) once its template, or only its new
	// configuration hash, is written into the StatefulSet. ExtendedStatefulSet (unset means the same):
	// this operator, canaries first, as type describes. PhasedRollout: the PhasedRollout
	// (rollout-operator) whose targetRef, or targetRefs for zones, names the StatefulSet
	// <name>[-z<i>]; this operator writes the template and never the partition, so a configuration
	// restart is stepped and checked exactly as an image change is, one pod per passed check. canaries,
	// retryCount and the watch times then do not apply: the PhasedRollout's checks and onFailure do. The
	// StatefulSet is created with its partition at replicas (set later, the next update is written
	// with it), so nothing rolls before a PhasedRollout manages it; an update waits meanwhile
	// (Reconciling, reason NoPhasedRollout, and a Warning Event).
	// Needs type InPlace.
	// +optional
	RestartVia RestartVia `json:"restartVia,omitempty"`

	// canaries is the number of pods of a new version started first; each must become Ready within
	// canaryWatchTime before the remaining pods are started. 0 starts all pods of the new version at
	// once. Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	Canaries *int32 `json:"canaries,omitempty"`

	// retryCount is how many times a canary that does not become Ready within canaryWatchTime is
	// restarted before the upgrade is given up: the new version's StatefulSet is then annotated
	// fissile.cloudfoundry.org/stale=true, condition Stale is set and the running version keeps serving.
	// Unset means 0.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	RetryCount int32 `json:"retryCount,omitempty"`

	// updateNotReady, when true, lets an upgrade proceed although pods of the running version are not
	// Ready, e.g. to replace a broken version. Unset means false: an upgrade waits for the running
	// version to be Ready.
	// It also unblocks a configuration roll stuck behind a pod that is not Ready on the old template
	// (the StatefulSet controller waits for such a pod for ever, kubernetes/kubernetes#67250): the
	// operator deletes one such pod at a time (not Ready, on a revision other than the update revision,
	// created before it), the highest ordinal first, so that the StatefulSet recreates it from the new
	// template; each deletion is a Warning Event StuckPodRecreated.
	// +optional
	UpdateNotReady bool `json:"updateNotReady,omitempty"`

	// canaryWatchTime is how long a canary pod may take to become Ready, as a duration (e.g. "5m",
	// "90s"). Defaults to 5m.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1s')",message="spec.updateStrategy.canaryWatchTime must be a duration of at least 1s, e.g. 5m"
	CanaryWatchTime *metav1.Duration `json:"canaryWatchTime,omitempty"`

	// updateWatchTime is how long each of the remaining (non-canary) pods of a new version may take to
	// become Ready before the upgrade is given up (as for canaries), as a duration. Defaults to 5m.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1s')",message="spec.updateStrategy.updateWatchTime must be a duration of at least 1s, e.g. 5m"
	UpdateWatchTime *metav1.Duration `json:"updateWatchTime,omitempty"`

	// configChangeQuietPeriod is how long the data of the referenced ConfigMaps and Secrets must stay
	// unchanged before the pods roll (with updateOnEnvChange), as a duration: a burst of edits within it
	// rolls the pods once. "0s" rolls them on the first change at once (lowest latency, one roll per
	// edit). However long edits go on, a change waits at most the operator's --config-max-delay (10s by
	// default). Defaults to 2s; at most 1h.
	// +optional
	// +kubebuilder:default="2s"
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) <= duration('1h')",message="spec.updateStrategy.configChangeQuietPeriod must be a duration between 0s and 1h, e.g. 2s"
	ConfigChangeQuietPeriod *metav1.Duration `json:"configChangeQuietPeriod,omitempty"`

	// restartWindows, when set, are the only times at which a configuration change (updateOnEnvChange)
	// may start rolling the pods: a change made outside every window waits, with condition
	// RestartPending=True naming when the next window opens, and rolls when one opens (after the quiet
	// period). Only configuration restarts wait: a template change (a new version) and scaling do not.
	// A roll that started inside a window finishes after it closes. Windows allow; there are no deny
	// windows. Unset or empty: a change rolls at any time.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	RestartWindows []RestartWindow `json:"restartWindows,omitempty"`
}

// RestartWindow is a recurring time span in which configuration restarts may start: it opens at each
// time schedule names and stays open for duration.
type RestartWindow struct {
	// schedule is a standard 5-field cron expression (minute hour day-of-month month day-of-week, e.g.
	// "0 2 * * 1-5" for 02:00 on weekdays): the times the window opens. Numbers, names (jan-dec,
	// sun-sat), "*", "?" (day fields), ranges, lists and steps are allowed; descriptors such as @daily
	// and a CRON_TZ= prefix are not (use timeZone). An expression that parses but is wrong (a range
	// whose end is below its start, a day that never comes such as 30 February) is reported with
	// Stalled=True, reason InvalidRestartWindow.
	// +required
	// +kubebuilder:validation:MinLength=9
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^(?i)[ ]*([*]|([0-5]?[0-9])(-([0-5]?[0-9]))?)(/[1-9][0-9]*)?(,([*]|([0-5]?[0-9])(-([0-5]?[0-9]))?)(/[1-9][0-9]*)?)*[ ]+([*]|([01]?[0-9]|2[0-3])(-([01]?[0-9]|2[0-3]))?)(/[1-9][0-9]*)?(,([*]|([01]?[0-9]|2[0-3])(-([01]?[0-9]|2[0-3]))?)(/[1-9][0-9]*)?)*[ ]+([*?]|(0?[1-9]|[12][0-9]|3[01])(-(0?[1-9]|[12][0-9]|3[01]))?)(/[1-9][0-9]*)?(,([*?]|(0?[1-9]|[12][0-9]|3[01])(-(0?[1-9]|[12][0-9]|3[01]))?)(/[1-9][0-9]*)?)*[ ]+([*]|(0?[1-9]|1[0-2]|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)(-(0?[1-9]|1[0-2]|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))?)(/[1-9][0-9]*)?(,([*]|(0?[1-9]|1[0-2]|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)(-(0?[1-9]|1[0-2]|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))?)(/[1-9][0-9]*)?)*[ ]+([*?]|([0-6]|sun|mon|tue|wed|thu|fri|sat)(-([0-6]|sun|mon|tue|wed|thu|fri|sat))?)(/[1-9][0-9]*)?(,([*?]|([0-6]|sun|mon|tue|wed|thu|fri|sat)(-([0-6]|sun|mon|tue|wed|thu|fri|sat))?)(/[1-9][0-9]*)?)*[ ]*$')",message="schedule must be a 5-field cron expression (minute 0-59, hour 0-23, day of month 1-31, month 1-12 or jan-dec, day of week 0-6 or sun-sat; *, ranges a-b, lists a,b and steps /n), e.g. '0 2 * * 1-5'"
	Schedule string `json:"schedule"`

	// duration is how long the window stays open after each start, as a duration: at least 1m, at most
	// 168h (a week), e.g. "2h".
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1m') && duration(self) <= duration('168h')",message="duration must be a duration between 1m and 168h, e.g. 2h"
	Duration metav1.Duration `json:"duration"`

	// timeZone is the IANA time zone schedule is read in, e.g. "Europe/Berlin" (daylight saving time as
	// that zone has it). Defaults to UTC. A name the operator does not know is reported with
	// Stalled=True, reason InvalidRestartWindow.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$`
	TimeZone string `json:"timeZone,omitempty"`
}

// ReloadKeys names the data keys of one referenced ConfigMap or Secret whose change restarts the pods.
type ReloadKeys struct {
	// kind is ConfigMap or Secret.
	// +required
	// +kubebuilder:validation:Enum=ConfigMap;Secret
	Kind string `json:"kind"`

	// name is the object's name, as the pod template references it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// keys are the data keys (data or binaryData of a ConfigMap, data of a Secret) whose change restarts
	// the pods; changes of the object's other keys do not.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=253
	Keys []string `json:"keys"`
}

// StatefulSetTemplate is a whole StatefulSet as a template: metadata and spec.
// +kubebuilder:validation:XValidation:rule="!has(self.spec.selector) || !has(self.spec.selector.matchExpressions) || self.spec.selector.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="spec.template.spec.selector.matchExpressions[].operator must be In, NotIn, Exists or DoesNotExist",fieldPath=".spec.selector.matchExpressions"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.selector) || !has(self.spec.selector.matchExpressions) || self.spec.selector.matchExpressions.all(e, !(e.operator in ['In', 'NotIn']) || (has(e.values) && size(e.values) > 0))",message="spec.template.spec.selector.matchExpressions[].values must not be empty when the operator is In or NotIn",fieldPath=".spec.selector.matchExpressions"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.selector) || !has(self.spec.selector.matchExpressions) || self.spec.selector.matchExpressions.all(e, !(e.operator in ['Exists', 'DoesNotExist']) || !has(e.values) || size(e.values) == 0)",message="spec.template.spec.selector.matchExpressions[].values must be empty when the operator is Exists or DoesNotExist",fieldPath=".spec.selector.matchExpressions"
// +kubebuilder:validation:XValidation:rule="has(self.spec.selector) && ((has(self.spec.selector.matchLabels) && size(self.spec.selector.matchLabels) > 0) || (has(self.spec.selector.matchExpressions) && size(self.spec.selector.matchExpressions) > 0))",message="spec.template.spec.selector must not be empty (a StatefulSet requires a selector that matches its pod template's labels)",fieldPath=".spec.selector"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.replicas) || self.spec.replicas >= 0",message="spec.template.spec.replicas must not be negative",fieldPath=".spec.replicas"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.podManagementPolicy) || self.spec.podManagementPolicy in ['OrderedReady', 'Parallel']",message="spec.template.spec.podManagementPolicy must be OrderedReady or Parallel",fieldPath=".spec.podManagementPolicy"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.minReadySeconds) || self.spec.minReadySeconds >= 0",message="spec.template.spec.minReadySeconds must not be negative",fieldPath=".spec.minReadySeconds"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.template.spec) || !has(self.spec.template.spec.restartPolicy) || self.spec.template.spec.restartPolicy == 'Always'",message="spec.template.spec.template.spec.restartPolicy must be Always, as a StatefulSet requires",fieldPath=".spec.template.spec.restartPolicy"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.persistentVolumeClaimRetentionPolicy) || ((!has(self.spec.persistentVolumeClaimRetentionPolicy.whenDeleted) || self.spec.persistentVolumeClaimRetentionPolicy.whenDeleted in ['Retain', 'Delete']) && (!has(self.spec.persistentVolumeClaimRetentionPolicy.whenScaled) || self.spec.persistentVolumeClaimRetentionPolicy.whenScaled in ['Retain', 'Delete']))",message="spec.template.spec.persistentVolumeClaimRetentionPolicy.whenDeleted and whenScaled must be Retain or Delete",fieldPath=".spec.persistentVolumeClaimRetentionPolicy"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.spec.volumeClaimTemplates) || !has(self.spec.volumeClaimTemplates) || self.spec.volumeClaimTemplates.all(n, !(has(n.metadata) && has(n.metadata.name) && has(n.spec) && has(n.spec.resources) && has(n.spec.resources.requests) && 'storage' in n.spec.resources.requests && isQuantity(string(n.spec.resources.requests['storage']))) || oldSelf.spec.volumeClaimTemplates.all(o, !(has(o.metadata) && has(o.metadata.name) && has(o.spec) && has(o.spec.resources) && has(o.spec.resources.requests) && 'storage' in o.spec.resources.requests && isQuantity(string(o.spec.resources.requests['storage']))) || o.metadata.name != n.metadata.name || !quantity(string(n.spec.resources.requests['storage'])).isLessThan(quantity(string(o.spec.resources.requests['storage'])))))",message="spec.template.spec.volumeClaimTemplates[].spec.resources.requests.storage must not shrink: claims can grow but not shrink (the operator resizes the existing claims to a larger request)",fieldPath=".spec.volumeClaimTemplates"
type StatefulSetTemplate struct {
	// metadata holds labels and annotations copied to every StatefulSet the operator creates. Names are
	// chosen by the operator (<name>[-z<zone index>]-v<version>).
	// +optional
	Metadata TemplateMetadata `json:"metadata,omitzero"`

	// spec is an apps/v1 StatefulSetSpec. replicas is the total number of pods across all zones
	// (see az); when unset the operator uses spec.scaling.min, or 1. The operator manages
	// updateStrategy and ordinals of the StatefulSets it creates for its versioned upgrades (ordinals
	// start at 0; during a volume handover the old version's first ordinal moves up).
	// +required
	Spec appsv1.StatefulSetSpec `json:"spec"`
}

// TemplateMetadata is the metadata a template may set.
type TemplateMetadata struct {
	// labels are added to the StatefulSets the operator creates.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// annotations are added to the StatefulSets the operator creates.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// AvailabilityZones places pods in availability zones. Each zone gets its own StatefulSet with a required
// node affinity to the zone, labels naming the zone and its index on the pods, and environment variables
// KUBE_AZ (zone name) and AZ_INDEX (1-based zone index, as in quarks) in every container and init
// container, replacing the template's own. Quarks' names are set beside them as compatibility aliases,
// so workloads migrated from quarks-statefulset find them: labels quarks.cloudfoundry.org/az-name and
// quarks.cloudfoundry.org/az-index (0-based, as quarks set it) on the pods, and BOSH_AZ and
// CF_OPERATOR_AZ (the zone name) in every container and init container that does not set them itself.
//
// spec.template.spec.replicas is the total across zones, spread as evenly as possible (zone i of n gets
// replicas/n, plus one for the first replicas%n zones), so scaling.min/max/oddOnly keep constraining the
// total that a quorum depends on and kubectl scale and autoscalers see one consistent number. Upgrades go
// zone by zone, never two zones at once.
type AvailabilityZones struct {
	// zones are the zone names, values of the nodeLabel node label. Empty: no zone placement.
	// At most 32.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Zones []string `json:"zones,omitempty"`

	// nodeLabel is the node label whose value names a node's zone. Defaults to topology.kubernetes.io/zone;
	// the legacy failure-domain.beta.kubernetes.io/zone (quarks' default) or any other label key is
	// accepted.
	// +optional
	// +kubebuilder:default="topology.kubernetes.io/zone"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	NodeLabel string `json:"nodeLabel,omitempty"`

	// zoneRemovalPolicy says what happens to the PersistentVolumeClaims of a zone removed from zones:
	// Retain (the default) deletes the zone's StatefulSets but keeps their claims, so re-adding the zone
	// finds its data; Delete deletes the claims too. Volumes are never deleted without Delete here.
	// +optional
	// +kubebuilder:default=Retain
	ZoneRemovalPolicy ZoneRemovalPolicy `json:"zoneRemovalPolicy,omitempty"`
}

// UpgradeJobs are the Jobs run around an upgrade to a new version (not around the first version of an
// ExtendedStatefulSet or of a zone: nothing is upgraded then). Each Job is owned by the
// ExtendedStatefulSet (deleting it deletes them), labelled with its name, the version and the kind
// (fissile.cloudfoundry.org/upgrade-job: pre or post), named <name>-pre-v<N> / <name>-post-v<N> after the
// version N it belongs to, and runs at most once per version, operator restarts included. A Job is
// finished when it has its own Complete or Failed condition: its backoffLimit, activeDeadlineSeconds
// and podFailurePolicy decide when it has failed. The Job's pod template is used as given, plus the
// label fissile.cloudfoundry.org/upgrade-job; restartPolicy defaults to Never when unset.
// +kubebuilder:validation:XValidation:rule="!has(self.pre) || !has(self.pre.spec) || !has(self.pre.spec.template.spec) || !has(self.pre.spec.template.spec.restartPolicy) || self.pre.spec.template.spec.restartPolicy in ['Never', 'OnFailure']",message="spec.upgradeJobs.pre.spec.template.spec.restartPolicy must be Never or OnFailure, as a Job requires",fieldPath=".pre.spec.template.spec.restartPolicy"
// +kubebuilder:validation:XValidation:rule="!has(self.post) || !has(self.post.spec) || !has(self.post.spec.template.spec) || !has(self.post.spec.template.spec.restartPolicy) || self.post.spec.template.spec.restartPolicy in ['Never', 'OnFailure']",message="spec.upgradeJobs.post.spec.template.spec.restartPolicy must be Never or OnFailure, as a Job requires",fieldPath=".post.spec.template.spec.restartPolicy"
type UpgradeJobs struct {
	// pre is run before the pods of a new version start: the version's StatefulSet exists (phase PreJob,
	// 0 replicas) and waits for the Job. With zones it runs once per version, before the first zone
	// upgrades. If it fails, the upgrade does not start: the version is marked stale, conditions Stale and
	// UpgradeBlocked and a Warning Event (reason JobFailed) name the Job, and the running version keeps
	// serving; the next template change makes a new version (and a new pre Job).
	// +optional
	Pre *batchv1.JobTemplateSpec `json:"pre,omitempty"`

	// post is run once all pods of a new version are Ready, in every zone. Until it finishes the version
	// is in phase PostJob and serves. Its failure is reported (condition PostUpgradeFailed and a Warning
	// Event naming the Job) and, with rollbackOnPostFailure, the previous version is restored.
	// +optional
	Post *batchv1.JobTemplateSpec `json:"post,omitempty"`

	// rollbackOnPostFailure, when true, rolls back to the previous version when the post Job fails: the
	// previous version's StatefulSet is kept (scaled to zero) until the post Job succeeded, and on failure
	// it is scaled up again (with volumes: its ordinals and their volumes move back one at a time) before
	// the new version, marked stale (reason RolledBack), stops.
	// Defaults to false: the new version keeps running and the failure is reported.
	// +optional
	// +kubebuilder:default=false
	RollbackOnPostFailure bool `json:"rollbackOnPostFailure,omitempty"`

	// historyLimit is the number of finished upgrade Jobs (of past versions) kept. Defaults to 3.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	HistoryLimit *int32 `json:"historyLimit,omitempty"`
}

// ExtendedStatefulSetStatus is the observed state of an ExtendedStatefulSet, written by the operator.
type ExtendedStatefulSetStatus struct {
	// observedGeneration is the metadata.generation the operator last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// versions maps each version that has a StatefulSet to whether it is running (at least one of its
	// pods is Ready), e.g. {"1": true, "2": false} during an upgrade and {"2": true} once version 1 is
	// deleted. Versions are the fissile.cloudfoundry.org/version annotation, incremented on each template
	// change.
	// +optional
	Versions map[string]bool `json:"versions,omitempty"`

	// currentVersion is the version serving: the highest version fully rolled out. With zones, the lowest
	// of the zones' (the version every zone runs at least); status.zones has each zone's.
	// +optional
	// +kubebuilder:validation:Minimum=0
	CurrentVersion int32 `json:"currentVersion,omitempty"`

	// updateVersion is the newest version (equal to currentVersion when no upgrade is in progress). With
	// zones, the highest of the zones'.
	// +optional
	// +kubebuilder:validation:Minimum=0
	UpdateVersion int32 `json:"updateVersion,omitempty"`

	// replicas is the number of pods, of all versions and zones (same unit as
	// spec.template.spec.replicas, for the scale subresource).
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// readyReplicas is the number of Ready pods, of all versions and zones.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// updatedReplicas is the number of pods of updateVersion.
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas,omitempty"`

	// canaryRetries is how many times canaries of updateVersion have been retried (see
	// spec.updateStrategy.retryCount).
	// +optional
	CanaryRetries int32 `json:"canaryRetries,omitempty"`

	// configHash is the keyed hash of the referenced ConfigMap and Secret data now in the pod template
	// (with updateOnEnvChange). It reveals nothing about the data; a change means a restart.
	// +optional
	ConfigHash string `json:"configHash,omitempty"`

	// selector is spec.template.spec.selector in string form, for the scale subresource, so that kubectl
	// scale and HorizontalPodAutoscalers can find the pods.
	// +optional
	Selector string `json:"selector,omitempty"`

	// zoneCount is the number of zones in use (0 without az.zones).
	// +optional
	ZoneCount int32 `json:"zoneCount,omitempty"`

	// upgradeJobs are the upgrade Jobs that exist (see spec.upgradeJobs and its historyLimit), newest
	// version first.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	UpgradeJobs []UpgradeJobStatus `json:"upgradeJobs,omitempty"`

	// zones is the state per zone, in spec.az.zones order.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Zones []ZoneStatus `json:"zones,omitempty"`

	// conditions describe the state in detail: "Ready" (the summary: one version runs with all its pods
	// Ready), "Progressing" (an upgrade or restart is under way), "Stale" (the newest version failed and
	// was marked stale), "UpgradeBlocked" (the pre upgrade Job failed), "PostUpgradeFailed" (the post
	// upgrade Job failed), "MissingReference" (a referenced ConfigMap or Secret does not exist) and, with
	// zones, "ZonesAvailable" (False when a zone has no Ready node).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// ZoneStatus is the state of one zone.
type ZoneStatus struct {
	// name is the zone name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// index is the zone's 1-based index (the AZ_INDEX its pods see).
	// +optional
	Index int32 `json:"index,omitempty"`

	// replicas is the number of pods in the zone, of all versions.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// readyReplicas is the number of Ready pods in the zone.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// currentVersion is the version serving in the zone.
	// +optional
	CurrentVersion int32 `json:"currentVersion,omitempty"`

	// updateVersion is the newest version in the zone; it differs from currentVersion while the zone
	// is upgrading (at most one zone at a time).
	// +optional
	UpdateVersion int32 `json:"updateVersion,omitempty"`

	// versions maps each version with a StatefulSet in the zone to whether it is running.
	// +optional
	Versions map[string]bool `json:"versions,omitempty"`

	// readyNodes is the number of Ready nodes labelled with the zone (spec.az.nodeLabel). 0 is a zone
	// outage: condition ZonesAvailable is False.
	// +optional
	ReadyNodes int32 `json:"readyNodes"`
}

// UpgradeJobStatus is the state of one upgrade Job.
type UpgradeJobStatus struct {
	// name is the Job's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// type is Pre or Post.
	// +optional
	Type string `json:"type,omitempty"`

	// version is the version the Job belongs to.
	// +optional
	Version int32 `json:"version,omitempty"`

	// state is Running, Complete or Failed (the Job's own conditions).
	// +optional
	State string `json:"state,omitempty"`
}

// ExtendedStatefulSet runs a StatefulSet with scaling limits (min, max, odd counts only), pod restarts
// when referenced ConfigMaps or Secrets change, versioned canary upgrades (each version its own
// StatefulSet, older versions deleted once a newer one runs), availability zones and upgrade Jobs.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.template.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:categories=statefulops,shortName=ests
// +kubebuilder:printcolumn:name="Desired",type="integer",JSONPath=".spec.template.spec.replicas"
// +kubebuilder:printcolumn:name="Current",type="integer",JSONPath=".status.replicas"
// +kubebuilder:printcolumn:name="Ready Pods",type="integer",JSONPath=".status.readyReplicas"
// +kubebuilder:printcolumn:name="Version",type="integer",JSONPath=".status.currentVersion"
// +kubebuilder:printcolumn:name="Zones",type="integer",JSONPath=".status.zoneCount"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Min",type="integer",JSONPath=".spec.scaling.min",priority=1
// +kubebuilder:printcolumn:name="Max",type="integer",JSONPath=".spec.scaling.max",priority=1
// +kubebuilder:printcolumn:name="Update Version",type="integer",JSONPath=".status.updateVersion",priority=1
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 40",message="metadata.name must be at most 40 characters, so that StatefulSet names <name>-z<i>-v<version> and their pod names stay valid"
type ExtendedStatefulSet struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec is the desired state of the ExtendedStatefulSet.
	// +required
	Spec ExtendedStatefulSetSpec `json:"spec"`

	// status is the observed state, written by the operator.
	// +optional
	Status ExtendedStatefulSetStatus `json:"status,omitzero"`
}

// ExtendedStatefulSetList is a list of ExtendedStatefulSets.
// +kubebuilder:object:root=true
type ExtendedStatefulSetList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitzero"`
	// items are the ExtendedStatefulSets.
	Items []ExtendedStatefulSet `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ExtendedStatefulSet{}, &ExtendedStatefulSetList{})
}
