// Command singleton-operator runs the StatefulSingleton operator of statefulops: the controller that
// releases held pods one at a time (package controller) and the HTTPS start-grant endpoint that the
// status-sidecars of Wrapper-mode pods long-poll (package grant).
package main

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/shared/manager"
	"github.com/statefulops/statefulops/singleton-operator/internal/controller"
	"github.com/statefulops/statefulops/singleton-operator/internal/grant"
)

// The operator reads and writes its own kind and records Events about it.
// +kubebuilder:rbac:groups=apps.openshift.statefulsingleton.com,resources=statefulsingletons,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=apps.openshift.statefulsingleton.com,resources=statefulsingletons/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps.openshift.statefulsingleton.com,resources=statefulsingletons/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

func main() {
	opts, grants := &controller.Options{}, &grant.ServeConfig{Exits: grant.NewExits()}
	// The controller learns of the grant server's accepted exit reports, and the grant server of the
	// controller's releases, in process rather than through the pods' watch events (both are on the
	// handover's critical path; the annotations stay the record, and another replica goes by them).
	opts.Exits, opts.Released = grants.Exits, grants.Released
	// Both read the manager's cache: the controller's package connects it, the grant server asks it.
	opts.Successors = controller.NewSuccessors()
	grants.Successors = opts.Successors
	manager.Main(manager.Options{
		Name:             "singleton-operator",
		Short:            "Runs StatefulSingleton: no two pods of a singleton ever run their main process at once.",
		LeaderElectionID: "statefulsingleton-operator.apps.statefulsingleton.com",
		// A workload waits on this operator when a node is lost with its leader: fail over in about 11s
		// instead of 16s, at 60 Lease writes per minute (manager.FastFailoverLeaderElection).
		LeaderElection: manager.FastFailoverLeaderElection,
		Schemes:        []func(*runtime.Scheme) error{singletonv1.AddToScheme},
		Flags:          grants.AddFlags,
		// Only managed pods in the manager's cache (controller/cache.go); the others a singleton selects
		// come from per-selector caches (controller/caches.go).
		Cache: controller.CacheOptions,
		Setup: func(ctx context.Context, mgr ctrl.Manager) error {
			if err := opts.Setup(ctx, mgr); err != nil {
				return err
			}
			return grants.Setup(ctx, mgr)
		},
	})
}
