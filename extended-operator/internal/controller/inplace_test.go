package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// In place (ES-06) with updateNotReady (ES-07): only a stuck pod at or above the partition is
// recreated; below it the StatefulSet controller would bring it back on the old revision, and it does
// not wait for it anyway.
func TestStuckPodRespectsThePartition(t *testing.T) {
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: types.UID("s")}}
	sts.Status.UpdateRevision = "r2"
	created := metav1.NewTime(time.Unix(1000, 0))
	pod := func(ordinal string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-" + ordinal, CreationTimestamp: metav1.NewTime(time.Unix(10, 0)),
			Labels:          map[string]string{appsv1.ControllerRevisionHashLabelKey: "r1"},
			OwnerReferences: []metav1.OwnerReference{{UID: sts.UID, Controller: ptr.To(true)}}}}
	}
	pods := []corev1.Pod{pod("0"), pod("1"), pod("2")} // none Ready, all on r1
	assert.Equal(t, "web-2", stuckPod(sts, pods, created, 2).Name, "the canary at the partition")
	pods[2].Labels[appsv1.ControllerRevisionHashLabelKey] = "r2"
	assert.Nil(t, stuckPod(sts, pods, created, 2), "nothing below the partition")
	assert.Equal(t, "web-1", stuckPod(sts, pods, created, 1).Name)
	assert.Equal(t, "web-1", stuckPod(sts, pods, created, 0).Name, "a versioned StatefulSet has partition 0")
}
