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
	// ConditionStalled (kstatus, sigs.k8s.io/cli-utils/pkg/kstatus) is True when the lock cannot make
	// progress without a change by the user: tools that read it (Flux, kpt, kubectl-based deploy tools)
	// report the lock Failed.
	ConditionStalled = "Stalled"
	// ConditionReconciling (kstatus) is True while the lock is getting to a working writer on its own:
	// an election or a failover pending (no Ready pod yet, a delayed failover, a switchover waiting for
	// its target) or an error the operator retries. kstatus reports the lock InProgress.
	ConditionReconciling = "Reconciling"
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
	// ReasonSwitchoverPending (condition Reconciling): the switchover annotation names a pod that cannot
	// take the writer role yet; the writer stays where it is meanwhile.
	ReasonSwitchoverPending = "SwitchoverPending"
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
	// EventRoleRemoved is recorded on a pod whose role labels the operator removed because the lock
	// that labelled it no longer exists.
	EventRoleRemoved = "RoleRemoved"
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
	// carrying it. On a pod it names the lock whose operator labelled the pod's role: a pod labelled by
	// a lock that no longer exists has its role labels removed (fencing, see the controller package).
	LockLabel = "app.anukkrit.me/statefulsetlock"
	// WriterLeaseAnnotation on the writer pod names the Lease it is the writer for (a Lease name may be
	// longer than a label value): no pod is labelled writer for a Lease while another pod still is.
	WriterLeaseAnnotation = "app.anukkrit.me/writer-lease"
	// WriterLeaseKeyLabel on the writer pod is its Lease's name as a label value (LeaseKey), so the
	// operator lists the pods labelled writer for one Lease instead of every writer of the namespace;
	// WriterLeaseAnnotation stays the exact record.
	WriterLeaseKeyLabel = "app.anukkrit.me/writer-lease-key"
	// FieldManager is the server-side-apply field manager that owns these role labels and annotations
	// on pods, so a GitOps tool can tell them from its own fields (docs/gitops.md).
	FieldManager = "statefulsetlock"
	// Finalizer is the original operator's finalizer, which an older version of this operator set too;
	// the operator now removes it on sight (a lock needs none: see the controller package).
	Finalizer = "statefulsetlock.app.anukkrit.me/finalizer"
)
