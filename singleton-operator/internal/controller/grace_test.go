package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// terminatingPod is a pod whose deletion ends its grace period at deletionTimestamp.
func terminatingPod(deletionTimestamp time.Time, grace int64) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "old", UID: "uid-old",
		DeletionTimestamp: &metav1.Time{Time: deletionTimestamp}, DeletionGracePeriodSeconds: ptr.To(grace)}}
}

// SS-09: elapsed = now − (deletionTimestamp − deletionGracePeriodSeconds), in whole seconds.
func TestGraceElapsed(t *testing.T) {
	now := time.Date(2026, 11, 25, 4, 10, 0, 0, time.UTC)
	for _, tc := range []struct {
		name              string
		deletionTimestamp time.Time
		grace             int64
		want              string
	}{
		{"the criterion: deletionTimestamp now+20s, grace 30s", now.Add(20 * time.Second), 30, "elapsed 10s, 20s left"},
		{"whole seconds elapsed", now.Add(20*time.Second + 600*time.Millisecond), 30, "elapsed 9s, 21s left"},
		{"just deleted", now.Add(30 * time.Second), 30, "elapsed 0s, 30s left"},
		{"the operator's clock behind the API server's", now.Add(45 * time.Second), 30, "elapsed 0s, 30s left"},
		{"grace period over", now.Add(-5 * time.Second), 30, "elapsed 35s, the grace period is over: waiting for the kubelet to confirm the stop"},
		{"a long grace period", now.Add(25 * time.Minute), 1800, "elapsed 5m0s, 25m0s left"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := terminationProgress([]*corev1.Pod{terminatingPod(tc.deletionTimestamp, tc.grace)})
			require.NotNil(t, p)
			assert.Equal(t, tc.want, graceElapsed(p, now))
		})
	}
}

// The message ends with the elapsed time as of the reconcile; the reconcile that the status write
// itself queues (within graceEcho of it) keeps the written elapsed time, so it writes nothing.
func TestWithGraceProgress(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 4, 10, 0, 0, time.UTC)
	p := terminationProgress([]*corev1.Pod{terminatingPod(t0.Add(20*time.Second), 30)})
	const base = "pod new is held until pods old are gone"
	written := base + "; pod old terminating since 2026-11-25T04:09:50Z with a 30s grace period: elapsed 10s, 20s left"
	scopeWith := func(message string, writtenAt time.Time) *scope {
		return &scope{ss: &singletonv1.StatefulSingleton{Status: singletonv1.StatefulSingletonStatus{
			Message: message, StatusTimestamp: &metav1.Time{Time: writtenAt}}}}
	}

	assert.Equal(t, written, withGraceProgress(&scope{ss: &singletonv1.StatefulSingleton{}}, base, p, t0), "no status written yet")
	echo := scopeWith(written, t0.Add(100*time.Millisecond))
	assert.Equal(t, written, withGraceProgress(echo, base, p, t0.Add(1500*time.Millisecond)), "the write's own reconcile keeps its elapsed time")
	assert.Equal(t, base+"; pod old terminating since 2026-11-25T04:09:50Z with a 30s grace period: elapsed 16s, 14s left",
		withGraceProgress(echo, base, p, t0.Add(6*time.Second)), "measured again once graceEcho has passed")

	other := "pod newer is held until pods old are gone"
	assert.Equal(t, other+"; pod old terminating since 2026-11-25T04:09:50Z with a 30s grace period: elapsed 11s, 19s left",
		withGraceProgress(echo, other, p, t0.Add(1500*time.Millisecond)), "another message is measured again")
	longer := terminationProgress([]*corev1.Pod{terminatingPod(t0.Add(50*time.Second), 60)})
	assert.Contains(t, withGraceProgress(echo, base, longer, t0.Add(time.Second)), "with a 60s grace period: elapsed 11s, 49s left",
		"another deletion of the pod is measured again")

	for _, wrapped := range []string{deletionWaits + written, "transition exceeded maxTransitionTime (5s); the new pod stays held: " + written} {
		assert.Equal(t, written, withGraceProgress(scopeWith(wrapped, t0), base, p, t0.Add(time.Second)), "wrapped: %s", wrapped)
	}
}
