package controller

import (
	"k8s.io/apimachinery/pkg/types"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
)

// Identities reserved ahead (issue 21). Every ordinal a pod gets is below a mark written in status
// (under a resourceVersion precondition) before the pod's creation. Writing that mark right before
// every creation put a status write on the path of every replacement (the lost pod seen gone → the
// mark written → the replacement created; 4–5 × the StatefulSet's recreation). So the mark is written
// ahead: status.identitiesReservedUntil reserves ordinals above status.nextIdentity for this process.
//
// What keeps an ordinal from ever being handed out twice:
//   - This process hands out an ordinal of its reservation only while the cache shows the mark it
//     wrote last (pool.valid): the reservation is its own and nobody changed it.
//   - It remembers, in memory only, the next ordinal it has not handed out yet (pool.next), and moves
//     it past every name before that name's pod is created; a failed creation burns its ordinal.
//   - Any other process (a restart, a new leader, an older version that knows only nextIdentity is
//     excluded below) starts at or above the mark (highWater): what this process reserved and left
//     unused is skipped, never reused, whatever this process may still create.
//   - The reservation is released (lowered to nextIdentity) only by its owner, in the same
//     precondition-guarded write that records nextIdentity = pool.next: nothing in between was
//     handed out.
//
// A StatefulCluster keeps spareIdentities reserved ahead only once it has lost a pod (pool.spare), so
// a cluster that only scales keeps contiguous names across restarts; a scale-up reserves all its
// identities in one write ahead of its first batch, and the reconcile's status write releases what
// it did not use.

// spareIdentities is how many identities a StatefulCluster that has lost a pod keeps reserved ahead:
// enough for the pods of a lost node; more losses at once reserve with one write.
const spareIdentities = 8

// identityPool is this process's reservation of one StatefulCluster's ordinals: [next, end) are
// reserved in status and not handed out yet.
type identityPool struct {
	uid       types.UID
	next, end int64
	// spare: keep spareIdentities reserved ahead (set by the first lost pod).
	spare bool
}

// valid reports whether the pool is this process's reservation for sc and the cached sc still shows
// the mark this process wrote (the reconcile does not run on a cache behind its own writes).
func (p identityPool) valid(sc *clusterv1alpha1.StatefulCluster) bool {
	return p.uid == sc.UID && p.uid != "" && sc.Status.IdentitiesReservedUntil == p.end && p.next <= p.end
}

// floor is the lowest ordinal this process may still hand out for sc: above everything it ever
// handed out or reserved.
func (p identityPool) floor(sc *clusterv1alpha1.StatefulCluster) int64 {
	if p.uid != sc.UID {
		return 0
	}
	return max(p.next, p.end)
}

func (m *memory) pool(sc types.NamespacedName) identityPool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pools[sc]
}

func (m *memory) setPool(sc types.NamespacedName, p identityPool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pools[sc] = p
}

// ordinalStart returns the first ordinal of new identities: from this process's reservation when it
// is still valid (only above every trace), else above every trace, the marks and the old pool.
func (s *scope) ordinalStart(traces []string) (int64, identityPool) {
	p := s.r.mem.pool(s.key)
	if p.valid(s.sc) {
		used := *s.sc
		used.Status.IdentitiesReservedUntil = 0 // the reservation is ours: only the traces count
		return max(p.next, highWater(&used, traces)), p
	}
	start := max(highWater(s.sc, traces), p.floor(s.sc))
	return start, identityPool{uid: s.sc.UID, next: start, end: start, spare: p.uid == s.sc.UID && p.spare}
}

// keepSpare marks that the StatefulCluster has lost a pod: from now on this process keeps
// spareIdentities reserved ahead for it.
func (s *scope) keepSpare() {
	p := s.r.mem.pool(s.key)
	if p.uid != s.sc.UID {
		p = identityPool{uid: s.sc.UID}
	}
	p.spare = true
	s.r.mem.setPool(s.key, p)
}

// settleReservation sets, before the reconcile's status write, nextIdentity to the next ordinal this
// process will hand out and the reservation to it plus the spare (or releases an unused
// reservation). It returns the pool to remember once that write succeeded (ok false: leave it).
func (s *scope) settleReservation(traces []string) (identityPool, bool) {
	if s.sc.Spec.IdentityFormat == clusterv1alpha1.RandomIdentityFormat {
		return identityPool{}, false
	}
	start, p := s.ordinalStart(traces)
	p.next = start
	want := p.next
	if p.spare {
		want += spareIdentities
	}
	st := &s.sc.Status
	st.NextIdentity = max(st.NextIdentity, p.next)
	if !p.valid(s.sc) {
		// Not this process's reservation: it may only be raised (what it reserves may be in use).
		want = max(want, st.IdentitiesReservedUntil)
	}
	if want == st.NextIdentity && st.IdentitiesReservedUntil <= st.NextIdentity {
		want = st.IdentitiesReservedUntil // nothing reserved ahead, nothing to write
	}
	st.IdentitiesReservedUntil = want
	p.end = want
	return p, true
}
