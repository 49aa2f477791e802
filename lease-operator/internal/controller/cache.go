package controller

import (
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// What the manager's cache holds, and why.
//
// The controller reads StatefulSetLocks, pods, nodes, its Leases and StatefulSets from the manager's
// cache, scoped so that memory does not grow with unrelated objects: pods carrying the label every
// StatefulSet pod has (statefulset.kubernetes.io/pod-name), Leases, Services and EndpointSlices labelled by a
// lock, nodes and pods stripped to the fields the election reads (opsutil.SlimNode, opsutil.SlimPod; pods
// keep their IPs, the operator-written endpoints' addresses), and StatefulSets as
// metadata only (the operator needs to know that one exists, not its body). The Lease a write depends on
// is read from the API server (getLease): its resourceVersion is the write's precondition.

// CacheOptions scopes the manager's cache (see above). main passes it to shared/manager
// (Options.Cache); the integration tests use it too.
func CacheOptions(o *cache.Options) {
	opsutil.ScopeCache(o, map[client.Object]cache.ByObject{
		&corev1.Pod{}:                {Label: opsutil.HasLabel(appsv1.StatefulSetPodNameLabel), Transform: slimPod},
		&coordinationv1.Lease{}:      {Label: opsutil.HasLabel(leasev1.LockLabel)},
		&corev1.Service{}:            {Label: opsutil.HasLabel(leasev1.LockLabel)},
		&discoveryv1.EndpointSlice{}: {Label: opsutil.HasLabel(leasev1.LockLabel)},
		&corev1.Node{}:               {Transform: opsutil.SlimNode},
		statefulSetMeta(""):          {},
	})
}

// statefulSetMeta is a metadata-only StatefulSet: the operator needs to know that it exists, not its body.
func statefulSetMeta(name string) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name}}
	m.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("StatefulSet"))
	return m
}

// slimPod is opsutil.SlimPod keeping the pod's IPs: the addresses of the EndpointSlices the operator
// writes (spec.services.endpoints: Operator).
func slimPod(obj any) (any, error) {
	slim, err := opsutil.SlimPod(obj)
	if pod, ok := obj.(*corev1.Pod); ok && err == nil {
		slim.(*corev1.Pod).Status.PodIP, slim.(*corev1.Pod).Status.PodIPs = pod.Status.PodIP, pod.Status.PodIPs
	}
	return slim, err
}
