//go:build e2e

package framework

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

func WaitStatefulSetReady(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		sts, err := Clientset.AppsV1().StatefulSets(ns).Get(t.Context(), name, metav1.GetOptions{})
		require.NoError(c, err)
		assert.Equal(c, replicas, sts.Status.ReadyReplicas)
		assert.Equal(c, replicas, sts.Status.UpdatedReplicas)
		assert.Equal(c, sts.Status.CurrentRevision, sts.Status.UpdateRevision)
	}, Timeout, Tick, "StatefulSet %s ready", name)
}

// RetryOnConflict runs f until it does not fail with a conflict.
func RetryOnConflict(t *testing.T, f func() error) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, f))
}

// RolloutStatefulSet creates a StatefulSet of pause pods and waits until they are Ready.
func RolloutStatefulSet(t *testing.T, ns, name string, replicas, start int32) {
	t.Helper()
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            &replicas,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template:            PodTemplate(name),
			PodManagementPolicy: appsv1.ParallelPodManagement,
		},
	}
	if start != 0 {
		sts.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: start}
	}
	_, err := Clientset.AppsV1().StatefulSets(ns).Create(t.Context(), sts, metav1.CreateOptions{})
	require.NoError(t, err)
	WaitStatefulSetReady(t, ns, name, replicas)
}

// BumpTemplate changes the pod template, so the StatefulSet gets a new update revision.
func BumpTemplate(t *testing.T, ns, name, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"e2e/rev":%q}}}}}`, value)
	_, err := Clientset.AppsV1().StatefulSets(ns).Patch(t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
}

// WaitRolled waits until the StatefulSet runs its current template on every pod, all Ready.
func WaitRolled(t *testing.T, ns, name string) {
	t.Helper()
	WaitRolledWithin(t, ns, name, Timeout)
}

// WaitRolledWithin is WaitRolled with its own bound (a campaign's ChaosLiveness).
func WaitRolledWithin(t *testing.T, ns, name string, within time.Duration) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		sts, err := FetchStatefulSet(t.Context(), ns, name)
		if !assert.NoError(c, err) || !assert.NotNil(c, sts) {
			return
		}
		n := ptr.Deref(sts.Spec.Replicas, 1)
		st := sts.Status
		assert.GreaterOrEqual(c, st.ObservedGeneration, sts.Generation)
		assert.Equal(c, n, st.ReadyReplicas)
		assert.Equal(c, n, st.UpdatedReplicas)
		assert.Equal(c, st.UpdateRevision, st.CurrentRevision)
	}, within, Tick, "StatefulSet %s rolled", name)
}

// FetchStatefulSet returns a StatefulSet (nil, nil when it does not exist).
func FetchStatefulSet(ctx context.Context, ns, name string) (*appsv1.StatefulSet, error) {
	sts, err := Clientset.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return sts, err
}
