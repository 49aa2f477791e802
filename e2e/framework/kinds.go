//go:build e2e

package framework

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/localcluster"
	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// The operators' objects the suites share. The suites read and write custom resources with the typed
// Client; the resources bench (bench_resources.go) creates and lists a hundred of each kind in bulk
// through these unstructured resource clients, one code path for every kind, and the extended bench
// sets a field only some ExtendedStatefulSet CRDs have.

// lockGVR is the StatefulSetLock resource.
var lockGVR = schema.GroupVersionResource{Group: "app.anukkrit.me", Version: "v1", Resource: "statefulsetlocks"}

// locks is the StatefulSetLock resource of ns.
func locks(ns string) dynamic.ResourceInterface {
	return dynamic.NewForConfigOrDie(RESTConfig).Resource(lockGVR).Namespace(ns)
}

// phasedRolloutGVR is the PhasedRollout resource.
var phasedRolloutGVR = schema.GroupVersionResource{Group: "sts.plus", Version: "v1alpha1", Resource: "phasedrollouts"}

// rollouts is the PhasedRollout resource of ns.
func rollouts(ns string) dynamic.ResourceInterface {
	return dynamic.NewForConfigOrDie(RESTConfig).Resource(phasedRolloutGVR).Namespace(ns)
}

// ExtendedGVR is the ExtendedStatefulSet resource.
var ExtendedGVR = schema.GroupVersionResource{Group: "fissile.cloudfoundry.org", Version: "v1alpha1", Resource: "extendedstatefulsets"}

// ESTSClient is the ExtendedStatefulSet resource of ns.
func ESTSClient(ns string) dynamic.ResourceInterface {
	return dynamic.NewForConfigOrDie(RESTConfig).Resource(ExtendedGVR).Namespace(ns)
}

// NewESTS is an ExtendedStatefulSet of replicas pause pods labelled app=name, with updateOnEnvChange
// and one canary.
func NewESTS(name string, replicas int32) *extendedv1alpha1.ExtendedStatefulSet {
	return &extendedv1alpha1.ExtendedStatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: extendedv1alpha1.GroupVersion.String(), Kind: "ExtendedStatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: extendedv1alpha1.ExtendedStatefulSetSpec{
			UpdateOnEnvChange: ptr.To(true),
			UpdateStrategy:    extendedv1alpha1.UpdateStrategy{Canaries: ptr.To[int32](1)},
			Template: extendedv1alpha1.StatefulSetTemplate{Spec: appsv1.StatefulSetSpec{
				Replicas:            ptr.To(replicas),
				ServiceName:         name,
				PodManagementPolicy: appsv1.ParallelPodManagement,
				Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				Template:            PodTemplate(name),
			}},
		},
	}
}

var statefulClusterGVR = schema.GroupVersionResource{Group: "enge.me", Version: "v1alpha1", Resource: "statefulclusters"}

// statefulClusters is the StatefulCluster resource of ns.
func statefulClusters(ns string) dynamic.ResourceInterface {
	return dynamic.NewForConfigOrDie(RESTConfig).Resource(statefulClusterGVR).Namespace(ns)
}

// NewStatefulCluster returns a StatefulCluster of pause pods labelled app=name, Parallel, stays
// Terminating 1s when deleted.
func NewStatefulCluster(name string, replicas int32) *clusterv1alpha1.StatefulCluster {
	template := PodTemplate(name)
	return &clusterv1alpha1.StatefulCluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1alpha1.GroupVersion.String(), Kind: "StatefulCluster"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: clusterv1alpha1.StatefulClusterSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: template,
		},
	}
}

// ScaleNodes creates extra kwok nodes (type=kwok, managed by kwok like the local cluster's own) with
// room for many pods, for the 0→500 comparison; they are deleted when the test ends.
func ScaleNodes(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		name := fmt.Sprintf("statefulops-kwok-scale-%d", i)
		capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("256"), corev1.ResourceMemory: resource.MustParse("1Ti"), corev1.ResourcePods: resource.MustParse("400")}
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				localcluster.KwokNodeLabel: localcluster.KwokNodeValue, corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
				"statefulops.dev/scale-test": "true",
			}},
			Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.245.%d.0/24", i), PodCIDRs: []string{fmt.Sprintf("10.245.%d.0/24", i)}},
			Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity, Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.0.1.%d", 10+i)}, {Type: corev1.NodeHostName, Address: name}}},
		}
		_, err := Clientset.CoreV1().Nodes().Create(t.Context(), node, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err)
		}
		t.Cleanup(func() { _ = Clientset.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	require.Eventually(t, func() bool {
		nodes, err := Clientset.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{LabelSelector: "statefulops.dev/scale-test=true"})
		if err != nil || len(nodes.Items) != n {
			return false
		}
		for i := range nodes.Items {
			if NodeCondition(&nodes.Items[i], corev1.NodeReady) != corev1.ConditionTrue {
				return false
			}
		}
		return true
	}, Timeout, Tick, "scale-test nodes Ready")
}
