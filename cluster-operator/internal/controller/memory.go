package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
)

// memory is what the operator remembers between reconciles, in process. Losing it (a restart) is safe:
// the high-water mark and the ledger are in status, pods and claims are in the API; what is lost errs
// on the side of not acting (e.g. a pod not yet seen Ready after a restart is judged by its status).
type memory struct {
	mu sync.Mutex
	// created are pods this process created that its cache has not shown yet (expectations): they
	// count as live, so a lagging cache never makes the operator create more pods than wanted.
	created map[types.NamespacedName]map[string]createdPod
	// deleted are the UIDs of pods this process deleted, so that their retirement is not recorded
	// again as a deletion by someone else.
	deleted map[types.UID]deletion
	// seenReady are the pods seen Ready at least once ("unhealthy after having been Ready").
	seenReady map[types.UID]bool
	// gone are pods that disappeared, per StatefulCluster, for the ledger (reason Deleted when nobody
	// recorded another reason).
	gone map[types.NamespacedName][]gonePod
	// lostSince queues, per StatefulCluster, when each retired identity became unusable, oldest
	// first; the next pod created is its replacement (replacement-latency metric).
	lostSince map[types.NamespacedName][]time.Time
	// written is, per StatefulCluster, the object as this process's last status write returned it and
	// the resourceVersions its status writes replaced since the cache last caught up (see latest).
	written map[types.NamespacedName]*writtenCluster
}

// writtenCluster is a StatefulCluster as the operator's own status writes left it.
type writtenCluster struct {
	obj      *clusterv1alpha1.StatefulCluster
	replaced map[string]bool
}

// writtenHistoryLimit bounds the resourceVersions kept per StatefulCluster while the cache lags.
const writtenHistoryLimit = 64

// deletion is why this process deleted a pod, so a ledger entry lost with a conflicting status write
// is recorded again with the right reason.
type deletion struct {
	at      time.Time
	reason  clusterv1alpha1.RetirementReason
	message string
}

type createdPod struct {
	revision string
	at       time.Time
}

type gonePod struct {
	name, node string
	uid        types.UID
	created    time.Time
	// reason and message are set when this process retired the pod (its ledger entry may have been
	// lost with a conflicting status write).
	reason  clusterv1alpha1.RetirementReason
	message string
}

// expectationTTL bounds how long a created pod counts without the cache showing it; after that the
// cache is trusted again (the create may have been undone, e.g. by a namespace deletion).
const expectationTTL = 2 * time.Minute

func newMemory() *memory {
	return &memory{
		created:   map[types.NamespacedName]map[string]createdPod{},
		deleted:   map[types.UID]deletion{},
		seenReady: map[types.UID]bool{},
		gone:      map[types.NamespacedName][]gonePod{},
		lostSince: map[types.NamespacedName][]time.Time{},
		written:   map[types.NamespacedName]*writtenCluster{},
	}
}

// wrote remembers the object a status write returned and the resourceVersion it replaced.
func (m *memory) wrote(sc types.NamespacedName, replaced string, obj *clusterv1alpha1.StatefulCluster) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.written[sc]
	if w == nil || len(w.replaced) >= writtenHistoryLimit {
		w = &writtenCluster{replaced: map[string]bool{}}
		m.written[sc] = w
	}
	w.obj = obj.DeepCopy()
	w.replaced[replaced] = true
}

// latest returns the StatefulCluster to reconcile. The cache shows the operator's own status write
// only once its watch event arrives; a reconcile started from the version that write replaced would
// write nothing but a conflict (every status write carries a resourceVersion precondition) and be
// retried with backoff — after a pod is deleted, the write recording it and the replacement's
// reconcile follow each other within milliseconds. So while the cache serves a version one of our
// writes replaced, the object that write returned (strictly newer: the write succeeded on that
// version) is used instead. Any other cached version has caught up with or moved past our writes, and
// wins. Comparing versions for equality only keeps resourceVersions opaque.
func (m *memory) latest(cached *clusterv1alpha1.StatefulCluster) *clusterv1alpha1.StatefulCluster {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := key(cached)
	w := m.written[k]
	if w == nil {
		return cached
	}
	if w.replaced[cached.ResourceVersion] && w.obj.UID == cached.UID {
		return w.obj.DeepCopy()
	}
	delete(m.written, k)
	return cached
}

func (m *memory) expectCreated(sc types.NamespacedName, name, revision string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.created[sc] == nil {
		m.created[sc] = map[string]createdPod{}
	}
	m.created[sc][name] = createdPod{revision: revision, at: now}
}

// observed forgets the expectation of a pod the cache now shows.
func (m *memory) observed(sc types.NamespacedName, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.created[sc], name)
}

// pendingCreates returns the pods created but not yet shown by the cache, dropping stale ones.
func (m *memory) pendingCreates(sc types.NamespacedName, now time.Time) map[string]createdPod {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]createdPod{}
	for name, c := range m.created[sc] {
		if now.Sub(c.at) > expectationTTL {
			delete(m.created[sc], name)
			continue
		}
		out[name] = c
	}
	return out
}

func (m *memory) markDeleted(uid types.UID, d deletion) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.deleted) >= 100000 {
		for k, old := range m.deleted {
			if d.at.Sub(old.at) > time.Hour {
				delete(m.deleted, k)
			}
		}
	}
	m.deleted[uid] = d
}

func (m *memory) unmarkDeleted(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.deleted, uid)
}

func (m *memory) deletedByUs(uid types.UID) (deletion, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.deleted[uid]
	return d, ok
}

func (m *memory) markReady(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seenReady[uid] = true
}

func (m *memory) wasReady(uid types.UID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seenReady[uid]
}

// podGone notes a pod that disappeared and forgets what was kept about it.
func (m *memory) podGone(sc types.NamespacedName, p gonePod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.seenReady, p.uid)
	if d, ours := m.deleted[p.uid]; ours {
		p.reason, p.message = d.reason, d.message
	}
	delete(m.deleted, p.uid)
	if len(m.gone[sc]) < 1000 {
		m.gone[sc] = append(m.gone[sc], p)
	}
}

func (m *memory) takeGone(sc types.NamespacedName) []gonePod {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.gone[sc]
	delete(m.gone, sc)
	return g
}

func (m *memory) pushLost(sc types.NamespacedName, since time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.lostSince[sc]) < 1000 {
		m.lostSince[sc] = append(m.lostSince[sc], since)
	}
}

func (m *memory) popLost(sc types.NamespacedName) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.lostSince[sc]
	if len(q) == 0 {
		return time.Time{}, false
	}
	m.lostSince[sc] = q[1:]
	return q[0], true
}

// forget drops everything kept about a StatefulCluster that is gone.
func (m *memory) forget(sc types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.created, sc)
	delete(m.gone, sc)
	delete(m.lostSince, sc)
	delete(m.written, sc)
}
