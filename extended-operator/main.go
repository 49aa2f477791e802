// Command extended-operator runs the ExtendedStatefulSet operator of statefulops.
package main

import (
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/statefulops/statefulops/extended-operator/internal/controller"
	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	"github.com/statefulops/statefulops/shared/manager"
)

// The operator reads and writes its own kind and records Events about it.
// +kubebuilder:rbac:groups=fissile.cloudfoundry.org,resources=extendedstatefulsets,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=fissile.cloudfoundry.org,resources=extendedstatefulsets/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=fissile.cloudfoundry.org,resources=extendedstatefulsets/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

func main() {
	opts := &controller.Options{}
	manager.Main(manager.Options{
		Name:             "extended-operator",
		Short:            "Runs ExtendedStatefulSet: scaling limits, config-change restarts and versioned canary upgrades.",
		LeaderElectionID: "extended-operator.fissile.cloudfoundry.org",
		Schemes:          []func(*runtime.Scheme) error{extendedv1alpha1.AddToScheme},
		Flags:            opts.AddFlags,
		// ConfigMaps and Secrets as slim metadata only (controller/cache.go).
		Cache: controller.CacheOptions,
		Setup: opts.Setup,
	})
}
