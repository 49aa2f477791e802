package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStuckPod picks the pod recreateStuckPods may delete: not Ready for longer than the deadline, on
// a revision other than the update revision, created before it, and coming back on another revision.
func TestStuckPod(t *testing.T) {
	now := time.Now()
	revisionCreated := now.Add(-time.Minute)
	old := metav1.NewTime(now.Add(-time.Hour))
	pod := func(i int, rev string, created metav1.Time, ready *bool, since time.Time) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", i), CreationTimestamp: created,
			Labels: map[string]string{appsv1.ControllerRevisionHashLabelKey: rev}}}
		if ready != nil {
			status := corev1.ConditionFalse
			if *ready {
				status = corev1.ConditionTrue
			}
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.NewTime(since)}}
		}
		return p
	}
	no, yes := false, true
	for _, c := range []struct {
		name      string
		partition int32
		pod       *corev1.Pod
		want      bool
	}{
		{"crash-looping on a bad revision above the partition", 2, pod(2, "bad", old, &no, now.Add(-10*time.Minute)), true},
		{"on a bad revision below the partition (a new rollout started over)", 3, pod(2, "bad", old, &no, now.Add(-10*time.Minute)), true},
		{"never had a Ready condition", 2, pod(2, "bad", old, nil, time.Time{}), true},
		{"not Ready for less than the deadline", 2, pod(2, "bad", old, &no, now.Add(-time.Minute)), false},
		{"Ready", 2, pod(2, "bad", old, &yes, now.Add(-10*time.Minute)), false},
		{"on the update revision", 2, pod(2, "update", old, &no, now.Add(-10*time.Minute)), false},
		{"its revision does not predate the update revision", 2, pod(2, "bad", metav1.NewTime(now), &no, now.Add(-10*time.Minute)), false},
		{"on the current revision below the partition", 3, pod(2, "current", old, &no, now.Add(-10*time.Minute)), false},
		{"on the current revision at the partition", 2, pod(2, "current", old, &no, now.Add(-10*time.Minute)), true},
	} {
		sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web"}}
		sts.Status.CurrentRevision, sts.Status.UpdateRevision = "current", "update"
		s := &scope{sts: sts, replicas: 3, now: now}
		pods := map[string]*corev1.Pod{c.pod.Name: c.pod}
		predates := func(p *corev1.Pod) (bool, error) { return p.CreationTimestamp.Time.Before(revisionCreated), nil }
		got, notReady, err := stuckPod(s, pods, c.partition, predates, 5*time.Minute)
		assert.NoError(t, err)
		assert.Equal(t, c.want, got != nil, c.name)
		if c.want && got != nil {
			assert.Greater(t, notReady, 5*time.Minute, c.name)
		}
	}
}
