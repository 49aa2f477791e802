// Command rollout-operator runs the PhasedRollout operator of statefulops.
package main

import (
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/statefulops/statefulops/rollout-operator/internal/controller"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	"github.com/statefulops/statefulops/shared/manager"
)

// The operator reads and writes its own kind (patch also removes the sts.plus/promote annotation once
// it acted on it) and records Events about it.
// +kubebuilder:rbac:groups=sts.plus,resources=phasedrollouts,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=sts.plus,resources=phasedrollouts/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sts.plus,resources=phasedrollouts/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

func main() {
	opts := &controller.Options{}
	manager.Main(manager.Options{
		Name:             "rollout-operator",
		Short:            "Runs PhasedRollout: StatefulSet updates one pod at a time, gated by Prometheus checks.",
		LeaderElectionID: "304add93.sts.plus",
		Schemes:          []func(*runtime.Scheme) error{rolloutv1alpha1.AddToScheme},
		// StatefulSetLocks (lease-operator) are read, and annotated for a switchover, when the kind is
		// served (controller/writer.go); installed alone, the rollout-operator does not wait for them.
		OptionalSchemes: []func(*runtime.Scheme) error{leasev1.AddToScheme},
		// Only StatefulSets' pods in the cache, stripped to what wakes the controller (controller/cache.go).
		Cache: controller.CacheOptions,
		Flags: opts.AddFlags,
		Setup: opts.Setup,
	})
}
