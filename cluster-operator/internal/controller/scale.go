package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
)

// Scaling. Parallel (the default) creates every missing pod at once, in slow-start batches (1, 2, 4,
// ...) so that a systematic failure (quota, admission) costs one call, not hundreds; OrderedReady
// creates one pod at a time and only when every live pod is Ready, and deletes one at a time.
// Scale-down retires, in order: pods already terminating, not Ready, Pending, of an old revision, and
// then the newest identities.

// scale creates or retires pods so that replicas (plus the update's surge) are live.
func (r *Reconciler) scale(ctx context.Context, s *scope) error {
	live := s.liveMembers()
	target := int(ptr.Deref(s.sc.Spec.Replicas, 0)) + s.surge()
	switch {
	case len(live) < target:
		return s.scaleUp(ctx, live, target-len(live))
	case len(live) > target:
		s.scaleDown(ctx, live, len(live)-target)
	}
	return nil
}

func (s *scope) ordered() bool {
	return s.sc.Spec.PodManagementPolicy == clusterv1alpha1.OrderedReadyPodManagement
}

func (s *scope) scaleUp(ctx context.Context, live []*member, missing int) error {
	if s.holdCreates {
		s.progress = clusterv1alpha1.ReasonReplacing
		return nil // a retire hook must succeed first
	}
	if msg, refused := s.r.mem.refusedAt(s.key, s.sc.Generation); refused {
		s.refused = msg
		return nil // the API server refuses these pods: only a spec change helps
	}
	if s.ordered() {
		for _, m := range s.pods {
			if m.terminating || (m.live && !m.ready) {
				return nil // OrderedReady: the next pod waits until every live pod is Ready
			}
		}
		missing = 1
	}
	s.progress = clusterv1alpha1.ReasonScalingUp
	if s.retiring > 0 {
		s.progress = clusterv1alpha1.ReasonReplacing
	}
	known := map[string]bool{}
	var traces []string
	for _, m := range s.pods {
		known[m.name] = true
		traces = append(traces, m.name)
	}
	for _, c := range s.claims {
		if id := c.Labels[clusterv1alpha1.IdentityLabel]; id != "" {
			known[id] = true
			traces = append(traces, id)
		}
	}
	for _, rec := range s.sc.Status.Identities {
		known[rec.Name] = true
	}
	names, _ := allocate(s.sc, missing, known, traces)
	updated := s.countUpdated()
	revisions := make([]string, len(names))
	for i := range names {
		revisions[i] = s.newPodRevision(updated)
		if revisions[i] == s.revs.update.Name {
			updated++
		}
	}
	zones := make([]string, len(names))
	if planner := s.newZonePlanner(); planner != nil {
		for i := range names {
			zones[i] = planner.next()
		}
	}
	created, err := s.createPods(ctx, names, revisions, zones)
	if err != nil {
		return err
	}
	s.scaledUp = created
	if created > 0 {
		s.r.Recorder.Eventf(s.sc, nil, corev1.EventTypeNormal, clusterv1alpha1.EventSuccessfulCreate, "Create",
			"Created %d pod(s) of new identities, %s..%s", created, names[0], names[created-1])
	}
	return nil
}

// createPods creates the pods in slow-start batches and stops at the first batch with a failure.
// It returns how many were created.
func (s *scope) createPods(ctx context.Context, names, revisions, zones []string) (int, error) {
	created := 0
	for batch := 1; created < len(names); batch *= 2 {
		n := min(batch, len(names)-created)
		if err := s.reserve(ctx, names[created:created+n]); err != nil {
			return created, err
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		failed := 0
		for i := created; i < created+n; i++ {
			wg.Go(func() {
				if err := s.createPod(ctx, names[i], revisions[i], zones[i]); err != nil {
					mu.Lock()
					failed++
					if apierrors.IsInvalid(err) {
						s.refuse(err)
					} else {
						s.fail("creating pod %s: %v", names[i], err)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		created += n - failed
		if failed > 0 {
			break
		}
	}
	return created, nil
}

// reserve writes the high-water mark past the names about to be used, under the resourceVersion
// precondition, before any pod of them exists (write-ahead). If the cached object was stale the write
// conflicts and the reconcile starts again, so names are only ever handed out from the latest mark.
// Reserving per batch means a failing batch burns few ordinals.
func (s *scope) reserve(ctx context.Context, names []string) error {
	next := s.sc.Status.NextIdentity
	for _, name := range names {
		if n, ok := ordinalOf(s.sc.Name, name); ok && n >= next {
			next = n + 1
		}
	}
	s.sc.Status.NextIdentity = next
	start := s.r.Clock.Now()
	defer func() { s.reserveTook = s.r.Clock.Since(start) }()
	// A random name has no mark, but the write still proves the object (and its ledger) was current.
	if err := s.patchStatus(ctx, s.sc.Spec.IdentityFormat == clusterv1alpha1.RandomIdentityFormat); err != nil {
		if apierrors.IsConflict(err) {
			return errConflict
		}
		return fmt.Errorf("recording the next identity: %w", err)
	}
	return nil
}

// createPod creates one identity's pod, then its claims (claims are only made for a pod that exists,
// so a pod that cannot be created leaves no claim behind; the scheduler waits for the claims).
func (s *scope) createPod(ctx context.Context, name, revision, zone string) error {
	if !s.runJoinHook(ctx, name) {
		return fmt.Errorf("join hook for %s failed", name)
	}
	pod := buildPod(s.sc, s.revs.template(revision), revision, name)
	if zone != "" {
		key := s.sc.Spec.ZoneSpread.TopologyKey
		if key == "" {
			key = corev1.LabelTopologyZone
		}
		pinToZone(pod, key, zone)
	}
	createStart := s.r.Clock.Now()
	if err := s.r.Client.Create(ctx, pod); err != nil {
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return err // the namespace is going away with everything in it: no Event, nothing to fix
		}
		if !apierrors.IsAlreadyExists(err) {
			createFailures.WithLabelValues(s.sc.Namespace, s.sc.Name).Inc()
			s.r.Recorder.Eventf(s.sc, nil, corev1.EventTypeWarning, clusterv1alpha1.ReasonCreateFailed, "Create",
				"Failed to create pod %s: %v", name, err)
			return err
		}
		// Only possible when a stale read handed out a name again; the high-water mark's precondition
		// prevents that, so this pod is not ours to claim: fail loudly.
		return fmt.Errorf("pod %s already exists", name)
	}
	s.r.mem.expectCreated(s.key, name, revision, s.now)
	podsCreated.WithLabelValues(s.sc.Namespace, s.sc.Name).Inc()
	if since, ok := s.r.mem.popLost(s.key); ok {
		took := s.r.Clock.Since(since)
		replacementLatency.WithLabelValues(s.sc.Namespace, s.sc.Name).Observe(took.Seconds())
		// Where a replacement's time went (issue 21: 4 × the StatefulSet's): queued (the loss seen →
		// this reconcile began), the identity's reservation (the high-water mark's write), the pod's
		// creation; the rest is the reconcile's own work before them.
		ctrl.LoggerFrom(ctx).Info("Replaced a lost pod", "pod", name, "sinceLost", took.String(),
			"queued", s.now.Sub(since).String(), "reserve", s.reserveTook.String(),
			"create", s.r.Clock.Since(createStart).String())
	}
	for _, ct := range s.sc.Spec.VolumeClaimTemplates {
		if err := s.createClaim(ctx, name, ct); err != nil {
			return err
		}
	}
	return nil
}

// scaleDown retires `excess` live pods, in victim order.
func (s *scope) scaleDown(ctx context.Context, live []*member, excess int) {
	s.progress = clusterv1alpha1.ReasonScalingDown
	if s.ordered() {
		for _, m := range s.pods {
			if m.terminating {
				return // OrderedReady: one at a time
			}
		}
		excess = 1
	}
	rank := func(m *member) int {
		switch {
		case m.terminating:
			return 0
		case m.pod == nil:
			return 5 // created, not yet seen: never a victim
		case m.pod.Spec.NodeName == "" || m.pod.Status.Phase == corev1.PodPending || m.pod.Status.Phase == "":
			return 2
		case !m.ready:
			return 1
		case m.revision != s.revs.update.Name:
			return 3
		}
		return 4
	}
	victims := slices.Clone(live)
	slices.SortStableFunc(victims, func(a, b *member) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		if a.ordinal != b.ordinal {
			return int(b.ordinal - a.ordinal)
		}
		return podCreated(b).Compare(podCreated(a))
	})
	for _, m := range victims[:excess] {
		if m.terminating || m.pod == nil {
			continue
		}
		if err := s.deletePod(ctx, m, clusterv1alpha1.RetiredScaledDown, "scaled down"); err != nil {
			s.fail("scaling down pod %s: %v", m.name, err)
		}
	}
}
