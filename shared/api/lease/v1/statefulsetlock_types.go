package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StatefulSetLockSpec is the desired state of a StatefulSetLock: which StatefulSet's pods elect one
// writer, and the Lease that records the election.
type StatefulSetLockSpec struct {
	// statefulSetName is the name of the StatefulSet, in the lock's namespace, among whose pods exactly
	// one is labelled sts-role=writer and the others sts-role=reader. Cannot be changed after creation:
	// retargeting would leave role labels on the old StatefulSet's pods. Create a new lock instead.
	// At most 63 characters: a longer StatefulSet name makes pod names (<name>-<ordinal>) that are not
	// valid hostnames, so such a StatefulSet can have no pods.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.statefulSetName is immutable"
	StatefulSetName string `json:"statefulSetName"`

	// leaseName is the name of the coordination.k8s.io/v1 Lease, in the lock's namespace, that the
	// operator creates and owns: holderIdentity is the writer pod's name, leaseTransitions counts writer
	// changes. A Lease of that name that the lock does not own is never overwritten (condition
	// Available=False, reason LeaseConflict). Cannot be changed after creation.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.leaseName is immutable"
	LeaseName string `json:"leaseName"`

	// leaseDurationSeconds is how long, in seconds, the Lease is valid after each renewal. The operator
	// renews it at half this duration. Must be 1..3600.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	LeaseDurationSeconds int32 `json:"leaseDurationSeconds"`

	// failoverDelaySeconds is how long, in seconds, the writer must stay not Ready before another pod is
	// promoted, to ride out readiness flaps. A writer that is terminating, gone or on a NotReady node is
	// replaced without this delay. Defaults to 0 (immediate failover, as in the original StatefulSet Leader Election Operator); must be 0..3600.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	FailoverDelaySeconds int32 `json:"failoverDelaySeconds,omitempty"`

	// services, when set, has the operator create two ClusterIP Services it owns, in the lock's
	// namespace: <lock>-rw selecting the writer (labels app.anukkrit.me/statefulsetlock=<lock>,
	// sts-role=writer) and <lock>-ro selecting the readers (sts-role=reader), so that a client connects
	// to the writer without a selector of its own, and routing moves with the writer label (with
	// endpoints: Operator, the Services have no selector and the operator writes their EndpointSlices).
	// They are deleted with the lock, or when this field is removed. Unset: no Services (the default).
	// +optional
	Services *LockServices `json:"services,omitempty"`
}

// LockServices are the ports of the writer and reader Services of a lock.
// +kubebuilder:validation:XValidation:rule="size(self.ports) == 1 || self.ports.all(p, has(p.name))",message="with more than one port, every port needs a name"
// +kubebuilder:validation:XValidation:rule="self.ports.all(p, !has(p.name) || self.ports.exists_one(q, has(q.name) && q.name == p.name))",message="port names must be unique"
type LockServices struct {
	// ports are the ports both Services expose, each forwarded to targetPort of the pods.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=port
	Ports []LockServicePort `json:"ports"`

	// endpoints says who fills the Services' endpoints. Selector (the default): the Services select
	// the role labels and kube-controller-manager's EndpointSlice controller fills them. Operator: the
	// Services have no selector and the operator writes their EndpointSlices itself, the writer's in the
	// same reconcile step as the writer label (emptied before the old writer is demoted, set once the new
	// one is labelled), so it never holds more than one endpoint. Changing it recreates both Services
	// (their ClusterIPs change).
	// +optional
	// +kubebuilder:default=Selector
	// +kubebuilder:validation:Enum=Selector;Operator
	Endpoints ServiceEndpoints `json:"endpoints,omitempty"`
}

// ServiceEndpoints says who fills the endpoints of a lock's Services.
type ServiceEndpoints string

const (
	// EndpointsSelector: the Services select the role labels; the EndpointSlice controller fills them.
	EndpointsSelector ServiceEndpoints = "Selector"
	// EndpointsOperator: the Services have no selector; the operator writes their EndpointSlices.
	EndpointsOperator ServiceEndpoints = "Operator"
)

// LockServicePort is one port of the writer and reader Services.
type LockServicePort struct {
	// name is the port's name (an IANA service name: lowercase letters, digits and dashes, at most 15
	// characters); required when there is more than one port.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name,omitempty"`
	// port is the Services' port.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
	// targetPort is the pods' port the Services forward to. Defaults to port.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	TargetPort int32 `json:"targetPort,omitempty"`
}

// StatefulSetLockStatus is the observed state of a StatefulSetLock, written by the operator.
type StatefulSetLockStatus struct {
	// observedGeneration is the metadata.generation of the lock that the operator last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// writerPod is the name of the pod currently labelled sts-role=writer, empty if none (e.g. the
	// StatefulSet is scaled to zero or no pod is Ready).
	// +optional
	WriterPod string `json:"writerPod,omitempty"`

	// writerPodUID is the UID of writerPod. A StatefulSet pod recreated under the same name has a new
	// UID and is not the writer until it is elected again.
	// +optional
	WriterPodUID string `json:"writerPodUID,omitempty"`

	// leaseTransitions mirrors the Lease's leaseTransitions: the number of writer changes. It is the
	// fencing epoch stamped on the writer pod as the annotation app.anukkrit.me/writer-epoch.
	// +optional
	// +kubebuilder:validation:Minimum=0
	LeaseTransitions int32 `json:"leaseTransitions,omitempty"`

	// lastFailoverTime is when the writer last changed.
	// +optional
	LastFailoverTime *metav1.Time `json:"lastFailoverTime,omitempty"`

	// lastFailoverReason says why the writer last changed, e.g. "WriterNotReady", "WriterTerminating",
	// "WriterGone", "NodeNotReady", "Switchover" or "InitialElection".
	// +optional
	LastFailoverReason string `json:"lastFailoverReason,omitempty"`

	// conditions describe the state in detail: "Available" (the lock is functioning), "Progressing" (the
	// operator is applying a change), "Error" (an error, with a message), as the original StatefulSet Leader Election Operator reported, and
	// "Ready" as the summary.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// StatefulSetLock elects one writer among the pods of a StatefulSet: the writer pod is labelled
// sts-role=writer, every other pod sts-role=reader, and a coordination.k8s.io/v1 Lease records the
// holder, so Services can route writes and reads by label.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=statefulops,shortName=ssl
// +kubebuilder:printcolumn:name="StatefulSet",type="string",JSONPath=".spec.statefulSetName"
// +kubebuilder:printcolumn:name="Writer Pod",type="string",JSONPath=".status.writerPod"
// +kubebuilder:printcolumn:name="Lease",type="string",JSONPath=".spec.leaseName"
// +kubebuilder:printcolumn:name="Lease Duration",type="integer",JSONPath=".spec.leaseDurationSeconds"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Transitions",type="integer",JSONPath=".status.leaseTransitions",priority=1
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="metadata.name must be at most 63 characters: it is the value of the label app.anukkrit.me/statefulsetlock on the lock's Lease"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.services) || (size(self.metadata.name) <= 60 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$'))",message="with spec.services, metadata.name must be a DNS label of at most 60 characters starting with a letter: the Services are named <name>-rw and <name>-ro"
type StatefulSetLock struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec is the desired state of the lock.
	// +required
	Spec StatefulSetLockSpec `json:"spec"`

	// status is the observed state, written by the operator.
	// +optional
	Status StatefulSetLockStatus `json:"status,omitzero"`
}

// StatefulSetLockList is a list of StatefulSetLocks.
// +kubebuilder:object:root=true
type StatefulSetLockList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitzero"`
	// items are the StatefulSetLocks.
	Items []StatefulSetLock `json:"items"`
}

func init() {
	SchemeBuilder.Register(&StatefulSetLock{}, &StatefulSetLockList{})
}
