package controller

import (
	"context"
	"sync"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// The cache shows the operator's own status write only once its watch event arrives. A reconcile
// started from the version that write replaced would decide from a state the write already changed, and
// write nothing but a conflict (every status write carries a resourceVersion precondition), retried with
// backoff; after a pod is deleted, the write recording it and the replacement's reconcile follow each
// other within milliseconds. So the status writes are recorded (opsutil.WriteTracker), a reconcile that
// finds the cached StatefulCluster behind them stops, and the watch event of the write starts the next
// one. clusterPredicate drops status-only updates (the operator's own writes must not wake it), so the
// StatefulClusters whose reconcile stopped this way are kept in ownWrites.awaiting, and their event is
// let through.

// ownWrites is what the operator knows of its own status writes.
type ownWrites struct {
	tracker *opsutil.WriteTracker
	// awaiting are the StatefulClusters whose reconcile stopped for a cache behind the operator's
	// write: the watch event that catches the cache up must reconcile them.
	awaiting sync.Map // types.UID → struct{}
}

func newOwnWrites() *ownWrites { return &ownWrites{tracker: opsutil.NewWriteTracker()} }

// behind reports whether the cached sc is older than the operator's last status write to it, in which
// case the reconcile stops and the event of that write starts the next one. sc is read again after it
// is marked awaiting: the event may have arrived between the first read and the mark (the cache is
// updated before the event is handled), and then sc is the caught-up object.
func (r *Reconciler) behind(ctx context.Context, sc *clusterv1alpha1.StatefulCluster) (bool, error) {
	w := r.writes
	if !w.tracker.Behind(sc) {
		return false, nil
	}
	w.awaiting.Store(sc.UID, struct{}{})
	if err := r.Cache.Get(ctx, key(sc), sc); err != nil {
		w.awaiting.Delete(sc.UID)
		return false, err
	}
	if w.tracker.Behind(sc) {
		return true, nil
	}
	w.awaiting.Delete(sc.UID)
	return false, nil
}

// caughtUp reports whether obj's update event ends a wait of behind: the reconcile of obj stopped,
// and obj is no longer behind the operator's writes.
func (w *ownWrites) caughtUp(sc *clusterv1alpha1.StatefulCluster) bool {
	if _, ok := w.awaiting.Load(sc.UID); !ok || w.tracker.Behind(sc) {
		return false
	}
	w.awaiting.Delete(sc.UID)
	return true
}

// forget drops what is kept about a StatefulCluster that is being deleted.
func (w *ownWrites) forget(sc *clusterv1alpha1.StatefulCluster) {
	w.tracker.Forget(sc)
	w.awaiting.Delete(sc.UID)
}
