package controller

import (
	"context"
	"sync"
	"time"

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

// configChanged passes creations, deletions and every update of a ConfigMap or Secret: the watch
// carries metadata only, so a data change cannot be told from a label edit here; the reconcile
// recomputes the hash from the data, and an unchanged hash rolls nothing (no-op and metadata-only
// updates restart no pod).
func configChanged() predicate.Predicate {
	return predicate.Funcs{GenericFunc: func(event.GenericEvent) bool { return false }}
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
// apply now), and when the burst started. quiet is the ExtendedStatefulSet's quiet period; negative means
// the debouncer's default.
func (d *debouncer) wait(key types.NamespacedName, hash string, now time.Time, quiet time.Duration) (time.Duration, time.Time) {
	if quiet < 0 {
		quiet = d.quiet
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.pending[key]
	if !ok {
		p = pendingHash{hash: hash, first: now, last: now}
	} else if p.hash != hash {
		p.hash, p.last = hash, now
	}
	d.pending[key] = p
	wait := min(p.last.Add(quiet).Sub(now), p.first.Add(d.maxDelay).Sub(now))
	return max(wait, 0), p.first
}

// forget drops the pending change of key (applied, or the object is gone).
func (d *debouncer) forget(key types.NamespacedName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.pending, key)
}

// quietPeriod is spec.updateStrategy.configChangeQuietPeriod; -1 (the operator's default) when unset.
func quietPeriod(ests *extendedv1alpha1.ExtendedStatefulSet) time.Duration {
	if d := ests.Spec.UpdateStrategy.ConfigChangeQuietPeriod; d != nil && d.Duration >= 0 {
		return d.Duration
	}
	return -1
}
