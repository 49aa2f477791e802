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
	// again as a deletion by someone else, and so that such a pod counts as terminating while the
	// cache does not show its deletion yet (loadMembers), not as a running pod to scale down again.
	deleted map[types.UID]deletion
	// seenReady are the pods seen Ready at least once ("unhealthy after having been Ready").
	seenReady map[types.UID]bool
	// gone are pods that disappeared, per StatefulCluster, for the ledger (reason Deleted when nobody
	// recorded another reason).
	gone map[types.NamespacedName][]gonePod
	// lostSince queues, per StatefulCluster, when each retired identity became unusable, oldest
	// first; the next pod created is its replacement (replacement-latency metric).
	lostSince map[types.NamespacedName][]time.Time
	// refused is, per StatefulCluster, the generation whose pod template the API server refused as
	// invalid and its message: no identity is spent on it again until the spec changes.
	refused map[types.NamespacedName]refusal
}

// refusal is a generation whose pods the API server refuses, and why.
type refusal struct {
	generation int64
	message    string
}

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
		refused:   map[types.NamespacedName]refusal{},
	}
}

// refuse remembers that the pods of this generation of sc are refused by the API server.
func (m *memory) refuse(sc types.NamespacedName, generation int64, message string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refused[sc] = refusal{generation: generation, message: message}
}

// refusedAt returns why the pods of this generation of sc are refused, if they are.
func (m *memory) refusedAt(sc types.NamespacedName, generation int64) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.refused[sc]
	return r.message, ok && r.generation == generation
}

func (m *memory) expectCreated(sc types.NamespacedName, name, revision string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.created[sc] == nil {
		m.created[sc] = map[string]createdPod{}
	}
	m.created[sc][name] = createdPod{revision: revision, at: now}
}

// observed forgets the expectation of a pod the cache now shows. The pod event handler calls it as
// soon as the cache holds the pod, also while a reconcile runs: loadMembers reads the expectations
// before it lists the cache, so a pod is always counted from one or the other.
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

// podGone notes a pod that disappeared at `at` and forgets what was kept about it. A pod this process
// did not delete (deleted by someone else, evicted) is lost from then on: its replacement's latency
// counts from its disappearance.
func (m *memory) podGone(sc types.NamespacedName, p gonePod, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.seenReady, p.uid)
	if d, ours := m.deleted[p.uid]; ours {
		p.reason, p.message = d.reason, d.message
	} else if len(m.lostSince[sc]) < 1000 {
		m.lostSince[sc] = append(m.lostSince[sc], at)
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
	delete(m.refused, sc)
}
