package controller

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
)

// Updates. Pods are never updated in place: an updated pod is a new identity of the update revision,
// and the old one is retired with reason Updated. RollingUpdate replaces pods of old revisions newest
// first, keeping at least replicas-maxUnavailable pods available and at most replicas+maxSurge live;
// partition keeps that many pods (the oldest identities, since the newest go first) on the current
// revision. OnDelete replaces nothing: a pod someone deletes comes back as the update revision.

// updateBounds resolves maxUnavailable and maxSurge against replicas (percentages rounded up).
func updateBounds(sc *clusterv1alpha1.StatefulCluster) (maxUnavailable, maxSurge, partition int) {
	replicas := int(ptr.Deref(sc.Spec.Replicas, 0))
	maxUnavailable = 1
	ru := sc.Spec.UpdateStrategy.RollingUpdate
	if ru == nil {
		return maxUnavailable, 0, 0
	}
	if ru.MaxUnavailable != nil {
		if v, err := intstr.GetScaledValueFromIntOrPercent(ru.MaxUnavailable, replicas, true); err == nil {
			maxUnavailable = v
		}
	}
	if ru.MaxSurge != nil {
		if v, err := intstr.GetScaledValueFromIntOrPercent(ru.MaxSurge, replicas, true); err == nil {
			maxSurge = v
		}
	}
	if maxUnavailable == 0 && maxSurge == 0 {
		maxUnavailable = 1 // CEL forbids both 0; a percentage of few replicas can still round to it
	}
	return maxUnavailable, maxSurge, int(ptr.Deref(ru.Partition, 0))
}

// wantUpdated is how many live pods should be of the update revision.
func (s *scope) wantUpdated() int {
	replicas := int(ptr.Deref(s.sc.Spec.Replicas, 0))
	if s.sc.Spec.UpdateStrategy.Type == clusterv1alpha1.OnDeleteStrategyType {
		return replicas
	}
	_, _, partition := updateBounds(s.sc)
	return max(replicas-partition, 0)
}

// newPodRevision is the revision a new pod gets: the update revision, unless a partition says that
// enough pods are of it already.
func (s *scope) newPodRevision(updatedSoFar int) string {
	if s.sc.Spec.UpdateStrategy.Type == clusterv1alpha1.OnDeleteStrategyType || updatedSoFar < s.wantUpdated() {
		return s.revs.update.Name
	}
	return s.revs.current.Name
}

func (s *scope) countUpdated() int {
	n := 0
	for _, m := range s.liveMembers() {
		if m.revision == s.revs.update.Name {
			n++
		}
	}
	return n
}

// rollingUpdate retires pods of old revisions within the bounds.
func (r *Reconciler) rollingUpdate(ctx context.Context, s *scope) {
	if s.sc.Spec.UpdateStrategy.Type == clusterv1alpha1.OnDeleteStrategyType {
		return
	}
	live := s.liveMembers()
	var old []*member
	for _, m := range live {
		if m.pod != nil && !m.terminating && m.revision != s.revs.update.Name {
			old = append(old, m)
		}
	}
	// The partition keeps replicas-wantUpdated old pods; every other old pod is to be replaced. This
	// does not depend on how many updated pods exist, so a surge pod does not end the update early.
	keepOld := int(ptr.Deref(s.sc.Spec.Replicas, 0)) - s.wantUpdated()
	s.toUpdate = max(len(old)-keepOld, 0)
	if s.toUpdate == 0 {
		return
	}
	s.updateRun = true
	replicas := int(ptr.Deref(s.sc.Spec.Replicas, 0))
	maxUnavailable, _, _ := updateBounds(s.sc)
	availableNow := 0
	for _, m := range live {
		if m.available {
			availableNow++
		}
	}
	// Newest identities first; unavailable ones first of all, since retiring them costs nothing.
	slices.SortStableFunc(old, func(a, b *member) int {
		if a.available != b.available {
			if a.available {
				return 1
			}
			return -1
		}
		return int(b.ordinal - a.ordinal)
	})
	budget := s.toUpdate
	for _, m := range old {
		if budget == 0 {
			break
		}
		if m.available && availableNow-1 < replicas-maxUnavailable {
			break
		}
		if err := s.deletePod(ctx, m, clusterv1alpha1.RetiredUpdated, "replaced by revision "+s.revs.update.Name); err != nil {
			s.fail("updating pod %s: %v", m.name, err)
			continue
		}
		if m.available {
			availableNow--
		}
		budget--
	}
}

// surge is how many pods above replicas the update may run now.
func (s *scope) surge() int {
	if !s.updateRun {
		return 0
	}
	_, maxSurge, _ := updateBounds(s.sc)
	return min(maxSurge, s.toUpdate)
}
