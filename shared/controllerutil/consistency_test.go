package controllerutil

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

func podAt(uid types.UID, rv string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: uid, ResourceVersion: rv}}
}

func TestWriteTrackerBehind(t *testing.T) {
	w := NewWriteTracker()
	if w.Behind(podAt("a", "10")) {
		t.Fatal("an object never written is not behind")
	}
	w.Wrote(podAt("a", "12"))
	for rv, behind := range map[string]bool{"9": true, "11": true, "12": false, "not-a-version": false} {
		if got := w.Behind(podAt("a", rv)); got != behind {
			t.Errorf("cached at %s, written at 12: Behind = %v, want %v", rv, got, behind)
		}
	}
	if w.Behind(podAt("b", "1")) {
		t.Error("another object (other UID) is not behind a write to a")
	}
	if !w.IsOwnWrite(podAt("a", "12")) {
		t.Error("the record must stay while the cache equals the write")
	}
	if w.Behind(podAt("a", "13")) || w.Behind(podAt("a", "11")) {
		t.Error("once the cache moved past the write, the record is dropped and nothing is behind")
	}
}

func TestWriteTrackerIsOwnWriteAndForget(t *testing.T) {
	w := NewWriteTracker()
	w.Wrote(podAt("a", "5"))
	w.Wrote(podAt("", "6")) // not yet created: nothing to remember
	if !w.IsOwnWrite(podAt("a", "5")) || w.IsOwnWrite(podAt("a", "6")) || w.IsOwnWrite(podAt("b", "5")) {
		t.Fatal("IsOwnWrite must match exactly the UID and resourceVersion last written")
	}
	w.Wrote(podAt("a", "7"))
	if w.IsOwnWrite(podAt("a", "5")) || !w.IsOwnWrite(podAt("a", "7")) {
		t.Fatal("only the last write counts")
	}
	w.Forget(podAt("a", "7"))
	if w.IsOwnWrite(podAt("a", "7")) || w.Behind(podAt("a", "1")) {
		t.Fatal("a forgotten object is neither own write nor behind")
	}
}

func TestIgnoreOwnWrites(t *testing.T) {
	w := NewWriteTracker()
	p := IgnoreOwnWrites[*corev1.Pod](w)
	ours, theirs := podAt("a", "5"), podAt("a", "6")
	w.Wrote(ours)
	if p.Create(event.TypedCreateEvent[*corev1.Pod]{Object: ours}) || p.Update(event.TypedUpdateEvent[*corev1.Pod]{ObjectOld: podAt("a", "4"), ObjectNew: ours}) {
		t.Error("the events of our own write must be dropped")
	}
	if !p.Update(event.TypedUpdateEvent[*corev1.Pod]{ObjectOld: ours, ObjectNew: theirs}) {
		t.Error("someone else's write must pass")
	}
	if !p.Delete(event.TypedDeleteEvent[*corev1.Pod]{Object: ours}) || !p.Generic(event.TypedGenericEvent[*corev1.Pod]{Object: ours}) {
		t.Error("deletions and generic events always pass")
	}
}
