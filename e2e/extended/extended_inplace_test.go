//go:build e2e

package extended

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// TestExtendedInPlace runs spec.updateStrategy.type InPlace (ES-06) against the local cluster's
// StatefulSet controller and kwok pods.
func TestExtendedInPlace(t *testing.T) {
	startExtendedOperator(t)

	t.Run("an image change updates the one StatefulSet, highest ordinal first, keeping its claims", func(t *testing.T) {
		ns := framework.NewNamespace(t)
		e := framework.NewESTS("web", 3)
		e.Spec.UpdateStrategy.Type = extendedv1alpha1.InPlaceUpdateStrategy
		e.Spec.UpdateStrategy.Canaries = ptr.To[int32](1)
		withClaims(e)

		// Every StatefulSet name ever seen in the namespace, and the order in which pods of version 2
		// appear.
		var (
			mu       sync.Mutex
			sets     = map[string]bool{}
			v2Order  []string
			seenPods = map[string]bool{}
		)
		stsWatch, err := framework.Clientset.AppsV1().StatefulSets(ns).Watch(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		t.Cleanup(stsWatch.Stop)
		go func() {
			for ev := range stsWatch.ResultChan() {
				if s, ok := ev.Object.(*appsv1.StatefulSet); ok {
					mu.Lock()
					sets[s.Name] = true
					mu.Unlock()
				}
			}
		}()
		podWatch, err := framework.Clientset.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{
			LabelSelector: extendedv1alpha1.VersionLabel + "=2"})
		require.NoError(t, err)
		t.Cleanup(podWatch.Stop)
		go func() {
			for ev := range podWatch.ResultChan() {
				if p, ok := ev.Object.(*corev1.Pod); ok {
					mu.Lock()
					if !seenPods[p.Name] {
						seenPods[p.Name] = true
						v2Order = append(v2Order, p.Name)
					}
					mu.Unlock()
				}
			}
		}()

		createESTS(t, ns, e)
		waitESTSReady(t, ns, "web", 1)
		framework.WaitRolled(t, ns, "web")
		claims := map[string]string{}
		for i := range 3 {
			name := fmt.Sprintf("data-web-%d", i)
			pvc, err := framework.Clientset.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), name, metav1.GetOptions{})
			require.NoError(t, err)
			claims[name] = string(pvc.UID)
		}

		updateESTS(t, ns, "web", func(e *extendedv1alpha1.ExtendedStatefulSet) {
			e.Spec.Template.Spec.Template.Spec.Containers[0].Image = framework.PauseImage + "-v2"
		})
		waitESTSReady(t, ns, "web", 2)
		framework.WaitRolled(t, ns, "web")

		sts, err := framework.FetchStatefulSet(t.Context(), ns, "web")
		require.NoError(t, err)
		assert.Equal(t, int32(0), partition(sts), "settled at partition 0")
		assert.Equal(t, framework.PauseImage+"-v2", sts.Spec.Template.Spec.Containers[0].Image)
		mu.Lock()
		assert.Equal(t, map[string]bool{"web": true}, sets, "no second StatefulSet ever existed")
		assert.Equal(t, []string{"web-2", "web-1", "web-0"}, v2Order, "pods updated highest ordinal first")
		mu.Unlock()
		for name, uid := range claims {
			pvc, err := framework.Clientset.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), name, metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, uid, string(pvc.UID), "claim %s kept", name)
		}
		ests, err := fetchESTS(t.Context(), ns, "web")
		require.NoError(t, err)
		assert.Equal(t, int32(2), ests.Status.CurrentVersion)
		assert.Equal(t, int32(3), ests.Status.UpdatedReplicas)
	})
}

// partition is the StatefulSet's RollingUpdate partition (0 when unset).
func partition(sts *appsv1.StatefulSet) int32 {
	if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil {
		return ptr.Deref(ru.Partition, 0)
	}
	return 0
}
