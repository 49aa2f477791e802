package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// The passes in a row that let a step move the partition are counted in memory, per process, not
// read back from the status. The status's counters only report them: a status write that records a
// failing check can be lost (an API error, a cancelled or killed reconcile), and a count read back
// from the status would then carry on a streak this process saw broken (pass, FAIL, pass moving the
// partition at successThreshold=2). A restarted or new leader starts with no streak: every step
// re-earns successThreshold fresh passes.

// streakKey names the streak of one check of one PhasedRollout ("check" for the seed path).
type streakKey struct {
	uid   types.UID
	check string
}

// streak is the passes in a row of one check, valid only for the step it was counted in.
type streak struct {
	updateRevision string
	partition      int32
	pod            string
	passes         int32
	lastCheck      time.Time
}

// streaks are the Reconciler's in-memory streaks. The zero value is ready to use.
type streaks struct {
	mu sync.Mutex
	m  map[streakKey]streak
}

// streakStep is the step a streak belongs to: a streak of another step counts nothing.
func streakStep(pr *rolloutv1alpha1.PhasedRollout) streak {
	st := pr.Status.RollingPodStatus
	return streak{updateRevision: pr.Status.UpdateRevision, partition: *st.Partition, pod: st.Pod}
}

func sameStep(a, b streak) bool {
	return a.updateRevision == b.updateRevision && a.partition == b.partition && a.pod == b.pod
}

// record counts one answer of check in the current step of pr and returns the passes in a row this
// process saw: +1 on a pass of the same step, 0 on anything else.
func (ss *streaks) record(pr *rolloutv1alpha1.PhasedRollout, check string, pass bool, at time.Time) int32 {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.m == nil {
		ss.m = map[streakKey]streak{}
	}
	k, cur := streakKey{pr.UID, check}, streakStep(pr)
	old, ok := ss.m[k]
	if ok && sameStep(old, cur) && pass {
		cur.passes = old.passes + 1
	} else if pass {
		cur.passes = 1
	}
	cur.lastCheck = at
	ss.m[k] = cur
	return cur.passes
}

// get returns the streak of check in the current step of pr (zero when there is none).
func (ss *streaks) get(pr *rolloutv1alpha1.PhasedRollout, check string) streak {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if old, ok := ss.m[streakKey{pr.UID, check}]; ok && sameStep(old, streakStep(pr)) {
		return old
	}
	return streak{}
}

// drop forgets every streak of pr: its step starts anew or its analysis is reset.
func (ss *streaks) drop(uid types.UID) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for k := range ss.m {
		if k.uid == uid {
			delete(ss.m, k)
		}
	}
}
