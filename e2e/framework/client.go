//go:build e2e

package framework

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// Scheme holds the Kubernetes types and the five operators' API types (shared/api), for Client.
var Scheme = newScheme()

// Client is a typed client of the cluster under test (Main builds it from RESTConfig and Scheme): the
// operators' custom resources are read and written as their shared/api types with it, like any
// Kubernetes object, with no per-kind helper.
var Client client.WithWatch

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme,
		singletonv1.AddToScheme, clusterv1alpha1.AddToScheme, leasev1.AddToScheme,
		rolloutv1alpha1.AddToScheme, extendedv1alpha1.AddToScheme,
	} {
		utilruntime.Must(add(s))
	}
	return s
}
