package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
)

// Reconcile makes the pods of one StatefulCluster match its spec and writes its status: get it, build
// the scope, write the status once when the reconcile ends, and reconcile its deletion or its pods.
//
// There is no finalizer: pods and claims are owned by the StatefulCluster and the garbage collector
// removes them; nothing outside the API server has to be cleaned up before the object goes.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (result reconcile.Result, reterr error) {
	sc := &clusterv1alpha1.StatefulCluster{}
	if err := r.Cache.Get(ctx, req.NamespacedName, sc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if behind, err := r.behind(ctx, sc); behind || err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err) // the event of the operator's own write follows
	}
	s := r.newScope(sc)
	defer func() { result, reterr = r.writeStatus(ctx, s, result, reterr) }()
	if !s.sc.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(s)
	}
	return r.reconcileNormal(ctx, s)
}

// errConflict means a write met a changed object: the reconcile starts again from fresh reads.
var errConflict = errors.New("conflict")

// scope is one reconcile of one StatefulCluster: what it read and what it decided.
type scope struct {
	r        *Reconciler
	sc, orig *clusterv1alpha1.StatefulCluster // orig: the status as last written (the patch base)
	before   []metav1.Condition               // the conditions when the reconcile began (waiting Events)
	now      time.Time
	key      types.NamespacedName
	// skipStatus leaves the status unwritten (a StatefulCluster being deleted).
	skipStatus bool
	revs       *revisionSet
	pods       []*member // owned pods (and pods created but not yet cached)
	nodes      map[string]*corev1.Node
	allNodes   []*corev1.Node // read only with zoneSpread
	claims     []corev1.PersistentVolumeClaim
	recheck    time.Time
	failures   []string // what could not be written, for ReplicaFailure
	progress   string   // the reason of Progressing, when something is under way
	scaledUp   int
	retiring   int
	toUpdate   int
	updateRun  bool
	// holdCreates is set while a failing membership hook (failurePolicy Fail) holds new pods back.
	holdCreates bool
	// invalid: the spec is not acted on (checkSpec). refused: the API server refuses the template's pods
	// (kstatus.go). Both make the StatefulCluster Stalled.
	invalid *problem
	refused string
	hookMu  sync.Mutex
	// hookFailure is the failing call of a membership hook with failurePolicy Fail; hookStalled is set
	// too when no pod can ever answer it (Stalled). Both guarded by hookMu.
	hookFailure, hookStalled string
	// reserveTook is how long the last high-water mark's write took (the replacement's log line).
	reserveTook time.Duration
}

// newScope starts the reconcile of sc.
func (r *Reconciler) newScope(sc *clusterv1alpha1.StatefulCluster) *scope {
	orig := sc.DeepCopy()
	return &scope{r: r, sc: sc, orig: orig, before: orig.Status.Conditions, now: r.Clock.Now(), key: key(sc)}
}

// reconcileDelete forgets the StatefulCluster. Pods (and, with whenDeleted=Delete, claims) are owned by
// it: the garbage collector removes them, and nothing is created any more. Its status stays as it was.
func (r *Reconciler) reconcileDelete(s *scope) (reconcile.Result, error) {
	r.mem.forget(s.key)
	r.writes.forget(s.sc)
	s.skipStatus = true
	return reconcile.Result{}, nil
}

// reconcileNormal is the reconcile, phase by phase. A failure on one pod or claim is recorded (fail) and
// the other phases still run: one bad pod never blocks the rest.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (reconcile.Result, error) {
	s.invalid = checkSpec(s.sc)
	if err := r.load(ctx, s); err != nil {
		return reconcile.Result{}, err
	}
	r.judgePods(ctx, s)
	r.recordGone(s)
	if s.invalid != nil {
		// Observed and reported (Stalled), never acted on: a spec change, the only way out, wakes it.
		return reconcile.Result{}, nil
	}
	r.retire(ctx, s)
	r.rollingUpdate(ctx, s)
	s.holdCreates = !r.runRetireHooks(ctx, s)
	if err := r.scale(ctx, s); err != nil {
		return reconcile.Result{}, err
	}
	r.ensureClaims(ctx, s)
	r.retireClaims(ctx, s)
	r.ownClaims(ctx, s)
	r.pruneRevisions(ctx, s)
	return s.result(), nil
}

// load reads what the decisions need: the revisions (creating the update revision), the pods and
// their nodes, the claims.
func (r *Reconciler) load(ctx context.Context, s *scope) error {
	var err error
	if s.revs, err = r.syncRevisions(ctx, s.sc); err != nil {
		return err
	}
	if err := r.loadPods(ctx, s); err != nil {
		return err
	}
	return r.loadClaims(ctx, s)
}

// pruneRevisions deletes the revisions beyond the history limit that no pod uses any more.
func (r *Reconciler) pruneRevisions(ctx context.Context, s *scope) {
	used := map[string]bool{}
	for _, m := range s.pods {
		used[m.revision] = true
	}
	if err := r.truncateHistory(ctx, s.sc, s.revs, used); err != nil {
		s.fail("%v", err)
	}
}

// writeStatus is the reconcile's one status write, deferred by Reconcile: the observed state and
// err (the reconcile's error, if any) go into the status, written under a resourceVersion
// precondition; the waiting Events follow a successful write. A conflict, here or in a phase
// (errConflict), starts the reconcile again from fresh reads.
func (r *Reconciler) writeStatus(ctx context.Context, s *scope, result reconcile.Result, err error) (reconcile.Result, error) {
	if s.skipStatus {
		return result, err
	}
	if errors.Is(err, errConflict) {
		// The object or a pod changed since it was read (or the cache lags our own write): decide again.
		return reconcile.Result{Requeue: true}, nil
	}
	s.applyStatus(err)
	if serr := s.patchStatus(ctx, false); serr != nil {
		if apierrors.IsConflict(serr) {
			return reconcile.Result{Requeue: true}, nil
		}
		err = errors.Join(err, serr)
	} else {
		s.waitingEvents(s.before)
	}
	if err == nil && len(s.failures) > 0 {
		// Retried with the workqueue's backoff; the other steps of this reconcile were done.
		err = fmt.Errorf("%d step(s) failed, first: %s", len(s.failures), s.failures[0])
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	// Taken again: applyStatus may have set a recheck (a failing membership hook's retry).
	return s.result(), nil
}

func key(sc *clusterv1alpha1.StatefulCluster) types.NamespacedName {
	return types.NamespacedName{Namespace: sc.Namespace, Name: sc.Name}
}

func (s *scope) later(t time.Time) {
	if !t.IsZero() && (s.recheck.IsZero() || t.Before(s.recheck)) {
		s.recheck = t
	}
}

func (s *scope) fail(format string, args ...any) {
	s.failures = append(s.failures, fmt.Sprintf(format, args...))
}

// result requeues at the moment the next threshold expires, if any (never sleeps in the reconcile).
func (s *scope) result() reconcile.Result {
	if s.recheck.IsZero() {
		return reconcile.Result{}
	}
	return reconcile.Result{RequeueAfter: max(s.recheck.Sub(s.now), 100*time.Millisecond)}
}
