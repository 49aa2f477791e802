package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// In place (ES-06) with updateNotReady (ES-07): only a stuck pod at or above the partition may be
// recreated; below it the StatefulSet controller would bring it back on the old revision, and it does
// not wait for it anyway.
func TestStuckCandidatesRespectThePartition(t *testing.T) {
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: types.UID("s")}}
	sts.Status.UpdateRevision = "r2"
	pod := func(ordinal string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-" + ordinal,
			Labels:          map[string]string{appsv1.ControllerRevisionHashLabelKey: "r1"},
			OwnerReferences: []metav1.OwnerReference{{UID: sts.UID, Controller: ptr.To(true)}}}}
	}
	names := func(pods []*corev1.Pod) []string {
		out := []string{}
		for _, p := range pods {
			out = append(out, p.Name)
		}
		return out
	}
	pods := []corev1.Pod{pod("0"), pod("1"), pod("2")} // none Ready, all on r1
	assert.Equal(t, []string{"web-2"}, names(stuckCandidates(sts, pods, 2)), "the canary at the partition")
	pods[2].Labels[appsv1.ControllerRevisionHashLabelKey] = "r2"
	assert.Empty(t, names(stuckCandidates(sts, pods, 2)), "nothing below the partition")
	assert.Equal(t, []string{"web-1"}, names(stuckCandidates(sts, pods, 1)))
	assert.Equal(t, []string{"web-1", "web-0"}, names(stuckCandidates(sts, pods, 0)), "a versioned StatefulSet has partition 0")
}
