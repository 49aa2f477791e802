// Package kube connects the plugin to the cluster kubectl's flags name, with a scheme that knows
// every statefulops API group beside the built-in kinds.
package kube

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// Scheme holds the built-in kinds and the five statefulops API groups.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(singletonv1.AddToScheme(Scheme))
	utilruntime.Must(clusterv1alpha1.AddToScheme(Scheme))
	utilruntime.Must(leasev1.AddToScheme(Scheme))
	utilruntime.Must(rolloutv1alpha1.AddToScheme(Scheme))
	utilruntime.Must(extendedv1alpha1.AddToScheme(Scheme))
}

// Clients is what a command needs: an uncached client with watch support, and the namespace the
// flags chose (-n, or the kubeconfig context's, or "default").
type Clients struct {
	Client    client.WithWatch
	Namespace string
	// Explicit is true when -n was given, so a command can tell "the context's namespace" from a choice.
	Explicit bool
}

// Connect builds the clients from kubectl's flags.
func Connect(flags *genericclioptions.ConfigFlags) (*Clients, error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	mapper, err := flags.ToRESTMapper()
	if err != nil {
		return nil, fmt.Errorf("discovering the cluster's API: %w", err)
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: Scheme, Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster: %w", err)
	}
	ns, explicit, err := flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, fmt.Errorf("reading the namespace: %w", err)
	}
	return &Clients{Client: c, Namespace: ns, Explicit: explicit}, nil
}

// Installed reports whether the cluster serves the kind of obj, so a view can skip the kinds of
// operators that are not installed (each operator installs only its own CRD).
func Installed(c client.Client, obj runtime.Object) (bool, error) {
	gvk, err := c.GroupVersionKindFor(obj)
	if err != nil {
		return false, err
	}
	if _, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
		if meta.IsNoMatchError(err) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}
