package podreaper

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// RemoveAt keeps the pod-delete Stage's rule it replaces: the annotation's seconds (default 1) after
// the delete, never past the deletionTimestamp.
func TestRemoveAt(t *testing.T) {
	deadline := time.Date(2026, 11, 29, 12, 0, 30, 0, time.UTC)
	deleted := deadline.Add(-30 * time.Second) // grace period 30s
	for _, tc := range []struct {
		name       string
		annotation string
		grace      *int64
		want       time.Time
	}{
		{name: "default one second", grace: ptr.To[int64](30), want: deleted.Add(time.Second)},
		{name: "annotated", annotation: "6", grace: ptr.To[int64](30), want: deleted.Add(6 * time.Second)},
		{name: "fraction", annotation: "0.5", grace: ptr.To[int64](30), want: deleted.Add(500 * time.Millisecond)},
		{name: "zero", annotation: "0", grace: ptr.To[int64](30), want: deleted},
		{name: "capped by the grace period", annotation: "600", grace: ptr.To[int64](30), want: deadline},
		{name: "malformed counts as default", annotation: "soon", grace: ptr.To[int64](30), want: deleted.Add(time.Second)},
		{name: "negative counts as default", annotation: "-3", grace: ptr.To[int64](30), want: deleted.Add(time.Second)},
		{name: "grace 0", annotation: "6", grace: ptr.To[int64](0), want: deadline},
		{name: "no grace recorded", grace: nil, want: deadline},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
				DeletionTimestamp:          &metav1.Time{Time: deadline},
				DeletionGracePeriodSeconds: tc.grace,
			}}
			if tc.annotation != "" {
				pod.Annotations = map[string]string{TerminatingSecondsAnnotation: tc.annotation}
			}
			assert.Equal(t, tc.want, RemoveAt(pod))
		})
	}
}
