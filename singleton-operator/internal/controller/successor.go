package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// defaultSuccessorWait is spec.successorWait's default (the CRD defaults it too), replacementWindow how
// long after the stopping notice a replacement pod must exist for the app to keep running.
const (
	defaultSuccessorWait = 10 * time.Second
	replacementWindow    = time.Second
)

// Successors answers the stopping notice of a released Wrapper pod that is being deleted (the grant
// server's /v1/stopping): the pod's app keeps running until the pod that replaces it runs and waits for
// its grant, so that the gap between the two processes is the handover's and not the new pod's
// scheduling and start (spec.successorWait). It reads the manager's cache only, so it answers on every
// replica, leader or not, and writes nothing: the hold is the app's, on its node.
type Successors struct {
	cache client.Reader

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever a cached pod changes
}

// NewSuccessors returns Successors; Options.Setup connects it to the manager's cache.
func NewSuccessors() *Successors { return &Successors{changed: make(chan struct{})} }

// start reads mgr's cache and wakes the waiting notices on every change of its pods.
func (s *Successors) start(ctx context.Context, mgr ctrl.Manager) error {
	s.cache = mgr.GetCache()
	informer, err := mgr.GetCache().GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return err
	}
	wake := func(any) {
		s.mu.Lock()
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
	}
	_, err = informer.AddEventHandlerWithOptions(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    wake,
		UpdateFunc: func(_, obj any) { wake(obj) },
		DeleteFunc: wake,
	}, toolscache.HandlerOptions{})
	return err
}

func (s *Successors) changes() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// WaitForSuccessor returns once the app of pod, a pod being deleted, may get its stop signal, and says
// why: at once when no replacement can be prepared before it is gone (not a released Wrapper pod, not
// a ReplicaSet's pod, no StatefulSingleton, successorWait 0, or a replacement held with the scheduling
// gate), when no replacement appeared within replacementWindow, when a replacement runs and waits for
// its grant, or when successorWait (at most half the deletion's grace period) is up.
func (s *Successors) WaitForSuccessor(ctx context.Context, pod *corev1.Pod) string {
	if s.cache == nil {
		return "the operator does not follow pods"
	}
	switch owner := metav1.GetControllerOf(pod); {
	case classify(pod) != stateReleased || singletonv1.HoldMode(pod.Annotations[singletonv1.AnnotationHoldMode]) != singletonv1.HoldModeWrapper:
		return "not a released Wrapper-mode pod"
	case owner == nil || owner.Kind != "ReplicaSet":
		return "not a ReplicaSet's pod: its replacement is created only once it is gone"
	}
	ss, err := s.singletonOf(ctx, pod)
	if err != nil || ss == nil {
		return fmt.Sprintf("no StatefulSingleton selects it (%v)", err)
	}
	wait := defaultSuccessorWait
	if ss.Spec.SuccessorWait != nil {
		wait = time.Duration(*ss.Spec.SuccessorWait) * time.Second
	}
	if grace := pod.DeletionGracePeriodSeconds; grace != nil {
		wait = min(wait, time.Duration(*grace)*time.Second/2)
	}
	if wait <= 0 {
		return "successorWait is 0 (or the deletion's grace period under 2 s)"
	}
	start := time.Now()
	deadline, window := time.NewTimer(wait), time.NewTimer(replacementWindow)
	defer deadline.Stop()
	defer window.Stop()
	windowOver := false
	for {
		changed := s.changes() // before the look, so a change during it wakes the next wait
		successor, err := s.successorOf(ctx, ss, pod)
		switch {
		case err != nil:
			return "reading the replacement failed: " + err.Error()
		case successor != nil && hasSchedulingGate(successor):
			return fmt.Sprintf("replacement pod %s is held with the scheduling gate: it starts only once released", successor.Name)
		case successor != nil && startPrepared(successor):
			return fmt.Sprintf("replacement pod %s runs and waits for its grant (after %s)", successor.Name, time.Since(start).Round(time.Millisecond))
		case successor == nil && windowOver:
			return fmt.Sprintf("no replacement pod within %s", replacementWindow)
		}
		select {
		case <-changed:
		case <-window.C:
			windowOver = true
		case <-deadline.C:
			return fmt.Sprintf("successorWait (%s) is up before a replacement ran", wait)
		case <-ctx.Done():
			return "the notice ended: " + ctx.Err().Error()
		}
	}
}

// singletonOf is the oldest StatefulSingleton of pod's namespace selecting it (the one that manages it).
func (s *Successors) singletonOf(ctx context.Context, pod *corev1.Pod) (*singletonv1.StatefulSingleton, error) {
	var list singletonv1.StatefulSingletonList
	if err := s.cache.List(ctx, &list, client.InNamespace(pod.Namespace)); err != nil {
		return nil, err
	}
	var found *singletonv1.StatefulSingleton
	for i := range list.Items {
		ss := &list.Items[i]
		sel, err := metav1.LabelSelectorAsSelector(&ss.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		if found == nil || ss.CreationTimestamp.Before(&found.CreationTimestamp) {
			found = ss
		}
	}
	return found, nil
}

// successorOf is a held pod of ss that replaces pod (not being deleted), preferring one prepared to
// start, or nil. Held pods are managed pods, which the manager's cache holds.
func (s *Successors) successorOf(ctx context.Context, ss *singletonv1.StatefulSingleton, pod *corev1.Pod) (*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(&ss.Spec.Selector)
	if err != nil {
		return nil, err
	}
	var list corev1.PodList
	if err := s.cache.List(ctx, &list, client.InNamespace(pod.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	var found *corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		if p.UID == pod.UID || !p.DeletionTimestamp.IsZero() || !awaitsRelease(p) {
			continue
		}
		if found == nil || startPrepared(p) {
			found = p
		}
	}
	return found, nil
}
