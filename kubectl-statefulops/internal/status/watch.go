package status

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// maxDebounce bounds how long a steady stream of events can put off a redraw.
const maxDebounce = time.Second

// watchLoop watches the kinds in scope and the pods, from the resourceVersions of the last read, and
// calls emit with a fresh read after every burst of events. When a watch ends (the server closes
// watches after a while) or its resourceVersion expired (410 Gone), everything is read again and
// watched from there, so no change is missed.
func watchLoop(ctx context.Context, c client.WithWatch, sc scope, snap snapshot, debounce time.Duration, emit func(Summary) error) error {
	relevant := &namespaceSet{}
	for {
		relevant.set(snap.namespaces)
		started := time.Now()
		err := watchUntilExpired(ctx, c, sc, snap.versions, relevant, debounce, emit)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		// A watch that ends as soon as it starts (an error event the server repeats) must not make
		// this a loop of reads: at most one restart a second.
		if wait := time.Second - time.Since(started); wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
		snap, err = collect(ctx, c, sc)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := emit(snap.summary); err != nil {
			return err
		}
	}
}

// watchUntilExpired runs one set of watches. It returns nil when one of them ended or expired (the
// caller reads again and restarts them), an error when a watch cannot be opened or a read fails.
func watchUntilExpired(ctx context.Context, c client.WithWatch, sc scope, versions map[string]string, relevant *namespaceSet, debounce time.Duration, emit func(Summary) error) error {
	ctx, cancel := context.WithCancel(ctx)
	changed := make(chan struct{}, 1)
	ended := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	open := func(name string, list client.ObjectList, pods bool, opts ...client.ListOption) error {
		opts = append(opts, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: versions[name], AllowWatchBookmarks: true}})
		w, err := c.Watch(ctx, list, opts...)
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				signal(ended)
				return nil
			}
			return fmt.Errorf("watching %s: %w", name, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						signal(ended)
						return
					}
					switch ev.Type {
					case watch.Bookmark:
						continue
					case watch.Error:
						// Typically 410 Gone: the resourceVersion is too old. Read again.
						signal(ended)
						return
					}
					if o, ok := ev.Object.(client.Object); ok && pods && !relevant.has(o.GetNamespace()) {
						continue // a pod of a namespace without statefulops objects
					}
					signal(changed)
				}
			}
		}()
		return nil
	}
	for _, k := range sc.kinds {
		if err := open(k.Kind, k.newList(), false, sc.kindListOptions()...); err != nil {
			return err
		}
	}
	if err := open("Pod", &corev1.PodList{}, true, sc.listOptions()...); err != nil {
		return err
	}

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ended:
			return nil
		case <-changed:
		}
		// Wait for the burst to settle: debounce after the last event, at most maxDebounce in all.
		deadline := time.Now().Add(maxDebounce)
		timer := time.NewTimer(debounce)
	settle:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil
			case <-ended:
				timer.Stop()
				return nil
			case <-changed:
				if wait := time.Until(deadline); wait > 0 {
					timer.Reset(min(debounce, wait))
				}
			case <-timer.C:
				break settle
			}
		}
		snap, err := collect(ctx, c, sc)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		relevant.set(snap.namespaces)
		if err := emit(snap.summary); err != nil {
			return err
		}
		// Later reads are fresher than the watches' start; the watches go on from where they are.
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// namespaceSet is the namespaces whose pods matter, replaced after every read while the watches run.
type namespaceSet struct {
	mu  sync.Mutex
	nss map[string]bool
}

func (s *namespaceSet) set(nss map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nss = nss
}

func (s *namespaceSet) has(ns string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nss[ns]
}
