package controllerutil

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NotOlderThan has an uncached List answered from the API server's watch cache as soon as that cache
// holds resourceVersion ("0": at once, whatever it holds). A List without a resourceVersion is a
// consistent read, which the API server answers only once its cache has confirmed it is current
// through an etcd progress notification, requested at most every 100 ms. The caller says why the
// version it passes is fresh enough.
func NotOlderThan(resourceVersion string) client.ListOption {
	return &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: resourceVersion,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}}
}
