// Command cluster-operator runs the StatefulCluster operator of statefulops.
package main

import (
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/statefulops/statefulops/cluster-operator/internal/controller"
	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	"github.com/statefulops/statefulops/shared/manager"
)

// The operator reads its own kind; it never writes the main resource (it keeps no finalizer).
// +kubebuilder:rbac:groups=enge.me,resources=statefulclusters,verbs=get;list;watch
// It writes the status with merge patches only (controllerutil.PatchStatus).
// +kubebuilder:rbac:groups=enge.me,resources=statefulclusters/status,verbs=get;patch
// Setting blockOwnerDeletion in the owner reference of its pods needs update on the owner's finalizers
// where the OwnerReferencesPermissionEnforcement admission plugin is on.
// +kubebuilder:rbac:groups=enge.me,resources=statefulclusters/finalizers,verbs=update
// Its Events on its StatefulClusters.
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

func main() {
	opts := &controller.Options{}
	manager.Main(manager.Options{
		Name:             "cluster-operator",
		Short:            "Runs StatefulCluster: stateful pods whose identities are never reused.",
		LeaderElectionID: "cluster-operator.enge.me",
		Schemes:          []func(*runtime.Scheme) error{clusterv1alpha1.AddToScheme},
		Cache:            controller.CacheOptions,
		Setup:            opts.Setup,
	})
}
