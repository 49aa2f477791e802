package grant

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// AnnotationGrants implements Grants from the pod annotations: a pod is granted once it carries
// AnnotationStartGranted, or once it carries AnnotationStartOnExit and the exit of the pod it names was
// accepted by this process's exit handler (PredecessorExited) or is recorded on that pod
// (singletonv1.ExitRecorded). It follows the pods through an informer (the operator's cache), so
// answering costs no API call.
type AnnotationGrants struct {
	mu      sync.Mutex
	granted map[types.UID]bool
	waiters map[types.UID]chan struct{}
	// onExitOf maps a pod released on its predecessor's exit, not granted yet, to that predecessor.
	onExitOf map[types.UID]types.UID
	// exited are the pods whose exit report was accepted or recorded (until they leave the cache).
	exited map[types.UID]bool
}

// NewAnnotationGrants follows the pods of informer (e.g. mgr.GetCache().GetInformer(ctx, &corev1.Pod{});
// the operator's cache holds only managed pods, and every Wrapper pod is one).
func NewAnnotationGrants(ctx context.Context, informer cache.Informer) (*AnnotationGrants, error) {
	g := newAnnotationGrants()
	_, err := informer.AddEventHandlerWithOptions(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { g.observe(obj) },
		UpdateFunc: func(_, obj any) { g.observe(obj) },
		DeleteFunc: func(obj any) {
			if pod, ok := deletedPod(obj); ok {
				g.forget(pod.UID)
			}
		},
	}, toolscache.HandlerOptions{})
	return g, err
}

func newAnnotationGrants() *AnnotationGrants {
	return &AnnotationGrants{granted: map[types.UID]bool{}, waiters: map[types.UID]chan struct{}{},
		onExitOf: map[types.UID]types.UID{}, exited: map[types.UID]bool{}}
}

// Granted implements Grants.
func (g *AnnotationGrants) Granted(uid types.UID) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch, ok := g.waiters[uid]
	if !ok {
		ch = make(chan struct{})
		g.waiters[uid] = ch
		if g.granted[uid] {
			close(ch)
		}
	}
	return ch
}

func (g *AnnotationGrants) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if singletonv1.ExitRecorded(pod) {
		g.PredecessorExited(pod.UID)
	}
	if _, ok := pod.Annotations[singletonv1.AnnotationStartGranted]; ok {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.grant(pod.UID)
		return
	}
	// A grant is never taken back (the app of a granted pod may already run): a pod that lost its
	// annotations keeps it.
	if cond, ok := singletonv1.PodStartOnExit(pod); ok {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.exited[cond.PodUID] {
			g.grant(pod.UID)
		} else if !g.granted[pod.UID] {
			g.onExitOf[pod.UID] = cond.PodUID
		}
	}
}

// PredecessorExited records that every app process of the pod with this UID has exited, as its
// status-sidecar reported while the pod was being deleted (the exit handler accepted the report, or
// the pod carries its record): the pods released on its exit are granted now.
func (g *AnnotationGrants) PredecessorExited(uid types.UID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.exited[uid] {
		return
	}
	g.exited[uid] = true
	for pod, pred := range g.onExitOf {
		if pred == uid {
			g.grant(pod)
		}
	}
}

// grant grants the pod with this UID and answers its waiting long poll; g.mu is held.
func (g *AnnotationGrants) grant(uid types.UID) {
	delete(g.onExitOf, uid)
	if g.granted[uid] {
		return
	}
	g.granted[uid] = true
	if ch, ok := g.waiters[uid]; ok {
		close(ch)
	}
}

// forget drops a deleted pod, so memory follows the live pods. A request still waiting on it is never
// answered "granted" and ends at MaxWait.
func (g *AnnotationGrants) forget(uid types.UID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.granted, uid)
	delete(g.waiters, uid)
	delete(g.onExitOf, uid)
	delete(g.exited, uid)
}

// deletedPod is the pod of an informer's delete event, also when the informer missed the deletion and
// hands a tombstone.
func deletedPod(obj any) (*corev1.Pod, bool) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	return pod, ok
}
