package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

// localProvisioner provisions each claim as a directory <baseDir>/<PV name> on this host, exposed as a
// `local` PersistentVolume pinned to the node the scheduler chose for the claim's first pod
// (WaitForFirstConsumer). On the real node the kubelet mounts that directory into the pod; on a kwok
// node nothing mounts it, but the claim binds exactly as on a real cluster.
type localProvisioner struct {
	client  kubernetes.Interface
	baseDir string
}

var _ controller.Provisioner = (*localProvisioner)(nil)

// Provision creates the directory and returns its PV. The library creates the PV object and binds it.
func (p *localProvisioner) Provision(ctx context.Context, opts controller.ProvisionOptions) (*corev1.PersistentVolume, controller.ProvisioningState, error) {
	if opts.SelectedNodeName == "" {
		// Only WaitForFirstConsumer classes are served: a directory is useful on one node only.
		return nil, controller.ProvisioningFinished, errors.New("no node selected: the StorageClass must use volumeBindingMode WaitForFirstConsumer")
	}
	node, err := p.client.CoreV1().Nodes().Get(ctx, opts.SelectedNodeName, metav1.GetOptions{})
	if err != nil {
		return nil, controller.ProvisioningNoChange, fmt.Errorf("get selected node %s: %w", opts.SelectedNodeName, err)
	}
	hostname := node.Labels[corev1.LabelHostname]
	if hostname == "" {
		return nil, controller.ProvisioningFinished, fmt.Errorf("node %s has no %s label", node.Name, corev1.LabelHostname)
	}
	dir := filepath.Join(p.baseDir, opts.PVName)
	// World-writable: the pods that use it may run as any user.
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, controller.ProvisioningNoChange, err
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return nil, controller.ProvisioningNoChange, err
	}
	klog.FromContext(ctx).Info("provisioned", "pv", opts.PVName, "claim", klog.KObj(opts.PVC), "node", node.Name, "dir", dir)

	reclaim := corev1.PersistentVolumeReclaimDelete
	if opts.StorageClass.ReclaimPolicy != nil {
		reclaim = *opts.StorageClass.ReclaimPolicy
	}
	mode := corev1.PersistentVolumeFilesystem
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: opts.PVName},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: reclaim,
			AccessModes:                   opts.PVC.Spec.AccessModes,
			VolumeMode:                    &mode,
			MountOptions:                  opts.StorageClass.MountOptions,
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: opts.PVC.Spec.Resources.Requests[corev1.ResourceStorage]},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				Local: &corev1.LocalVolumeSource{Path: dir},
			},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{hostname},
				}}}},
			}},
		},
	}, controller.ProvisioningFinished, nil
}

// Delete removes the PV's directory, and only a directory this provisioner made: one directly under
// the base dir.
func (p *localProvisioner) Delete(ctx context.Context, pv *corev1.PersistentVolume) error {
	if pv.Spec.Local == nil {
		return &controller.IgnoredError{Reason: "not a local volume"}
	}
	dir := filepath.Clean(pv.Spec.Local.Path)
	if filepath.Dir(dir) != filepath.Clean(p.baseDir) || strings.HasPrefix(filepath.Base(dir), ".") {
		return &controller.IgnoredError{Reason: fmt.Sprintf("%s is not a directory of this provisioner (%s)", dir, p.baseDir)}
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("deleted", "pv", pv.Name, "dir", dir)
	return nil
}
