package localcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The local cluster's storage: a default StorageClass served by e2e/cmd/local-provisioner, a real
// dynamic provisioner (sigs.k8s.io/sig-storage-lib-external-provisioner) that kwokctl runs as one of
// the cluster's components. Each claim becomes a directory <state dir>/volumes/<PV name> on this host,
// bound as a `local` PersistentVolume to the node the scheduler picked for the claim's first pod: the
// real node's kubelet mounts it, and a claim of a pod on a kwok node binds just the same.
const (
	// StorageClassName is the default StorageClass of the local cluster.
	StorageClassName = "local"
	// ProvisionerName is the provisioner the StorageClass names and local-provisioner serves.
	ProvisionerName = "statefulops.dev/local-provisioner"
	// provisionerComponent is the kwokctl component (and binary) name: its pid file is
	// <cluster dir>/pids/local-provisioner.pid and its log <cluster dir>/logs/local-provisioner.log.
	provisionerComponent = "local-provisioner"
)

// VolumesDir returns the directory under which the provisioner makes each volume's directory.
func (c *Cluster) VolumesDir() string { return volumesDir(c.opts.StateDir) }

func volumesDir(stateDir string) string { return filepath.Join(stateDir, "volumes") }

// provisionerArgs are local-provisioner's arguments. It reads kwokctl's in-host admin kubeconfig
// (written before the components start), and retries until the API server answers. It is also the
// pod reaper of the nodes kwok simulates (package podreaper): the kubelet's final delete of a deleted
// pod, which no kwok Stage does, since a Stage's delete goes by name and can hit a newer pod of the
// same name.
func (k *kwokctl) provisionerArgs() []string {
	return []string{
		"-kubeconfig=" + filepath.Join(k.clusterDir(), "kubeconfig.yaml"),
		"-base-dir=" + volumesDir(k.opts.StateDir),
		"-name=" + ProvisionerName,
		"-reap-pods-on-nodes=" + kwokManagedNodes,
	}
}

// ensureStorageClass creates the default StorageClass unless it exists. WaitForFirstConsumer, because
// a directory serves one node only: the volume is made once the scheduler has chosen the pod's node.
func (c *Cluster) ensureStorageClass(ctx context.Context) error {
	if err := os.MkdirAll(c.VolumesDir(), 0o755); err != nil {
		return err
	}
	sc := &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:        StorageClassName,
			Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"},
		},
		Provisioner:       ProvisionerName,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
	}
	_, err := c.client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create StorageClass %s: %w", StorageClassName, err)
	}
	return nil
}
