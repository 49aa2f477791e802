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

// AnnotationGrants implements Grants from the pod annotation AnnotationStartGranted: a pod is granted
// once the annotation is present. It follows the pods through an informer (the operator's cache), so
// answering costs no API call.
type AnnotationGrants struct {
	mu      sync.Mutex
	granted map[types.UID]bool
	waiters map[types.UID]chan struct{}
}

// NewAnnotationGrants follows the pods of informer (e.g. mgr.GetCache().GetInformer(ctx, &corev1.Pod{});
// the operator's cache holds only managed pods, and every Wrapper pod is one).
func NewAnnotationGrants(ctx context.Context, informer cache.Informer) (*AnnotationGrants, error) {
	g := &AnnotationGrants{granted: map[types.UID]bool{}, waiters: map[types.UID]chan struct{}{}}
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
	if _, ok := pod.Annotations[singletonv1.AnnotationStartGranted]; !ok {
		return // a grant is never taken back: the app of a granted pod may already run
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.granted[pod.UID] {
		return
	}
	g.granted[pod.UID] = true
	if ch, ok := g.waiters[pod.UID]; ok {
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
