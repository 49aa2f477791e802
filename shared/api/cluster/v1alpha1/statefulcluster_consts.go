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
	// ConditionStalled is True while a pod has been Pending past spec.pendingThresholdSeconds for a
	// reason that replacing it by a new identity cannot fix (its claim cannot bind, or the scheduler
	// finds no node for it): the pod is kept and reported instead of replaced. The kstatus convention:
	// only a change in the cluster (a provisioner, a node, a spec change) unblocks it.
	ConditionStalled = "Stalled"
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
