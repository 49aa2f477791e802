package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// PodManagementPolicyType says how pods of new identities are created and old ones deleted.
// +kubebuilder:validation:Enum=OrderedReady;Parallel
type PodManagementPolicyType string

const (
	// OrderedReadyPodManagement creates one pod at a time, in identity order, each Ready before the next.
	OrderedReadyPodManagement PodManagementPolicyType = "OrderedReady"
	// ParallelPodManagement creates and deletes pods without waiting for others (the original stateful-cluster-operator's behaviour).
	ParallelPodManagement PodManagementPolicyType = "Parallel"
)

// UpdateStrategyType is the kind of update applied when spec.template changes.
// +kubebuilder:validation:Enum=RollingUpdate;OnDelete
type UpdateStrategyType string

const (
	// RollingUpdateStrategyType replaces pods of old revisions with pods of new identities automatically.
	RollingUpdateStrategyType UpdateStrategyType = "RollingUpdate"
	// OnDeleteStrategyType replaces a pod of an old revision only after someone deletes it.
	OnDeleteStrategyType UpdateStrategyType = "OnDelete"
)

// ClaimRetentionPolicyType says what happens to the PersistentVolumeClaims of a retired identity.
// +kubebuilder:validation:Enum=Retain;Delete
type ClaimRetentionPolicyType string

const (
	// RetainClaimRetentionPolicy keeps the claims, labels them enge.me/retired=true and lists them in
	// status.retiredClaims.
	RetainClaimRetentionPolicy ClaimRetentionPolicyType = "Retain"
	// DeleteClaimRetentionPolicy deletes the claims once the identity's pod is gone.
	DeleteClaimRetentionPolicy ClaimRetentionPolicyType = "Delete"
)

// ReplaceTerminatingPolicy says when a Terminating pod stops counting toward spec.replicas.
// +kubebuilder:validation:Enum=Never;WhenNodeLost;Always
type ReplaceTerminatingPolicy string

const (
	// ReplaceTerminatingNever counts a Terminating pod until its object is gone.
	ReplaceTerminatingNever ReplaceTerminatingPolicy = "Never"
	// ReplaceTerminatingWhenNodeLost stops counting a Terminating pod whose node has not been Ready for
	// nodeLossToleranceSeconds (or is tainted out-of-service).
	ReplaceTerminatingWhenNodeLost ReplaceTerminatingPolicy = "WhenNodeLost"
	// ReplaceTerminatingAlways never counts a Terminating pod.
	ReplaceTerminatingAlways ReplaceTerminatingPolicy = "Always"
)

// IdentityFormat is how identity names are formed.
// +kubebuilder:validation:Enum=Ordinal;Random
type IdentityFormat string

const (
	// OrdinalIdentityFormat names identities <name>-<n>, n strictly increasing and never reused.
	OrdinalIdentityFormat IdentityFormat = "Ordinal"
	// RandomIdentityFormat names identities <name>-<8 hex digits>, as the original stateful-cluster-operator did.
	RandomIdentityFormat IdentityFormat = "Random"
)

// HookFailurePolicy says what a failed membership hook does.
// +kubebuilder:validation:Enum=Fail;Ignore
type HookFailurePolicy string

const (
	// FailHookPolicy blocks the step the hook guards (condition MembershipHookFailed) and retries.
	FailHookPolicy HookFailurePolicy = "Fail"
	// IgnoreHookPolicy records the failure (Event) and proceeds.
	IgnoreHookPolicy HookFailurePolicy = "Ignore"
)

// RetirementReason says why an identity was retired.
// +kubebuilder:validation:Enum=NodeLost;Unhealthy;Pending;Failed;ScaledDown;Updated;Deleted
type RetirementReason string

const (
	// RetiredNodeLost: the pod's node was not Ready past nodeLossToleranceSeconds, or out-of-service.
	RetiredNodeLost RetirementReason = "NodeLost"
	// RetiredUnhealthy: the pod was not Ready past unhealthyThresholdSeconds after having been Ready,
	// or never Ready past startupThresholdSeconds.
	RetiredUnhealthy RetirementReason = "Unhealthy"
	// RetiredPending: the pod stayed Pending (e.g. unschedulable) past pendingThresholdSeconds.
	RetiredPending RetirementReason = "Pending"
	// RetiredFailed: the pod reached phase Failed.
	RetiredFailed RetirementReason = "Failed"
	// RetiredScaledDown: the identity was removed by a scale-down.
	RetiredScaledDown RetirementReason = "ScaledDown"
	// RetiredUpdated: the identity was replaced by one of the update revision.
	RetiredUpdated RetirementReason = "Updated"
	// RetiredDeleted: the pod was deleted by someone else (a user, an eviction); its identity is not reused.
	RetiredDeleted RetirementReason = "Deleted"
)

// StatefulClusterSpec is the desired state of a StatefulCluster. It keeps the field names of an apps/v1
// StatefulSetSpec, but a pod identity (its name and its volumes) is used by exactly one pod, ever: a lost
// or unhealthy pod is replaced by a pod with a new identity instead of being recreated under the old one.
// +kubebuilder:validation:XValidation:rule="has(self.volumeClaimTemplates) == has(oldSelf.volumeClaimTemplates)",message="spec.volumeClaimTemplates is immutable",fieldPath=".volumeClaimTemplates"
// +kubebuilder:validation:XValidation:rule="!has(self.template.spec.restartPolicy) || self.template.spec.restartPolicy == 'Always'",message="spec.template.spec.restartPolicy must be Always: pods of a StatefulCluster are long-running",fieldPath=".template.spec.restartPolicy"
type StatefulClusterSpec struct {
	// replicas is the desired number of live pods (identities). A pod that is Terminating on a lost node
	// does not count (see replaceTerminating), so its replacement is created without force-deleting it.
	// Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	Replicas *int32 `json:"replicas,omitempty"`

	// selector is a label query over the pods of this StatefulCluster. The operator adds
	// selector.matchLabels to every pod's labels, so the pod template may omit them (the original stateful-cluster-operator's example does);
	// matchExpressions must be satisfied by the template's own labels. Must not be empty. Immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",message="spec.selector must not be empty"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="spec.selector.matchExpressions[].operator must be In, NotIn, Exists or DoesNotExist",fieldPath=".matchExpressions"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['In', 'NotIn']) || (has(e.values) && size(e.values) > 0))",message="spec.selector.matchExpressions[].values must not be empty when the operator is In or NotIn",fieldPath=".matchExpressions"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['Exists', 'DoesNotExist']) || !has(e.values) || size(e.values) == 0)",message="spec.selector.matchExpressions[].values must be empty when the operator is Exists or DoesNotExist",fieldPath=".matchExpressions"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.selector is immutable"
	Selector *metav1.LabelSelector `json:"selector"`

	// template is the pod template. Pods are built from it faithfully: its labels, annotations and all its
	// volumes are kept; a volume per volumeClaimTemplate is added (replacing a template volume of the same
	// name); hostname is set to the pod name and subdomain to serviceName when serviceName is set. Pod
	// names are <metadata.name>-<n>. restartPolicy must be Always (the default).
	// +required
	Template corev1.PodTemplateSpec `json:"template"`

	// volumeClaimTemplates are the PersistentVolumeClaims every identity gets, one per template, named
	// <metadata.name>-<claim name>-<n> and mounted through a pod volume named after the claim. Claims belong
	// to the identity: a new identity gets new, empty claims; what happens to a retired identity's claims
	// is set by persistentVolumeClaimRetentionPolicy. Immutable (as in a StatefulSet). At most 16.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.volumeClaimTemplates is immutable"
	// +kubebuilder:validation:XValidation:rule="self.all(c, self.exists_one(d, d.metadata.name == c.metadata.name))",message="spec.volumeClaimTemplates[].metadata.name must be unique"
	VolumeClaimTemplates []PersistentVolumeClaimTemplate `json:"volumeClaimTemplates,omitempty"`

	// serviceName is the name of a headless Service, in the same namespace, that gives each identity a
	// stable DNS name <pod>.<serviceName>.<namespace>.svc: pods get hostname=<pod name> and
	// subdomain=<serviceName>. The operator does not create the Service. Optional; no DNS names if unset.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	ServiceName string `json:"serviceName,omitempty"`

	// podManagementPolicy is how pods are created and deleted. Parallel (the default: the original operator promises
	// "no sequential properties", unlike a StatefulSet, whose default is OrderedReady) creates all
	// missing pods at once. OrderedReady creates one at a time, in identity order, each Ready before the
	// next, and deletes one at a time.
	// +optional
	// +kubebuilder:default=Parallel
	PodManagementPolicy PodManagementPolicyType `json:"podManagementPolicy,omitempty"`

	// updateStrategy says how a change of template reaches the pods. Every updated pod gets a new
	// identity (pods are never updated in place), so a rolling update may surge. Defaults to RollingUpdate.
	// +optional
	// +kubebuilder:default={type: RollingUpdate}
	UpdateStrategy StatefulClusterUpdateStrategy `json:"updateStrategy,omitzero"`

	// revisionHistoryLimit is the number of old ControllerRevisions kept for rollback and history.
	// Defaults to 10.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	RevisionHistoryLimit *int32 `json:"revisionHistoryLimit,omitempty"`

	// minReadySeconds is how long, in seconds, a pod must be Ready without any container crashing to
	// count as available (status.availableReplicas, rolling-update progress). Defaults to 0: available
	// as soon as Ready.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	MinReadySeconds int32 `json:"minReadySeconds,omitempty"`

	// persistentVolumeClaimRetentionPolicy says what happens to the claims of identities that are
	// retired: when the StatefulCluster is deleted (whenDeleted), scaled down (whenScaled) or a pod is
	// replaced by a new identity (whenReplaced). All default to Retain, so no data is deleted unless asked.
	// +optional
	// +kubebuilder:default={}
	PersistentVolumeClaimRetentionPolicy *PersistentVolumeClaimRetentionPolicy `json:"persistentVolumeClaimRetentionPolicy,omitempty"`

	// unhealthyThresholdSeconds is how long, in seconds, a pod that has been Ready may stay not Ready
	// before it is replaced by a new identity. Measured from the Ready condition's lastTransitionTime, so
	// a flapping pod restarts the clock. Defaults to 300.
	// +optional
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	UnhealthyThresholdSeconds *int32 `json:"unhealthyThresholdSeconds,omitempty"`

	// startupThresholdSeconds is how long, in seconds, a running pod that has never been Ready may take
	// to become Ready before it is replaced by a new identity. Unset (the default) means such a pod is
	// never replaced for that reason: a pod that cannot start usually fails the same way under a new
	// identity, and replacing it would only churn identities and claims.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	StartupThresholdSeconds *int32 `json:"startupThresholdSeconds,omitempty"`

	// pendingThresholdSeconds is how long, in seconds, a pod may stay Pending (e.g. unschedulable because
	// its claim is bound in a lost zone) before it is replaced by a new identity. Measured from the pod's
	// creation, or from when it was scheduled if that is later. A pod that a new identity could not help
	// (one of its claims is not bound, or the scheduler finds no node for reasons other than its own
	// volumes) is kept and reported instead (Stalled=True, reason ClaimPending or Unschedulable, and a
	// Warning Event). A Pending pod never blocks the rest of the reconcile. Defaults to 600.
	// +optional
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	PendingThresholdSeconds *int32 `json:"pendingThresholdSeconds,omitempty"`

	// nodeLossToleranceSeconds is how long, in seconds, the node of a pod may be not Ready (Ready=False
	// or Unknown, measured from the node condition's lastTransitionTime) before the pod's identity is
	// retired with reason NodeLost and replaced. Defaults to 300, the default NoExecute toleration
	// Kubernetes gives pods for not-ready and unreachable nodes.
	// +optional
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	NodeLossToleranceSeconds *int32 `json:"nodeLossToleranceSeconds,omitempty"`

	// replaceOnNodeOutOfService makes a pod on a node tainted node.kubernetes.io/out-of-service count as
	// lost at once, without waiting nodeLossToleranceSeconds: the taint is an administrator's (or a
	// fencing agent's) statement that the node is shut down. Defaults to true.
	// +optional
	// +kubebuilder:default=true
	ReplaceOnNodeOutOfService *bool `json:"replaceOnNodeOutOfService,omitempty"`

	// replaceTerminating says when a Terminating pod stops counting toward replicas, so that a
	// replacement (a new identity with new claims, hence safe) is created while the old pod object still
	// exists: Never (count it until it is gone), WhenNodeLost (the default: stop counting it once its node
	// has been lost for nodeLossToleranceSeconds) or Always.
	// +optional
	// +kubebuilder:default=WhenNodeLost
	ReplaceTerminating ReplaceTerminatingPolicy `json:"replaceTerminating,omitempty"`

	// identityFormat is how identity (pod) names are formed. Ordinal (the default): <metadata.name>-<n>
	// with n strictly increasing over the object's life and never reused (status.nextIdentity).
	// Random: <metadata.name>-<8 hex digits>, as the original stateful-cluster-operator named pods; kept for migration.
	// +optional
	// +kubebuilder:default=Ordinal
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.identityFormat is immutable"
	IdentityFormat IdentityFormat `json:"identityFormat,omitempty"`

	// identityHistoryLimit is the number of retired identities kept in status.identities. Defaults to 20.
	// +optional
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=500
	IdentityHistoryLimit *int32 `json:"identityHistoryLimit,omitempty"`

	// membershipHooks are HTTP calls to a surviving Ready pod before a new identity joins and after an
	// identity is retired, so that quorum-based applications (etcd, Raft) can add and remove members
	// in a safe order. Unset: no calls.
	// +optional
	MembershipHooks *MembershipHooks `json:"membershipHooks,omitempty"`

	// zoneSpread spreads identities evenly across zones and, when a pod is replaced, places its
	// replacement in the same zone when that zone has capacity. Unset: placement is left to the
	// scheduler and the template's own affinity and topology spread constraints.
	// +optional
	ZoneSpread *ZoneSpread `json:"zoneSpread,omitempty"`
}

// PersistentVolumeClaimTemplate is a claim template: the parts of a PersistentVolumeClaim that a template
// can set. apiVersion and kind are accepted (and ignored) so that claim templates copied from a StatefulSet
// apply; status is not accepted.
type PersistentVolumeClaimTemplate struct {
	// apiVersion may be set to "v1" for compatibility with StatefulSet claim templates; it is ignored.
	// +optional
	// +kubebuilder:validation:Enum=v1
	APIVersion string `json:"apiVersion,omitempty"`

	// kind may be set to "PersistentVolumeClaim" for compatibility with StatefulSet claim templates; it
	// is ignored.
	// +optional
	// +kubebuilder:validation:Enum=PersistentVolumeClaim
	Kind string `json:"kind,omitempty"`

	// metadata names the claim template and gives the labels and annotations of the claims made from it.
	// +required
	Metadata ClaimTemplateMetadata `json:"metadata"`

	// spec is the specification of every claim made from this template (accessModes, resources,
	// storageClassName, ...), copied unchanged.
	// +required
	Spec corev1.PersistentVolumeClaimSpec `json:"spec"`
}

// ClaimTemplateMetadata is the metadata of a claim template.
type ClaimTemplateMetadata struct {
	// name is the claim template's name: the name of the pod volume that mounts the claim (a container's
	// volumeMounts[].name refers to it) and the middle part of each claim's name. A DNS-1123 label.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// labels are added to every claim made from this template (besides the operator's own labels).
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// annotations are added to every claim made from this template.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// StatefulClusterUpdateStrategy says how a template change is rolled out.
// +kubebuilder:validation:XValidation:rule="self.type == 'RollingUpdate' || !has(self.rollingUpdate)",message="spec.updateStrategy.rollingUpdate may only be set when spec.updateStrategy.type is RollingUpdate",fieldPath=".rollingUpdate"
type StatefulClusterUpdateStrategy struct {
	// type is RollingUpdate (the default: pods of old revisions are replaced by new identities of the
	// update revision, newest first, within maxUnavailable/maxSurge and above partition) or OnDelete
	// (a pod of an old revision is replaced only after someone deletes it).
	// +optional
	// +kubebuilder:default=RollingUpdate
	Type UpdateStrategyType `json:"type,omitempty"`

	// rollingUpdate tunes RollingUpdate. Unset means maxUnavailable 1, maxSurge 0, partition 0.
	// +optional
	RollingUpdate *RollingUpdateStatefulClusterStrategy `json:"rollingUpdate,omitempty"`
}

// RollingUpdateStatefulClusterStrategy tunes a rolling update.
// +kubebuilder:validation:XValidation:rule="!(has(self.maxUnavailable) && has(self.maxSurge) && (self.maxUnavailable == 0 || self.maxUnavailable == '0%') && (self.maxSurge == 0 || self.maxSurge == '0%'))",message="spec.updateStrategy.rollingUpdate.maxUnavailable and maxSurge must not both be 0"
type RollingUpdateStatefulClusterStrategy struct {
	// maxUnavailable is the maximum number of pods, or percentage of replicas (rounded up), that may be
	// unavailable during the update. Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="spec.updateStrategy.rollingUpdate.maxUnavailable must be a non-negative integer or a percentage such as 25%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// maxSurge is the maximum number of pods, or percentage of replicas (rounded up), created above
	// replicas during the update: since an updated pod is a new identity, the new pod can be started and
	// become Ready before the old one is deleted. Defaults to 0 (delete first, as a StatefulSet does).
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="spec.updateStrategy.rollingUpdate.maxSurge must be a non-negative integer or a percentage such as 25%"
	MaxSurge *intstr.IntOrString `json:"maxSurge,omitempty"`

	// partition is the number of pods, the oldest identities first, that keep the current revision: only
	// pods beyond the oldest partition are updated, which allows staged (canary) rollouts. Defaults to 0.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	Partition *int32 `json:"partition,omitempty"`
}

// PersistentVolumeClaimRetentionPolicy says what happens to the claims of retired identities.
type PersistentVolumeClaimRetentionPolicy struct {
	// whenDeleted applies to all claims when the StatefulCluster is deleted: Retain (the default) or
	// Delete (claims are owned by the StatefulCluster and garbage-collected with it).
	// +optional
	// +kubebuilder:default=Retain
	WhenDeleted ClaimRetentionPolicyType `json:"whenDeleted,omitempty"`

	// whenScaled applies to the claims of identities removed by a scale-down: Retain (the default) or
	// Delete.
	// +optional
	// +kubebuilder:default=Retain
	WhenScaled ClaimRetentionPolicyType `json:"whenScaled,omitempty"`

	// whenReplaced applies to the claims of identities replaced by a new identity (lost node, unhealthy,
	// failed, pending, updated, deleted pod): Retain (the default) or Delete, once the old pod is gone.
	// Retained claims are labelled enge.me/retired=true and listed in status.retiredClaims; they are
	// never reused. A claim that never bound (it holds no data) is deleted whatever this says.
	// +optional
	// +kubebuilder:default=Retain
	WhenReplaced ClaimRetentionPolicyType `json:"whenReplaced,omitempty"`
}

// MembershipHooks are the HTTP calls made around identity changes.
type MembershipHooks struct {
	// join is called before the pod of a new identity is created. A failure (with failurePolicy Fail)
	// holds the new pod back and sets condition MembershipHookFailed.
	// +optional
	Join *MembershipHook `json:"join,omitempty"`

	// retire is called after an identity is retired and before its replacement is created, so the
	// application can remove the old member first. A failure (with failurePolicy Fail) holds the
	// replacement back and sets condition MembershipHookFailed.
	// +optional
	Retire *MembershipHook `json:"retire,omitempty"`
}

// MembershipHook is an HTTP POST to one Ready surviving pod (the oldest identity that answers) with a JSON
// body {"event": "Join"|"Retire", "identity": "<pod name>", "uid": "<pod uid>"}. Any 2xx answer is success.
type MembershipHook struct {
	// path is the HTTP path, e.g. /members.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/`
	Path string `json:"path"`

	// port is the pod port: a number or the name of a container port.
	// +required
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 && self <= 65535 : size(self) <= 15 && self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && self.matches('[a-z]')",message="port must be a port number (1-65535) or a container port name (at most 15 lower-case letters, digits and '-')"
	Port intstr.IntOrString `json:"port"`

	// scheme is HTTP (the default) or HTTPS (the pod's certificate is not verified).
	// +optional
	// +kubebuilder:default=HTTP
	// +kubebuilder:validation:Enum=HTTP;HTTPS
	Scheme corev1.URIScheme `json:"scheme,omitempty"`

	// timeoutSeconds is how long, in seconds, one call may take. Defaults to 10.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=300
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`

	// failurePolicy is Fail (the default: the guarded step waits and the call is retried) or Ignore
	// (an Event records the failure and the step proceeds).
	// +optional
	// +kubebuilder:default=Fail
	FailurePolicy HookFailurePolicy `json:"failurePolicy,omitempty"`
}

// ZoneSpread spreads identities across zones.
type ZoneSpread struct {
	// topologyKey is the node label whose value names a node's zone. Defaults to
	// topology.kubernetes.io/zone.
	// +optional
	// +kubebuilder:default="topology.kubernetes.io/zone"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	TopologyKey string `json:"topologyKey,omitempty"`

	// maxUnavailablePerZone is the maximum number of pods, or percentage of a zone's pods (rounded up),
	// that may be unavailable in one zone during an update. Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^(100|[1-9][0-9]?)%$')",message="spec.zoneSpread.maxUnavailablePerZone must be a positive integer or a percentage such as 50%"
	MaxUnavailablePerZone *intstr.IntOrString `json:"maxUnavailablePerZone,omitempty"`
}

// StatefulClusterStatus is the observed state of a StatefulCluster, written by the operator. It carries
// the fields of an apps/v1 StatefulSetStatus plus the identity bookkeeping.
type StatefulClusterStatus struct {
	// observedGeneration is the metadata.generation the operator last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// replicas is the number of live pods: pods of this StatefulCluster that count toward spec.replicas
	// (Terminating pods excluded per spec.replaceTerminating).
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// readyReplicas is the number of live pods with a Ready condition.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// currentReplicas is the number of live pods of currentRevision.
	// +optional
	CurrentReplicas int32 `json:"currentReplicas,omitempty"`

	// updatedReplicas is the number of live pods of updateRevision.
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas,omitempty"`

	// availableReplicas is the number of live pods Ready for at least spec.minReadySeconds.
	// +optional
	AvailableReplicas int32 `json:"availableReplicas,omitempty"`

	// currentRevision is the name of the ControllerRevision of the pods being replaced (equal to
	// updateRevision when no update is in progress).
	// +optional
	CurrentRevision string `json:"currentRevision,omitempty"`

	// updateRevision is the name of the ControllerRevision of spec.template, the revision new pods get.
	// +optional
	UpdateRevision string `json:"updateRevision,omitempty"`

	// collisionCount counts hash collisions of ControllerRevision names; it is folded into the next
	// revision name to avoid them.
	// +optional
	CollisionCount *int32 `json:"collisionCount,omitempty"`

	// nextIdentity is the high-water mark of identities: the n of the next pod <metadata.name>-<n>.
	// It only grows. The operator writes it before creating a pod and, should that write be lost,
	// derives it again from the highest identity among pods, claims and this ledger, so no name is reused.
	// +optional
	// +kubebuilder:validation:Minimum=0
	NextIdentity int64 `json:"nextIdentity,omitempty"`

	// identities is the ledger of recently retired identities, newest first, capped at
	// spec.identityHistoryLimit: which pod, when, why, and its claims.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=500
	Identities []IdentityRecord `json:"identities,omitempty"`

	// retiredClaims lists the claims of retired identities that were kept (Retain), newest first. They
	// carry the label enge.me/retired=true and are never mounted again; delete them when no longer needed.
	// At most 1000 are listed.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=1000
	RetiredClaims []RetiredClaim `json:"retiredClaims,omitempty"`

	// selector is spec.selector in string form (e.g. "app=coder,enge.me/statefulcluster=coder"), for the
	// scale subresource, so that kubectl scale and HorizontalPodAutoscalers can find the pods.
	// +optional
	Selector string `json:"selector,omitempty"`

	// conditions describe the state in detail, each with the observedGeneration it was decided for:
	// "Ready" (the summary: replicas pods are live and Ready, all of updateRevision, nothing being
	// replaced; `kubectl wait --for=condition=Ready`), "Available" (at least spec.replicas pods are
	// available), "Progressing" (pods are being created, retired, replaced or updated),
	// "ReplicaFailure" (a pod or claim could not be created or deleted, or another write failed; retried),
	// "MembershipHookFailed" (a hook with failurePolicy Fail is failing), and the kstatus conditions that
	// Flux, Argo CD and kpt read (sigs.k8s.io/cli-utils/pkg/kstatus): "Reconciling" (True while the
	// operator gets to the spec on its own: InProgress) and "Stalled" (True while it cannot without a
	// change by the user: Failed; reason ClaimPending, Unschedulable, InvalidSelector, SelectorMismatch,
	// InvalidTemplate or HookPortNotFound). At most one of the two is present; with neither, the
	// StatefulCluster is Current. docs/cluster.md "Status" lists every reason.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// IdentityRecord is one retired identity in the ledger.
type IdentityRecord struct {
	// name is the identity: the pod's name, <metadata.name>-<n>.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// uid is the UID of the identity's pod.
	// +optional
	UID types.UID `json:"uid,omitempty"`

	// node is the node the pod last ran on, if any.
	// +optional
	Node string `json:"node,omitempty"`

	// createdAt is when the identity's pod was created.
	// +optional
	CreatedAt *metav1.Time `json:"createdAt,omitempty"`

	// retiredAt is when the identity was retired.
	// +optional
	RetiredAt *metav1.Time `json:"retiredAt,omitempty"`

	// reason is why the identity was retired: NodeLost, Unhealthy, Pending, Failed, ScaledDown, Updated
	// or Deleted.
	// +optional
	Reason RetirementReason `json:"reason,omitempty"`

	// message is a human-readable detail, e.g. "node worker-2 not Ready for 312s".
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// claims are the names of the identity's PersistentVolumeClaims.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	Claims []string `json:"claims,omitempty"`

	// retireHookAt is when the retire membership hook was done for this identity (it succeeded, or failed
	// under failurePolicy Ignore, or there was no surviving pod to call). Unset while it is due.
	// +optional
	RetireHookAt *metav1.Time `json:"retireHookAt,omitempty"`
}

// RetiredClaim is a claim of a retired identity that was retained.
type RetiredClaim struct {
	// name is the PersistentVolumeClaim's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// identity is the retired identity the claim belonged to.
	// +optional
	Identity string `json:"identity,omitempty"`

	// retiredAt is when the claim was retired.
	// +optional
	RetiredAt *metav1.Time `json:"retiredAt,omitempty"`
}

// StatefulCluster runs stateful pods like a StatefulSet, with one promise a StatefulSet does not make: a
// pod identity (its name and its volumes) is used by exactly one pod, ever. When a pod or its node is lost
// the hole is filled promptly by a pod with a new identity and new claims, never by reusing the old ones.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:categories=statefulops,shortName=stc
// +kubebuilder:printcolumn:name="Desired",type="integer",JSONPath=".spec.replicas"
// +kubebuilder:printcolumn:name="Current",type="integer",JSONPath=".status.replicas"
// +kubebuilder:printcolumn:name="Available",type="integer",JSONPath=".status.availableReplicas"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Next Identity",type="integer",JSONPath=".status.nextIdentity",priority=1
// +kubebuilder:printcolumn:name="Pod Management",type="string",JSONPath=".spec.podManagementPolicy",priority=1
// +kubebuilder:printcolumn:name="Revision",type="string",JSONPath=".status.updateRevision",priority=1
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 52",message="metadata.name must be at most 52 characters, so that pod names <name>-<n> stay valid hostnames (63)"
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.selector) || !has(self.spec.selector.matchLabels) || ((!('enge.me/statefulcluster' in self.spec.selector.matchLabels) || self.spec.selector.matchLabels['enge.me/statefulcluster'] == self.metadata.name) && !('enge.me/identity' in self.spec.selector.matchLabels) && !('controller-revision-hash' in self.spec.selector.matchLabels))",message="spec.selector.matchLabels must not select on enge.me/identity or controller-revision-hash (they differ from pod to pod), and enge.me/statefulcluster must equal metadata.name (the operator sets it on every pod)",fieldPath=".spec.selector.matchLabels"
type StatefulCluster struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec is the desired state of the StatefulCluster.
	// +required
	Spec StatefulClusterSpec `json:"spec"`

	// status is the observed state, written by the operator.
	// +optional
	Status StatefulClusterStatus `json:"status,omitzero"`
}

// StatefulClusterList is a list of StatefulClusters.
// +kubebuilder:object:root=true
type StatefulClusterList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitzero"`
	// items are the StatefulClusters.
	Items []StatefulCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&StatefulCluster{}, &StatefulClusterList{})
}
