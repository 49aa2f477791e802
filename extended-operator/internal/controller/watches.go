package controller

import (
	"context"
	"reflect"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// referrers maps a ConfigMap or Secret to the ExtendedStatefulSets of its namespace that reference it,
// through the field index (no ownerReferences on the user's objects).
func (r *Reconciler) referrers(index string) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var list extendedv1alpha1.ExtendedStatefulSetList
		if err := r.Cache.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{index: o.GetName()}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "listing the referrers", "object", client.ObjectKeyFromObject(o))
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for i := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
		return out
	}
}

// dataChanged passes creations, deletions and updates that change a ConfigMap's or Secret's data:
// label or annotation edits never reach the reconciler (and would not change the hash anyway).
func dataChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			switch o := e.ObjectOld.(type) {
			case *corev1.ConfigMap:
				n, ok := e.ObjectNew.(*corev1.ConfigMap)
				return !ok || !reflect.DeepEqual(o.Data, n.Data) || !reflect.DeepEqual(o.BinaryData, n.BinaryData)
			case *corev1.Secret:
				n, ok := e.ObjectNew.(*corev1.Secret)
				return !ok || !reflect.DeepEqual(o.Data, n.Data)
			}
			return true
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// debouncer coalesces bursts of configuration changes: a new hash is applied once it has stayed the
// same for the quiet period, or when the first change of the burst is maxDelay old. It is the only
// in-memory state of the operator; after a restart a pending change waits one quiet period again.
type debouncer struct {
	quiet, maxDelay time.Duration
	mu              sync.Mutex
	pending         map[types.NamespacedName]pendingHash
}

type pendingHash struct {
	hash        string
	first, last time.Time
}

func newDebouncer(quiet, maxDelay time.Duration) *debouncer {
	return &debouncer{quiet: quiet, maxDelay: maxDelay, pending: map[types.NamespacedName]pendingHash{}}
}

// wait records that hash is wanted for key and returns how much longer to wait before applying it (zero:
// apply now), and when the burst started.
func (d *debouncer) wait(key types.NamespacedName, hash string, now time.Time) (time.Duration, time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.pending[key]
	if !ok {
		p = pendingHash{hash: hash, first: now, last: now}
	} else if p.hash != hash {
		p.hash, p.last = hash, now
	}
	d.pending[key] = p
	wait := min(p.last.Add(d.quiet).Sub(now), p.first.Add(d.maxDelay).Sub(now))
	return max(wait, 0), p.first
}

// forget drops the pending change of key (applied, or the object is gone).
func (d *debouncer) forget(key types.NamespacedName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.pending, key)
}
