//go:build integration

package controller

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// The stopping notice of a deleted pod (spec.successorWait) against a real API server: a ReplicaSet's
// released Wrapper pod keeps its app until its held replacement runs; without a replacement the answer
// comes after the replacement window; a StatefulSet's pod, successorWait 0 and a replacement held with
// the scheduling gate are answered at once; and the wait never exceeds half the deletion's grace period.
func TestStoppingPodWaitsForItsReplacement(t *testing.T) {
	succ := NewSuccessors()
	startOperatorWithOptions(t, Options{Successors: succ}, nil)

	// stopping creates a released Wrapper pod, deletes it with grace (seconds; nil: the pod's 30 s)
	// and returns the channel that receives the notice's answer and how long it took.
	type answer struct {
		why  string
		took time.Duration
	}
	stopping := func(f *fixture, name string, grace *int64, opts ...podOpt) <-chan answer {
		f.createPod(name, append([]podOpt{releasedAt(1), func(p *corev1.Pod) { p.Finalizers = []string{"test.statefulops.io/keep"} }}, opts...)...)
		t.Cleanup(func() {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}}
			_ = suite.Client.Patch(context.Background(), p, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		})
		require.NoError(t, suite.Client.Delete(t.Context(), f.pod(name), &client.DeleteOptions{GracePeriodSeconds: grace}))
		pod := f.pod(name)
		require.False(t, pod.DeletionTimestamp.IsZero())
		ch := make(chan answer, 1)
		go func() {
			start := time.Now()
			why := succ.WaitForSuccessor(t.Context(), pod)
			ch <- answer{why, time.Since(start)}
		}()
		return ch
	}
	within := func(ch <-chan answer, d time.Duration) answer {
		t.Helper()
		select {
		case a := <-ch:
			return a
		case <-time.After(d):
			t.Fatalf("no answer within %s", d)
			return answer{}
		}
	}
	notWithin := func(ch <-chan answer, d time.Duration) {
		t.Helper()
		select {
		case a := <-ch:
			t.Fatalf("answered after %s (%s), while it should wait", a.took, a.why)
		case <-time.After(d):
		}
	}
	// starting: a held replacement whose containers are still being created (no status yet).
	starting := func(rs string) podOpt {
		return func(p *corev1.Pod) {
			held(singletonv1.HoldModeWrapper)(p)
			p.Spec.NodeName = "" // createPod reports no status: not running yet
			p.Labels["rs"] = rs
		}
	}

	t.Run("until the replacement runs", func(t *testing.T) {
		f := newFixture(t)
		f.createSingleton("db")
		rs := f.createReplicaSet("v1", 1)
		ch := stopping(f, "old", nil, ownedBy(rs))
		notWithin(ch, 300*time.Millisecond)
		f.createPod("new", starting(rs.Name), ownedBy(rs))
		notWithin(ch, 2*replacementWindow) // the replacement exists: beyond the window, until it runs
		f.setPhase("new", corev1.PodRunning)
		a := within(ch, 5*time.Second)
		assert.Contains(t, a.why, "replacement pod new runs and waits for its grant")
	})

	t.Run("no replacement", func(t *testing.T) {
		f := newFixture(t)
		f.createSingleton("db")
		rs := f.createReplicaSet("v1", 1)
		a := within(stopping(f, "old", nil, ownedBy(rs)), 5*time.Second)
		assert.Contains(t, a.why, "no replacement pod within")
		assert.GreaterOrEqual(t, a.took, replacementWindow-50*time.Millisecond)
	})

	t.Run("half the grace period at most", func(t *testing.T) {
		f := newFixture(t)
		f.createSingleton("db")
		rs := f.createReplicaSet("v1", 1)
		f.createPod("new", starting(rs.Name), ownedBy(rs))
		a := within(stopping(f, "old", ptr.To[int64](3), ownedBy(rs)), 5*time.Second)
		assert.Contains(t, a.why, "successorWait (1.5s) is up")
	})

	t.Run("at once", func(t *testing.T) {
		f := newFixture(t)
		f.createSingleton("db", func(ss *singletonv1.StatefulSingleton) { ss.Spec.SuccessorWait = ptr.To[int32](0) })
		rs := f.createReplicaSet("v1", 1)
		assert.Contains(t, within(stopping(f, "zero", nil, ownedBy(rs)), time.Second).why, "successorWait is 0")

		g := newFixture(t)
		g.createSingleton("db")
		sts := func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "sts-uid", Controller: ptr.To(true)}}
		}
		assert.Contains(t, within(stopping(g, "db-0", nil, sts), time.Second).why, "not a ReplicaSet's pod")

		h := newFixture(t)
		h.createSingleton("db")
		rs = h.createReplicaSet("v1", 1)
		h.createPod("gated", held(singletonv1.HoldModeSchedulingGate), ownedBy(rs))
		assert.Contains(t, within(stopping(h, "old", nil, ownedBy(rs)), time.Second).why, "held with the scheduling gate")
	})
}
