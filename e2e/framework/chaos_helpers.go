//go:build e2e

package framework

import (
	"context"
	"maps"
	"math/rand"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

func IgnoreGone(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// SleepRandom waits a random duration in [lo, hi) (the test driver, not a reconcile).
func SleepRandom(rng *rand.Rand, lo, hi time.Duration) {
	time.Sleep(lo + time.Duration(rng.Int63n(int64(hi-lo))))
}

// LaneNamespaces is the set of namespaces whose campaign lanes (ParallelRounds) are running, for
// the faults aimed at the lanes' objects. A lane leaves it before its checkers count: Leave waits for
// a fault in flight on the lane, so each checker counts with every fault it saw already recorded.
type LaneNamespaces struct {
	mu  sync.RWMutex
	set map[string]bool
}

// Join adds a lane's namespace.
func (l *LaneNamespaces) Join(ns string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.set == nil {
		l.set = map[string]bool{}
	}
	l.set[ns] = true
}

// Leave removes a lane's namespace, once no fault is in flight on any lane.
func (l *LaneNamespaces) Leave(ns string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.set, ns)
}

// Each calls f for every running lane, in name order, with faults on the lanes held off meanwhile.
func (l *LaneNamespaces) Each(f func(ns string)) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for _, ns := range slices.Sorted(maps.Keys(l.set)) {
		f(ns)
	}
}

// AtRandom is a fault that runs fault against one running lane drawn from rng (none running: no
// fault this time), with Leave held off until it returns.
func (l *LaneNamespaces) AtRandom(fault func(ns string) func(ctx context.Context, rng *rand.Rand) error) func(ctx context.Context, rng *rand.Rand) error {
	return func(ctx context.Context, rng *rand.Rand) error {
		l.mu.RLock()
		defer l.mu.RUnlock()
		lanes := slices.Sorted(maps.Keys(l.set))
		if len(lanes) == 0 {
			return nil
		}
		return fault(lanes[rng.Intn(len(lanes))])(ctx, rng)
	}
}
