//go:build integration

package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

// SL-11: with spec.services the lock owns <lock>-rw and <lock>-ro, ClusterIP Services whose selectors
// match exactly the writer and exactly the readers, through a failover; a Service changed by someone
// else is put back; removing the field deletes them, and so does deleting the lock. The default
// (endpoints: Selector) writes no EndpointSlice.
func TestWriterAndReaderServices(t *testing.T) {
	f := newFixture(t)
	f.createPods(3)
	startOperator(t, nil)
	lock := f.createLock("lock", 10, func(l *leasev1.StatefulSetLock) {
		l.Spec.Services = &leasev1.LockServices{Ports: []leasev1.LockServicePort{{Name: "pg", Port: 5432}, {Name: "metrics", Port: 80, TargetPort: 9187}}}
	})
	f.waitWriter("db-0", "1")

	// selected returns the pods a Service's selector matches.
	selected := func(c *assert.CollectT, name string) []string {
		svc := &corev1.Service{}
		if !assert.NoError(c, suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, svc)) {
			return nil
		}
		assert.True(c, metav1.IsControlledBy(svc, lock), "Service %s is controlled by the lock", name)
		assert.Equal(c, corev1.ServiceTypeClusterIP, svc.Spec.Type)
		assert.Equal(c, []corev1.ServicePort{
			{Name: "pg", Protocol: corev1.ProtocolTCP, Port: 5432, TargetPort: intstr.FromInt32(5432)},
			{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(9187)},
		}, svc.Spec.Ports)
		var pods corev1.PodList
		if !assert.NoError(c, suite.Client.List(t.Context(), &pods, client.InNamespace(f.ns), client.MatchingLabels(svc.Spec.Selector))) {
			return nil
		}
		var names []string
		for _, p := range pods.Items {
			names = append(names, p.Name)
		}
		return names
	}
	waitRouting := func(writer string, readers ...string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, []string{writer}, selected(c, "lock-rw"))
			assert.ElementsMatch(c, readers, selected(c, "lock-ro"))
		}, wait, tick)
	}
	waitRouting("db-0", "db-1", "db-2")
	f.setReady("db-0", false)
	f.waitWriter("db-1", "2")
	waitRouting("db-1", "db-0", "db-2")
	// The default (endpoints: Selector) leaves the endpoints to kube-controller-manager: the operator
	// writes no EndpointSlice (envtest runs no EndpointSlice controller, so there is none at all).
	assert.Equal(t, leasev1.EndpointsSelector, f.lock("lock").Spec.Services.Endpoints, "the default")
	assert.Empty(t, f.slices())

	// Someone retargets the writer Service: it is put back.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		svc := &corev1.Service{}
		require.NoError(t, suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "lock-rw"}, svc))
		svc.Spec.Selector = map[string]string{"app": "db"}
		return suite.Client.Update(t.Context(), svc)
	}))
	waitRouting("db-1", "db-0", "db-2")

	gone := func(names ...string) func() bool {
		return func() bool {
			for _, name := range names {
				if !apierrors.IsNotFound(suite.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, &corev1.Service{})) {
					return false
				}
			}
			return true
		}
	}
	// Opting out deletes them; opting in again creates them.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l := f.lock("lock")
		l.Spec.Services = nil
		return suite.Client.Update(t.Context(), l)
	}))
	require.Eventually(t, gone("lock-rw", "lock-ro"), wait, tick, "Services deleted when spec.services is removed")
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l := f.lock("lock")
		l.Spec.Services = lock.Spec.Services
		return suite.Client.Update(t.Context(), l)
	}))
	waitRouting("db-1", "db-0", "db-2")

	// Deleting the lock deletes them (envtest runs no garbage collector: the operator does it).
	require.NoError(t, suite.Client.Delete(t.Context(), f.lock("lock")))
	require.Eventually(t, gone("lock-rw", "lock-ro"), wait, tick, "Services deleted with the lock")
}
