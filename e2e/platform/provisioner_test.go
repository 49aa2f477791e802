//go:build e2e

package platform

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
)

// TestLocalClusterProvisioner: the local cluster's default StorageClass is served by its dynamic
// provisioner (e2e/cmd/local-provisioner). A claim that names no class binds once its pod is
// scheduled, on a kwok node and on the real node, to a volume pinned to that node; on the real node
// the pod's container writes into the volume and the file is in the provisioned directory on this
// host. Deleting the claim deletes the volume and its directory (reclaimPolicy Delete).
func TestLocalClusterProvisioner(t *testing.T) {
	if framework.RealNode.Cluster == nil {
		t.Log("not the local cluster (E2E_KUBECONFIG): its default StorageClass is the cluster's own")
		return
	}
	sc, err := framework.Clientset.StorageV1().StorageClasses().Get(t.Context(), localcluster.StorageClassName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "true", sc.Annotations["storageclass.kubernetes.io/is-default-class"])
	assert.Equal(t, localcluster.ProvisionerName, sc.Provisioner)

	ns := framework.NewNamespace(t)
	withClaim := func(pod *corev1.Pod, mountPath string) *corev1.Pod {
		claim := pod.Name + "-data"
		_, err := framework.Clientset.CoreV1().PersistentVolumeClaims(ns).Create(t.Context(), &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: claim},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "data", MountPath: mountPath})
		return pod
	}
	// bound waits for the pod's claim to bind, and checks its volume: of the default class, pinned to
	// the pod's node, a directory under the cluster's volumes dir that exists.
	bound := func(pod *corev1.Pod) *corev1.PersistentVolume {
		t.Helper()
		var pvc *corev1.PersistentVolumeClaim
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			var err error
			pvc, err = framework.Clientset.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), pod.Name+"-data", metav1.GetOptions{})
			require.NoError(c, err)
			require.Equal(c, corev1.ClaimBound, pvc.Status.Phase)
		}, framework.Timeout, framework.Tick, "claim of %s bound", pod.Name)
		assert.Equal(t, localcluster.StorageClassName, *pvc.Spec.StorageClassName, "the default class")
		pv, err := framework.Clientset.CoreV1().PersistentVolumes().Get(t.Context(), pvc.Spec.VolumeName, metav1.GetOptions{})
		require.NoError(t, err)
		require.NotNil(t, pv.Spec.Local, "a local volume")
		assert.Equal(t, filepath.Join(framework.RealNode.Cluster.VolumesDir(), pv.Name), pv.Spec.Local.Path)
		assert.DirExists(t, pv.Spec.Local.Path)
		node := framework.GetPod(t, ns, pod.Name).Spec.NodeName
		require.NotNil(t, pv.Spec.NodeAffinity)
		assert.Equal(t, []string{node}, pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values, "pinned to the pod's node")
		return pv
	}
	// released deletes the pod and its claim, and waits for the volume and its directory to go.
	released := func(pod *corev1.Pod, pv *corev1.PersistentVolume) {
		t.Helper()
		require.NoError(t, framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), pod.Name, metav1.DeleteOptions{}))
		require.Eventually(t, func() bool { return framework.PodGone(t, ns, pod.Name) }, framework.Timeout, framework.Tick)
		require.NoError(t, framework.Clientset.CoreV1().PersistentVolumeClaims(ns).Delete(t.Context(), pod.Name+"-data", metav1.DeleteOptions{}))
		require.Eventually(t, func() bool {
			_, err := framework.Clientset.CoreV1().PersistentVolumes().Get(t.Context(), pv.Name, metav1.GetOptions{})
			_, statErr := os.Stat(pv.Spec.Local.Path)
			return apierrors.IsNotFound(err) && os.IsNotExist(statErr)
		}, framework.Timeout, framework.Tick, "volume %s and its directory deleted with the claim", pv.Name)
	}

	kwokPod := framework.CreatePod(t, ns, withClaim(framework.TestPod("on-kwok"), "/data"))
	assert.NotEqual(t, "", kwokPod.Spec.NodeName)
	pv := bound(kwokPod)
	assert.Contains(t, pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values[0], "statefulops-kwok-")
	released(kwokPod, pv)

	if !framework.NeedRealNode(t) {
		return
	}
	// The test app appends its records to <record dir>/<pod UID>.jsonl: the volume is its record dir.
	realPod := framework.CreatePod(t, ns, withClaim(framework.TestAppPod("on-real", "--record-dir=/data"), "/data"))
	pv = bound(realPod)
	file := filepath.Join(pv.Spec.Local.Path, string(realPod.UID)+".jsonl")
	require.Eventually(t, func() bool {
		raw, err := os.ReadFile(file)
		return err == nil && len(raw) > 0
	}, framework.Timeout, framework.Tick, "the container's records in the provisioned directory on the host")
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	framework.FindRecord(t, string(raw), "start")
	released(realPod, pv)
}
