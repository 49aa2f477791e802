// Command lease-operator runs the StatefulSetLock operator of statefulops.
package main

import (
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/statefulops/statefulops/lease-operator/internal/controller"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	"github.com/statefulops/statefulops/shared/manager"
)

// The operator reads and writes its own kind and records Events about it. A lock has no finalizer any
// more (the operator only removes an older version's); statefulsetlocks/finalizers stays because the
// Lease's ownerReference sets blockOwnerDeletion, which the API server allows only to who may update
// the owner's finalizers.
// +kubebuilder:rbac:groups=app.anukkrit.me,resources=statefulsetlocks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=app.anukkrit.me,resources=statefulsetlocks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=app.anukkrit.me,resources=statefulsetlocks/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

func main() {
	opts := &controller.Options{}
	manager.Main(manager.Options{
		Name:             "lease-operator",
		Short:            "Runs StatefulSetLock: exactly one writer pod among a StatefulSet's ready pods.",
		LeaderElectionID: "lease-operator.app.anukkrit.me",
		// A workload waits on this operator when a node is lost with its leader: fail over in about 11s
		// instead of 16s, at 60 Lease writes per minute (manager.FastFailoverLeaderElection).
		LeaderElection: manager.FastFailoverLeaderElection,
		Schemes:        []func(*runtime.Scheme) error{leasev1.AddToScheme},
		// StatefulSets' pods and the locks' Leases only, slim pods and nodes, StatefulSets as metadata
		// (controller/cache.go).
		Cache: controller.CacheOptions,
		Setup: opts.Setup,
	})
}
