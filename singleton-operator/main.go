// Command singleton-operator runs the StatefulSingleton operator of statefulops.
package main

import (
	"k8s.io/apimachinery/pkg/runtime"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/shared/manager"
)

// The operator reads and writes its own kind and records Events about it.
// +kubebuilder:rbac:groups=apps.openshift.statefulsingleton.com,resources=statefulsingletons,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=apps.openshift.statefulsingleton.com,resources=statefulsingletons/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps.openshift.statefulsingleton.com,resources=statefulsingletons/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

func main() {
	manager.Main(manager.Options{
		Name:             "singleton-operator",
		Short:            "Runs StatefulSingleton: no two pods of a singleton ever run their main process at once.",
		LeaderElectionID: "statefulsingleton-operator.apps.statefulsingleton.com",
		Schemes:          []func(*runtime.Scheme) error{singletonv1.AddToScheme},
	})
}
