//go:build e2e

package framework

import (
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// PodDeletion is one pod deletion a watch saw: the first event with the pod's deletionTimestamp set
// (or its removal, when no such event came first).
type PodDeletion struct {
	Name, UID, Revision string // Revision: the pod's controller-revision-hash label
	At                  time.Time
}

func (d PodDeletion) String() string { return fmt.Sprintf("%s(%s)", d.Name, d.Revision) }

// PodDeletions records every pod deletion of a namespace from a watch, once per pod UID.
type PodDeletions struct {
	mu   sync.Mutex
	seen map[string]bool
	list []PodDeletion
}

// RecordPodDeletions starts recording the pod deletions of ns until the test ends.
func RecordPodDeletions(t *testing.T, ns string) *PodDeletions {
	t.Helper()
	d := &PodDeletions{seen: map[string]bool{}}
	WatchPods(t, ns, "", func(ev watch.EventType, pod *corev1.Pod) {
		if ev != watch.Deleted && pod.DeletionTimestamp.IsZero() {
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.seen[string(pod.UID)] {
			return
		}
		d.seen[string(pod.UID)] = true
		d.list = append(d.list, PodDeletion{Name: pod.Name, UID: string(pod.UID),
			Revision: pod.Labels[appsv1.ControllerRevisionHashLabelKey], At: time.Now()})
	})
	return d
}

// List returns the deletions seen so far, in order.
func (d *PodDeletions) List() []PodDeletion {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]PodDeletion(nil), d.list...)
}

// OnRevision returns the deletions seen so far of pods on revision rev.
func (d *PodDeletions) OnRevision(rev string) []PodDeletion {
	var out []PodDeletion
	for _, del := range d.List() {
		if del.Revision == rev {
			out = append(out, del)
		}
	}
	return out
}

// CrashLooping reports whether the pod's container named container has exited with exitCode (now or
// last time) and is not Ready: a real crash loop as the kubelet reports it.
func CrashLooping(pod *corev1.Pod, container string, exitCode int32) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != container || cs.Ready {
			continue
		}
		if t := cs.LastTerminationState.Terminated; t != nil && t.ExitCode == exitCode {
			return true
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode == exitCode {
			return true
		}
	}
	return false
}
