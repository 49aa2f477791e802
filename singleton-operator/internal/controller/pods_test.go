package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// An exit report counts only on a pod being deleted and only when it names every container but the
// status-sidecar; such a pod is terminal, anything short of it keeps the pod released (blocking).
func TestExitReported(t *testing.T) {
	deleting := ptr.To(metav1.Now())
	for _, tc := range []struct {
		name       string
		deletion   *metav1.Time
		containers []string
		exited     *string // nil: no annotation
		want       bool
	}{
		{name: "every app container", deletion: deleting, containers: []string{"app", "logs", singletonv1.SidecarContainerName}, exited: ptr.To("app,logs"), want: true},
		{name: "in another order", deletion: deleting, containers: []string{"app", "logs", singletonv1.SidecarContainerName}, exited: ptr.To("logs,app"), want: true},
		{name: "without a sidecar", deletion: deleting, containers: []string{"app"}, exited: ptr.To("app"), want: true},
		{name: "an app container left out", deletion: deleting, containers: []string{"app", "logs", singletonv1.SidecarContainerName}, exited: ptr.To("app")},
		{name: "a name's prefix is not the name", deletion: deleting, containers: []string{"app", singletonv1.SidecarContainerName}, exited: ptr.To("ap")},
		{name: "empty annotation", deletion: deleting, containers: []string{"app", singletonv1.SidecarContainerName}, exited: ptr.To("")},
		{name: "no annotation", deletion: deleting, containers: []string{"app", singletonv1.SidecarContainerName}},
		{name: "not being deleted", containers: []string{"app", singletonv1.SidecarContainerName}, exited: ptr.To("app")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: tc.deletion, Annotations: map[string]string{
				singletonv1.AnnotationEpoch: "1", singletonv1.AnnotationStartGranted: "1", singletonv1.AnnotationHoldMode: string(singletonv1.HoldModeWrapper),
			}}}
			if tc.exited != nil {
				pod.Annotations[singletonv1.AnnotationExited] = *tc.exited
			}
			for _, c := range tc.containers {
				pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c})
			}
			if got := exitReported(pod); got != tc.want {
				t.Errorf("exitReported = %v, want %v", got, tc.want)
			}
			want := stateReleased
			if tc.want {
				want = stateTerminal
			}
			if got := classify(pod); got != want {
				t.Errorf("classify = %v, want %v", got, want)
			}
		})
	}
}
