package v1alpha1

// Condition types of a StatefulCluster (status.conditions[].type).
const (
	// ConditionReady is the summary: spec.replicas pods are live and Ready, all of updateRevision, and
	// nothing is being replaced. `kubectl wait --for=condition=Ready` waits for it.
	ConditionReady = "Ready"
	// ConditionAvailable is True when at least spec.replicas pods are available (Ready for
	// spec.minReadySeconds), as on a Deployment.
	ConditionAvailable = "Available"
	// ConditionProgressing is True while pods are being created, replaced or updated.
	ConditionProgressing = "Progressing"
	// ConditionReplicaFailure is True when a pod or claim could not be created or deleted; the message
	// says which and why.
	ConditionReplicaFailure = "ReplicaFailure"
	// ConditionStalled is True while the StatefulCluster cannot make progress without a change by the
	// user (the kstatus convention: tools read it as Failed): a pod Pending past
	// spec.pendingThresholdSeconds for a reason that replacing it by a new identity cannot fix (its claim
	// cannot bind, or the scheduler finds no node for it: the pod is kept and reported instead of
	// replaced); a spec the operator does not act on (a selector that does not parse or does not select
	// the template's pods, stored before the CRD refused them); a pod template the API server refuses; a
	// membership hook (failurePolicy Fail) no pod can answer. Only a change in the cluster or the spec
	// unblocks it; the reason says which.
	ConditionStalled = "Stalled"
	// ConditionReconciling is True while the operator is getting to the spec without the user (the
	// kstatus convention: tools read it as InProgress): pods being created, retired, replaced or updated,
	// pods not Ready or not yet available, a failed write being retried. Its reason is Ready's reason
	// (or ReplicaFailure's, or Available's when only those are unmet). Absent when Stalled.
	ConditionReconciling = "Reconciling"
	// ConditionMembershipHookFailed is True while a membership hook with failurePolicy Fail is failing
	// and holds a pod back.
	ConditionMembershipHookFailed = "MembershipHookFailed"
)

// Condition reasons of a StatefulCluster.
const (
	// ReasonReconciled: the observed state matches the spec.
	ReasonReconciled = "Reconciled"
	// ReasonScalingUp: pods of new identities are being created to reach spec.replicas.
	ReasonScalingUp = "ScalingUp"
	// ReasonScalingDown: identities are being retired to reach spec.replicas.
	ReasonScalingDown = "ScalingDown"
	// ReasonReplacing: lost, unhealthy, failed or stuck pods are being replaced by new identities.
	ReasonReplacing = "Replacing"
	// ReasonUpdating: pods of old revisions are being replaced by pods of updateRevision.
	ReasonUpdating = "Updating"
	// ReasonPodsNotReady: some live pods are not Ready (yet).
	ReasonPodsNotReady = "PodsNotReady"
	// ReasonMinimumReplicasUnavailable: fewer than spec.replicas pods are available.
	ReasonMinimumReplicasUnavailable = "MinimumReplicasUnavailable"
	// ReasonMinimumReplicasAvailable: at least spec.replicas pods are available.
	ReasonMinimumReplicasAvailable = "MinimumReplicasAvailable"
	// ReasonCreateFailed: creating a pod or claim failed.
	ReasonCreateFailed = "CreateFailed"
	// ReasonDeleteFailed: deleting a pod or claim failed.
	ReasonDeleteFailed = "DeleteFailed"
	// ReasonHookFailed: a membership hook call failed.
	ReasonHookFailed = "HookFailed"
	// ReasonClaimPending: a Pending pod waits for a claim that cannot bind (no StorageClass or
	// provisioner, provisioning failed, no matching PersistentVolume); a new identity's claims would
	// come from the same templates and wait the same way.
	ReasonClaimPending = "ClaimPending"
	// ReasonUnschedulable: the scheduler finds no node for a Pending pod for a reason its claims do not
	// cause (resources, affinity, taints); a new identity would be the same pod.
	ReasonUnschedulable = "Unschedulable"
	// ReasonHookSucceeded: the last membership hook call succeeded.
	ReasonHookSucceeded = "HookSucceeded"
	// ReasonReconcileError: a read or write other than a pod's creation or deletion failed (listing
	// pods, a ControllerRevision, a claim's label or owner); retried with backoff.
	ReasonReconcileError = "ReconcileError"
	// ReasonInvalidSelector (Stalled): spec.selector does not parse. The CRD refuses such selectors at
	// apply; an object stored before it did is not acted on until it is re-created.
	ReasonInvalidSelector = "InvalidSelector"
	// ReasonSelectorMismatch (Stalled): spec.selector does not select the pods spec.template makes, as
	// the StatefulSet API requires. The CRD refuses it at apply; an object stored before it did is not
	// acted on until it is re-created.
	ReasonSelectorMismatch = "SelectorMismatch"
	// ReasonInvalidTemplate (Stalled): the API server refused a pod built from spec.template as invalid
	// (e.g. a container name that is not a DNS label); no pod is created until spec.template changes.
	ReasonInvalidTemplate = "InvalidTemplate"
	// ReasonHookPortNotFound (Stalled): a membership hook with failurePolicy Fail names a port that no
	// surviving Ready pod has, so the call can never be made and the pod it guards is held back.
	ReasonHookPortNotFound = "HookPortNotFound"
)

// Event reasons of a StatefulCluster's normal work (the waiting states' Events use the condition
// reasons above: CreateFailed, DeleteFailed, ClaimPending, Unschedulable, ...).
const (
	// EventAdopted: an orphan pod the selector selects was adopted (its owner reference set).
	EventAdopted = "Adopted"
	// EventRetired: an identity was retired (its pod deleted); Warning unless scaled down or updated.
	EventRetired = "Retired"
	// EventSuccessfulCreate: pods of new identities were created (the name a StatefulSet's Event has).
	EventSuccessfulCreate = "SuccessfulCreate"
	// EventClaimDeleted: a claim of a retired identity was deleted (retention policy Delete).
	EventClaimDeleted = "ClaimDeleted"
	// EventClaimRetained: a claim of a retired identity was kept and labelled RetiredLabel=true.
	EventClaimRetained = "ClaimRetained"
)

// Labels and annotations the operator puts on the objects it creates.
const (
	// ClusterNameLabel carries the StatefulCluster's name on its pods, claims and ControllerRevisions
	// (the original stateful-cluster-operator's example also selects on it).
	ClusterNameLabel = "enge.me/statefulcluster"
	// IdentityLabel carries the identity (the pod name) on its pod and on each of its claims.
	IdentityLabel = "enge.me/identity"
	// RetiredLabel is set to "true" on the retained claims of a retired identity: never mounted again.
	RetiredLabel = "enge.me/retired"
	// RetiredAtAnnotation is the RFC 3339 time a retained claim was retired.
	RetiredAtAnnotation = "enge.me/retired-at"
	// ZoneLabel carries the zone a pod was pinned to by spec.zoneSpread.
	ZoneLabel = "enge.me/zone"
	// RevisionLabel is the pod's ControllerRevision hash, as on StatefulSet pods.
	RevisionLabel = "controller-revision-hash"
)
