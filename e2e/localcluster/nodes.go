package localcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// Node labels of the kwok nodes.
const (
	// KwokNodeLabel=KwokNodeValue marks the nodes kwok simulates.
	KwokNodeLabel = "type"
	// KwokNodeValue is the value of KwokNodeLabel on kwok nodes.
	KwokNodeValue = "kwok"
)

var zones = []string{"zone-a", "zone-b", "zone-c"}

// NodeName returns the name of the i-th kwok node: statefulops-kwok-<i>.
func NodeName(i int) string { return fmt.Sprintf("statefulops-kwok-%d", i) }

// kwokNode is the i-th kwok node as Up creates it. Nodes may be created with their status, so the
// capacity, addresses and pod CIDR are set here; the node-initialize stage adds the conditions.
func kwokNode(i int) *corev1.Node {
	name := NodeName(i)
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("16"),
		corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	podCIDR := fmt.Sprintf("10.244.%d.0/24", i)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				KwokNodeLabel:            KwokNodeValue,
				corev1.LabelHostname:     name,
				corev1.LabelTopologyZone: zones[i%len(zones)],
				corev1.LabelOSStable:     "linux",
				corev1.LabelArchStable:   "amd64",
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.0.0.%d", 10+i)},
				{Type: corev1.NodeHostName, Address: name},
			},
		},
	}
}

// ensureNodes creates the kwok nodes that are missing and brings back any left NotReady by SetNodeReady.
func (c *Cluster) ensureNodes(ctx context.Context) error {
	for i := range c.opts.Nodes {
		node := kwokNode(i)
		_, err := c.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		switch {
		case err == nil:
			c.logf("created node %s (%s)", node.Name, node.Labels[corev1.LabelTopologyZone])
		case apierrors.IsAlreadyExists(err):
			if err := patchNodeReady(ctx, c.client, node.Name, true); err != nil {
				return err
			}
		default:
			return fmt.Errorf("create node %s: %w", node.Name, err)
		}
	}
	return nil
}

// waitReady waits until the cluster can run workloads: API server ready, kwok nodes created and Ready,
// and kube-controller-manager working (it creates the default ServiceAccount and kube-root-ca.crt).
func (c *Cluster) waitReady(ctx context.Context) error {
	start := time.Now()
	poll := func(what string, cond wait.ConditionWithContextFunc) error {
		var lastErr error
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			ok, err := cond(ctx)
			lastErr = err
			return ok, nil
		})
		if err != nil {
			return fmt.Errorf("waiting for %s: %w (last error: %v)", what, err, lastErr)
		}
		return nil
	}
	if err := poll("the API server", func(ctx context.Context) (bool, error) {
		err := apiServerReady(ctx, c.config)
		return err == nil, err
	}); err != nil {
		return err
	}
	if err := c.ensureNodes(ctx); err != nil {
		return err
	}
	if err := poll("the default ServiceAccount", func(ctx context.Context) (bool, error) {
		_, err := c.client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	}); err != nil {
		return err
	}
	if err := poll("the kube-root-ca.crt ConfigMap", func(ctx context.Context) (bool, error) {
		_, err := c.client.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err == nil, err
	}); err != nil {
		return err
	}
	for i := range c.opts.Nodes {
		name := NodeName(i)
		if err := poll("node "+name+" Ready", func(ctx context.Context) (bool, error) {
			node, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			return err == nil && NodeReady(node), err
		}); err != nil {
			return err
		}
	}
	c.logf("cluster ready (%d kwok nodes) in %s; kubeconfig %s", c.opts.Nodes, time.Since(start).Round(time.Millisecond), c.Kubeconfig())
	return nil
}

// SetNodeReady makes the kwok node name NotReady (ready=false) or Ready again (ready=true) and waits
// until it is. NotReady acts like a kubelet that dies: the label statefulops.dev/kwok-node-ready=false
// takes the node out of kwok's hands, so its Lease is no longer renewed and its pods are left as they
// are (a deleted one stays Terminating, as the pod reaper uses kwok's node selector too);
// kube-controller-manager then marks the node Ready=Unknown
// (within about 20s), taints it and marks its pods not ready. Ready again acts like the kubelet coming
// back: without the label kwok takes the node back, reports it Ready and handles its pods again.
func SetNodeReady(ctx context.Context, client kubernetes.Interface, name string, ready bool) error {
	// The label only means something to kwok: a real node (realnode.NodeName) never gets it.
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if node.Labels[KwokNodeLabel] != KwokNodeValue {
		return fmt.Errorf("node %s is not a kwok node (no label %s=%s)", name, KwokNodeLabel, KwokNodeValue)
	}
	if err := patchNodeReady(ctx, client, name, ready); err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return NodeReady(node) == ready, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for node %s to become ready=%t: %w", name, ready, err)
	}
	return nil
}

// patchNodeReady sets the label statefulops.dev/kwok-node-ready=false, or removes it.
func patchNodeReady(ctx context.Context, client kubernetes.Interface, name string, ready bool) error {
	var value any = "false"
	if ready {
		value = nil // in a merge patch, null deletes the key
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{NodeReadyLabel: value}}})
	if err != nil {
		return err
	}
	if _, err := client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch node %s: %w", name, err)
	}
	return nil
}

// NodeReady reports whether the node's Ready condition is True.
func NodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
