package v1

// Condition types of a StatefulSetLock (status.conditions[].type). Available, Progressing and Error are
// those of the original StatefulSet Leader Election Operator; Ready is the summary every statefulops kind carries.
const (
	// ConditionReady is the summary: True when a writer is elected and labelled and the Lease is current.
	ConditionReady = "Ready"
	// ConditionAvailable is True when the operator is functioning correctly for this lock.
	ConditionAvailable = "Available"
	// ConditionProgressing is True while the operator is applying a change (election, failover).
	ConditionProgressing = "Progressing"
	// ConditionError is True while an error prevents the lock from working; the message says which.
	ConditionError = "Error"
)

// Condition reasons of a StatefulSetLock. The first four are the original operator's.
const (
	ReasonReconciling         = "Reconciling"
	ReasonReconcileError      = "ReconcileError"
	ReasonAvailable           = "Available"
	ReasonStatefulSetNotFound = "StatefulSetNotFound"
	// ReasonLeaseConflict: a Lease named spec.leaseName exists and is not owned by this lock.
	ReasonLeaseConflict = "LeaseConflict"
	// ReasonNoReadyPods: the StatefulSet has no Ready pod (e.g. scaled to zero); not an error.
	ReasonNoReadyPods = "NoReadyPods"
	// ReasonStatefulSetConflict: an older StatefulSetLock already names the same StatefulSet; this one
	// leaves the pods alone so that two locks never elect two writers.
	ReasonStatefulSetConflict = "StatefulSetConflict"
	// ReasonFailoverDelayed: the writer is not Ready and failoverDelaySeconds has not passed yet.
	ReasonFailoverDelayed = "FailoverDelayed"
)

// Failover reasons (status.lastFailoverReason) and Event reasons.
const (
	FailoverReasonInitialElection   = "InitialElection"
	FailoverReasonWriterNotReady    = "WriterNotReady"
	FailoverReasonWriterTerminating = "WriterTerminating"
	FailoverReasonWriterGone        = "WriterGone"
	FailoverReasonNodeNotReady      = "NodeNotReady"
	FailoverReasonSwitchover        = "Switchover"

	// EventWriterElected is recorded when a pod is labelled writer.
	EventWriterElected = "WriterElected"
	// EventWriterDemoted is recorded when the writer is labelled reader.
	EventWriterDemoted = "WriterDemoted"
)

// Keys the operator writes on pods and reads from the lock.
const (
	// RoleLabel is the pod label carrying the role; Services select on it (as in the original operator).
	RoleLabel = "sts-role"
	// RoleWriter is RoleLabel's value on the one writer pod.
	RoleWriter = "writer"
	// RoleReader is RoleLabel's value on every other pod of the StatefulSet.
	RoleReader = "reader"
	// WriterEpochAnnotation on the writer pod holds the Lease's leaseTransitions at its election, a
	// fencing epoch that strictly increases across failovers.
	WriterEpochAnnotation = "app.anukkrit.me/writer-epoch"
	// SwitchoverAnnotation on a StatefulSetLock names a pod to move the writer role to (planned
	// switchover: demote, then promote), if that pod is Ready.
	SwitchoverAnnotation = "app.anukkrit.me/switchover-to"
	// WriterUIDAnnotation on the Lease holds the UID of the writer pod named by holderIdentity, so a
	// StatefulSet pod recreated under the same name is not mistaken for the writer.
	WriterUIDAnnotation = "app.anukkrit.me/writer-uid"
	// LockLabel on the Lease names the StatefulSetLock that owns it; the operator caches only Leases
	// carrying it.
	LockLabel = "app.anukkrit.me/statefulsetlock"
	// Finalizer is the original operator's finalizer: on deletion role labels are removed and the Lease deleted.
	Finalizer = "statefulsetlock.app.anukkrit.me/finalizer"
)
