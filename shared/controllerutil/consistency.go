package controllerutil

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// WriteTracker is the one answer to "the cache has not seen my own write yet", after Kubernetes'
// pkg/controller/util/consistency: it remembers the resourceVersion each of this controller's writes
// returned, per object, and compares the cache's copy with it.
//
//   - Behind: the cached object is older than the controller's last write to it. A reconcile that acted
//     on it would decide from a state its own write already replaced (and, with an optimistic lock,
//     write nothing but a conflict): wait for the watch event instead.
//   - IsOwnWrite: the object is exactly what the controller's last write left. Its watch event tells the
//     controller nothing new, so a predicate can drop it (quiet at rest: a renewal it wrote itself must
//     not wake it up).
//
// resourceVersions are compared as the API server orders them (k8s.io/apimachinery's
// resourceversion.CompareResourceVersion); a version that cannot be compared is never taken as behind,
// so the tracker errs towards trusting the cache, which is what a controller without it does. It lives in
// memory only: after a restart nothing is behind and no event is dropped.
type WriteTracker struct {
	mu      sync.Mutex
	written map[types.UID]string
}

// maxTrackedWrites bounds the tracker when objects disappear without Forget (e.g. a missed delete):
// beyond it the tracker starts again empty, which costs at most a few redundant reconciles.
const maxTrackedWrites = 100000

// NewWriteTracker returns an empty tracker.
func NewWriteTracker() *WriteTracker { return &WriteTracker{written: map[types.UID]string{}} }

// Wrote records obj as a successful write (create, update, patch, status write) returned it.
func (t *WriteTracker) Wrote(obj client.Object) {
	if obj.GetUID() == "" || obj.GetResourceVersion() == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.written) >= maxTrackedWrites {
		t.written = map[types.UID]string{}
	}
	t.written[obj.GetUID()] = obj.GetResourceVersion()
}

// Forget drops what is kept about obj, e.g. once it is deleted.
func (t *WriteTracker) Forget(obj client.Object) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.written, obj.GetUID())
}

// IsOwnWrite reports whether obj is exactly the state this controller's last write to it left.
func (t *WriteTracker) IsOwnWrite(obj client.Object) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	rv, ok := t.written[obj.GetUID()]
	return ok && rv == obj.GetResourceVersion()
}

// Behind reports whether obj (as read from the cache) is older than this controller's last write to it.
// Once the cache has caught up with or moved past that write, the record is dropped.
func (t *WriteTracker) Behind(obj client.Object) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	rv, ok := t.written[obj.GetUID()]
	if !ok {
		return false
	}
	cmp, err := resourceversion.CompareResourceVersion(obj.GetResourceVersion(), rv)
	if err != nil {
		return false
	}
	if cmp >= 0 {
		// Keep the record while it equals the cache: IsOwnWrite still recognises that event.
		if cmp > 0 {
			delete(t.written, obj.GetUID())
		}
		return false
	}
	return true
}

// IgnoreOwnWrites is a predicate that drops create and update events whose object is exactly this
// controller's last write; deletions and generic events always pass (a deleted object's final state may
// well be the controller's own last write, and its deletion is news).
func IgnoreOwnWrites[T client.Object](t *WriteTracker) predicate.TypedFuncs[T] {
	return predicate.TypedFuncs[T]{
		CreateFunc:  func(e event.TypedCreateEvent[T]) bool { return !t.IsOwnWrite(e.Object) },
		UpdateFunc:  func(e event.TypedUpdateEvent[T]) bool { return !t.IsOwnWrite(e.ObjectNew) },
		DeleteFunc:  func(event.TypedDeleteEvent[T]) bool { return true },
		GenericFunc: func(event.TypedGenericEvent[T]) bool { return true },
	}
}
