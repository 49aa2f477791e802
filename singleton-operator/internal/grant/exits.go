package grant

import (
	"context"
	"errors"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// Exits hands the exit reports this replica's grant server accepts to the controller of the same
// process, so that the controller's live list and epoch reservation run while the report's annotation
// is being written instead of after the annotation's watch event: about two API round trips off the
// handover. The annotation stays the record. The controller releases the next pod only once it is
// written (Recorded), so the API never shows a released pod beside one whose exit is not recorded,
// and a report whose write fails releases nothing. A report that reaches another replica (the grant
// Service spreads requests; the controller runs on the leader only) reaches the controller through the
// annotation's watch event, as without Exits.
type Exits struct {
	mu      sync.Mutex
	reports map[types.UID]*exitRecord
	events  chan event.GenericEvent
}

// exitRecord is one accepted report: done is closed once its annotation's write ended, with err.
type exitRecord struct {
	done chan struct{}
	err  error
}

// exitEventBuffer bounds the reports waiting for the controller to take them; beyond it, or on a
// replica that does not lead, a report's event is dropped and the annotation's watch event enqueues.
const exitEventBuffer = 256

// NewExits returns an empty registry.
func NewExits() *Exits {
	return &Exits{reports: map[types.UID]*exitRecord{}, events: make(chan event.GenericEvent, exitEventBuffer)}
}

// Events is what the controller watches (a channel source): one event per accepted report, carrying
// the terminating pod as the handler read it.
func (e *Exits) Events() <-chan event.GenericEvent { return e.events }

// Accepted reports whether a report of the pod with this UID was accepted and its annotation is being
// written or was written. The pod is terminating and every app container reported its exit; whether
// the record holds is for Recorded to say.
func (e *Exits) Accepted(uid types.UID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.reports[uid]
	return ok
}

// errNoReport is Recorded's answer for a UID with no accepted report.
var errNoReport = errors.New("no exit report accepted for this pod")

// Recorded waits until the annotation of the pod's accepted report is written, and returns why not
// when its write failed or ctx ended first.
func (e *Exits) Recorded(ctx context.Context, uid types.UID) error {
	e.mu.Lock()
	rec, ok := e.reports[uid]
	e.mu.Unlock()
	if !ok {
		return errNoReport
	}
	select {
	case <-rec.done:
		return rec.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Begin registers the accepted report of pod (terminating, every app container's exit reported),
// whose annotation is about to be written, and tells the controller. The returned end must be called
// with the write's outcome. A failed write is forgotten at once: the pod blocks again until a retried
// report or the kubelet's confirmation. A report already registered for that UID (a retried report) is
// not registered again, and a nil Exits registers nothing; end is then a no-op.
func (e *Exits) Begin(pod *corev1.Pod) (end func(err error)) {
	if e == nil {
		return func(error) {}
	}
	uid := pod.UID
	e.mu.Lock()
	if _, ok := e.reports[uid]; ok {
		e.mu.Unlock()
		return func(error) {}
	}
	rec := &exitRecord{done: make(chan struct{})}
	e.reports[uid] = rec
	e.mu.Unlock()
	select {
	case e.events <- event.GenericEvent{Object: pod}:
	default:
	}
	return func(err error) {
		rec.err = err
		if err != nil {
			e.mu.Lock()
			if e.reports[uid] == rec {
				delete(e.reports, uid)
			}
			e.mu.Unlock()
		}
		close(rec.done)
	}
}

// forgetDeleted drops the reports of the pods informer sees deleted, so memory follows the terminating
// pods.
func (e *Exits) forgetDeleted(informer cache.Informer) error {
	_, err := informer.AddEventHandlerWithOptions(toolscache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if pod, ok := deletedPod(obj); ok {
				e.mu.Lock()
				delete(e.reports, pod.UID)
				e.mu.Unlock()
			}
		},
	}, toolscache.HandlerOptions{})
	return err
}
