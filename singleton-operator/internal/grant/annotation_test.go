package grant

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func annotated(uid types.UID, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid, Annotations: annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}, {Name: singletonv1.SidecarContainerName}}}}
}

// A pod released on its predecessor's exit is granted the moment that exit is accepted or seen
// recorded, in either order, and only that predecessor's; a grant is never taken back.
func TestAnnotationGrantsStartOnExit(t *testing.T) {
	onExitOf := func(pred types.UID) map[string]string {
		return map[string]string{singletonv1.AnnotationStartOnExit: singletonv1.StartOnExit{Epoch: 2, PodUID: pred, Node: "n"}.String()}
	}
	t.Run("report after the conditional release", func(t *testing.T) {
		g := newAnnotationGrants()
		waiting := g.Granted("new")
		g.observe(annotated("new", onExitOf("old")))
		assert.False(t, isClosed(waiting), "not before the predecessor's exit")
		g.PredecessorExited("other")
		assert.False(t, isClosed(waiting), "another pod's exit grants nothing")
		g.PredecessorExited("old")
		assert.True(t, isClosed(waiting))
		g.observe(annotated("new", nil))
		assert.True(t, isClosed(g.Granted("new")), "a grant is never taken back")
	})
	t.Run("report before the conditional release", func(t *testing.T) {
		g := newAnnotationGrants()
		g.PredecessorExited("old")
		g.observe(annotated("new", onExitOf("old")))
		assert.True(t, isClosed(g.Granted("new")))
	})
	t.Run("exit recorded on the predecessor", func(t *testing.T) {
		g := newAnnotationGrants()
		g.observe(annotated("new", onExitOf("old")))
		old := annotated("old", map[string]string{singletonv1.AnnotationExited: "app"})
		g.observe(old)
		assert.False(t, isClosed(g.Granted("new")), "an exited annotation on a pod not being deleted counts for nothing")
		now := metav1.Now()
		old.DeletionTimestamp = &now
		g.observe(old)
		assert.True(t, isClosed(g.Granted("new")))
	})
	t.Run("predecessor gone before its report", func(t *testing.T) {
		g := newAnnotationGrants()
		g.observe(annotated("new", onExitOf("old")))
		g.forget("old")
		assert.False(t, isClosed(g.Granted("new")), "its disappearance is for the controller to judge (fencing)")
		g.observe(annotated("new", map[string]string{singletonv1.AnnotationStartGranted: "2"}))
		assert.True(t, isClosed(g.Granted("new")), "the controller's completion grants it")
	})
	t.Run("unreadable condition", func(t *testing.T) {
		g := newAnnotationGrants()
		g.PredecessorExited("old")
		g.observe(annotated("new", map[string]string{singletonv1.AnnotationStartOnExit: "old"}))
		assert.False(t, isClosed(g.Granted("new")))
	})
}
