package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// transition handles a held candidate: it starts the transition, hands over from blocking pods, waits for
// fencing, and otherwise releases the candidate; while it waits, the deadline is checked.
func (r *Reconciler) transition(ctx context.Context, s *scope) (reconcile.Result, error) {
	now := r.Clock.Now()
	r.startTransition(s, now)
	if len(s.pods.blocking) > 0 {
		if err := r.handover(ctx, s); err != nil {
			return reconcile.Result{}, err
		}
		if pred := startOnExitOf(s.pods); pred != nil {
			if err := r.releaseOnExit(ctx, s, pred); err != nil {
				return reconcile.Result{}, err
			}
		}
		return r.checkDeadline(s, now), nil
	}
	fenced, err := r.waitForFencing(ctx, s)
	if err != nil {
		return reconcile.Result{}, err
	}
	if fenced {
		return r.checkDeadline(s, now), nil
	}
	return r.releaseCandidate(ctx, s)
}

// startTransition records the start of a transition (phase Transitioning, Event) unless one is under way.
func (r *Reconciler) startTransition(s *scope, now time.Time) {
	status, pods := s.status, s.pods
	if status.Phase != singletonv1.PhaseRunning && status.Phase != "" && status.TransitionTimestamp != nil {
		return
	}
	status.TransitionTimestamp = &metav1.Time{Time: now}
	status.Phase = singletonv1.PhaseTransitioning
	from := "none"
	if len(pods.blocking) > 0 {
		from = pods.blocking[0].Name
	}
	r.Recorder.Eventf(s.ss, pods.candidate, corev1.EventTypeNormal, singletonv1.ReasonPodTransition, "Hold",
		"transition from pod %s to pod %s started", from, pods.candidate.Name)
}

// handover holds the candidate while pods block it. RollingUpdate handover: it deletes blocking pods of an
// older revision than the candidate — in Wrapper mode only once the candidate runs (its containers
// started, the wrapper waiting for the grant), so the old process is stopped when the new one can start
// at once, not while the new pod is still being created; and a new pod that cannot start never stops the
// old one.
func (r *Reconciler) handover(ctx context.Context, s *scope) error {
	pods := s.pods
	candRank := r.rank(ctx, pods.candidate)
	prepared := startPrepared(pods.candidate)
	msg := fmt.Sprintf("pod %s is held until pods %s are gone", pods.candidate.Name, podNames(pods.blocking))
	for _, pod := range pods.blocking {
		if !pod.DeletionTimestamp.IsZero() || r.rank(ctx, pod) >= candRank {
			continue
		}
		if !prepared {
			msg = fmt.Sprintf("pod %s of a newer revision is held and starting; pod %s will be stopped once it runs and waits for its grant", pods.candidate.Name, pod.Name)
			continue
		}
		if err := r.deletePod(ctx, pod); err != nil {
			return err
		}
		r.Recorder.Eventf(s.ss, pod, corev1.EventTypeNormal, singletonv1.ReasonPodTransition, "Handover",
			"deleted pod %s of an older revision so that held pod %s can start", pod.Name, pods.candidate.Name)
	}
	if progress := terminationProgress(pods.blocking); progress != nil {
		s.status.Handover = progress
		msg = withGraceProgress(s, msg, progress, r.Clock.Now())
	}
	setCondition(s.status, s.ss, singletonv1.ConditionReady, metav1.ConditionFalse, singletonv1.ReasonWaitingForOldPod, msg)
	s.status.Message = msg
	return nil
}

// terminationProgress is the grace-period progress of the first terminating pod of blocking, nil when
// none terminates: its deletion was requested at deletionTimestamp − deletionGracePeriodSeconds (the
// deletionTimestamp is when the grace period ends, not when the deletion was asked for).
func terminationProgress(blocking []*corev1.Pod) *singletonv1.HandoverStatus {
	for _, pod := range blocking {
		if pod.DeletionTimestamp.IsZero() {
			continue
		}
		var grace int64
		if pod.DeletionGracePeriodSeconds != nil {
			grace = *pod.DeletionGracePeriodSeconds
		}
		return &singletonv1.HandoverStatus{
			WaitingFor: pod.Name, WaitingForUID: string(pod.UID), GracePeriodSeconds: grace,
			TerminatingSince: metav1.Time{Time: pod.DeletionTimestamp.Add(-time.Duration(grace) * time.Second)},
		}
	}
	return nil
}

// graceEcho is how long after a status write the elapsed time in the message stays as that write
// reported it. The elapsed time is measured only in reconciles that run anyway (pod events, the
// transition deadline): nothing is requeued to refresh it, so at rest, and between events, the status
// is not rewritten. But every status write queues a reconcile of its own, which would measure a later
// elapsed time, write again and queue another: within graceEcho of a write, that reconcile keeps it.
const graceEcho = 5 * time.Second

// withGraceProgress appends to msg the grace-period progress of the pod a handover waits for, as of now:
// "pod old terminating since <start> with a 30s grace period: elapsed 10s, 20s left". When the status
// read was written less than graceEcho ago with the same message up to the elapsed time (the same pod,
// start and grace period), that write's elapsed time is kept.
func withGraceProgress(s *scope, msg string, p *singletonv1.HandoverStatus, now time.Time) string {
	msg += fmt.Sprintf("; pod %s terminating since %s with a %ds grace period", p.WaitingFor,
		p.TerminatingSince.UTC().Format(time.RFC3339), p.GracePeriodSeconds)
	if prev := s.ss.Status; prev.StatusTimestamp != nil && now.Sub(prev.StatusTimestamp.Time) < graceEcho {
		// The elapsed time ends the message, also where checkDeadline or reconcileDelete put it after
		// their own words.
		if i := strings.LastIndex(prev.Message, msg+": elapsed "); i >= 0 {
			return prev.Message[i:]
		}
	}
	return msg + ": " + graceElapsed(p, now)
}

// graceElapsed is how far the grace period has run at now, in whole seconds: elapsed = now −
// terminatingSince (= now − (deletionTimestamp − deletionGracePeriodSeconds)), and what is left of it.
func graceElapsed(p *singletonv1.HandoverStatus, now time.Time) string {
	// Never negative: the operator's clock may be behind the API server's, which set deletionTimestamp.
	elapsed := max(now.Sub(p.TerminatingSince.Time), 0).Truncate(time.Second)
	if left := time.Duration(p.GracePeriodSeconds)*time.Second - elapsed; left > 0 {
		return fmt.Sprintf("elapsed %s, %s left", elapsed, left)
	}
	return fmt.Sprintf("elapsed %s, the grace period is over: waiting for the kubelet to confirm the stop", elapsed)
}

// waitForFencing reports whether the candidate waits for fencing: the last active pod vanished from a
// node that never confirmed the stop (not Ready, and not tainted out-of-service).
func (r *Reconciler) waitForFencing(ctx context.Context, s *scope) (bool, error) {
	status, pods := s.status, s.pods
	if status.ActivePodUID == "" {
		return false, nil
	}
	unfenced, err := r.vanishedUnfenced(ctx, pods.all, types.UID(status.ActivePodUID), status.ActivePodNode)
	if !unfenced || err != nil {
		return false, err
	}
	r.reportFencing(s, status.ActivePod, status.ActivePodNode, pods.candidate)
	return true, nil
}

// vanishedUnfenced reports whether the pod of that UID, last seen on node, is not among pods and node
// never confirmed its stop (nodeFencedByName): its process may still run there. Every release after a
// pod that may have run asks it: the last active pod (waitForFencing, reconcileActive) and the
// predecessor of a release on exit (releaseOnExit, settleStartOnExit).
func (r *Reconciler) vanishedUnfenced(ctx context.Context, pods []*corev1.Pod, uid types.UID, node string) (bool, error) {
	if slices.ContainsFunc(pods, func(p *corev1.Pod) bool { return p.UID == uid }) {
		return false, nil
	}
	fenced, err := r.nodeFencedByName(ctx, node)
	return err == nil && !fenced, err
}

// reportFencing reports that pod held waits because pod vanished from node, which never confirmed its
// stop.
func (r *Reconciler) reportFencing(s *scope, vanished, node string, held *corev1.Pod) {
	ss, status := s.ss, s.status
	msg := fmt.Sprintf("pod %s vanished from node %s, which is not Ready: its stop was never confirmed; pod %s is held until the node is Ready again or tainted %s",
		vanished, node, held.Name, corev1.TaintNodeOutOfService)
	if !meta.IsStatusConditionTrue(status.Conditions, singletonv1.ConditionFencingRequired) {
		r.Recorder.Eventf(ss, held, corev1.EventTypeWarning, singletonv1.ConditionFencingRequired, "Hold", msg)
	}
	setCondition(status, ss, singletonv1.ConditionFencingRequired, metav1.ConditionTrue, singletonv1.ReasonNodeNotReady, msg)
	setCondition(status, ss, singletonv1.ConditionReady, metav1.ConditionFalse, singletonv1.ReasonNodeNotReady, msg)
	status.Message = msg
}

// nodeFencedByName is nodeFenced for the node of that name (an unknown name, or a node that is gone,
// counts as fenced as in nodeFenced). A node the cache shows not fenced holds the release at once. A
// node it shows fenced is read again from the API server before that answer lets a release through:
// the node's watch and the pods' are separate streams, so the cache can show a pod gone from a node
// before it shows that node NotReady, though the API server had it NotReady first (a pod
// force-deleted just after its node went NotReady). The read costs one GET on the way to a release
// that follows a vanished pod, which the live list and the epoch reservation follow anyway.
func (r *Reconciler) nodeFencedByName(ctx context.Context, name string) (bool, error) {
	if name == "" {
		return true, nil
	}
	for _, reader := range []client.Reader{r.Cache, r.APIReader} {
		node := &corev1.Node{}
		err := reader.Get(ctx, client.ObjectKey{Name: name}, node)
		if apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return false, err
		}
		if !nodeFenced(node) {
			return false, nil
		}
	}
	return true, nil
}

// releaseCandidate releases the candidate once the API server confirms that nothing else may run
// (reserveAndList); when the cache was behind, it looks again.
func (r *Reconciler) releaseCandidate(ctx context.Context, s *scope) (reconcile.Result, error) {
	live, epoch, err := r.reserveAndList(ctx, s)
	if err != nil || live == nil {
		return reconcile.Result{}, err
	}
	if len(live.blocking) > 0 || !live.confirmsCandidate(s.pods.candidate, epoch) {
		return reconcile.Result{RequeueAfter: time.Second}, nil // the cache is behind; look again (the epoch is skipped)
	}
	return reconcile.Result{}, r.release(ctx, s, live.candidate, epoch)
}

// confirmsCandidate reports whether these pods (a live list) have cand as their candidate and none
// carries the epoch reserved for cand's release, or a later one.
func (p *classifiedPods) confirmsCandidate(cand *corev1.Pod, epoch int64) bool {
	return p.candidate != nil && p.candidate.UID == cand.UID &&
		!slices.ContainsFunc(p.all, func(pod *corev1.Pod) bool { return podEpoch(pod) >= epoch })
}

// reserveAndList confirms with the API server, not the cache, what may run, and meanwhile reserves the
// next epoch in status (optimistic lock) before any pod carries it. The reservation does not depend on
// the list's answer: an epoch reserved for a release (or adoption) the list then refuses is skipped,
// never reused. So the two round trips overlap instead of adding up on the handover's critical path.
// It returns the live pods and the reserved epoch, or nil pods when the reservation conflicted (the
// newer StatefulSingleton's event reconciles again; nothing was released).
func (r *Reconciler) reserveAndList(ctx context.Context, s *scope) (*classifiedPods, int64, error) {
	ss, status := s.ss, s.status
	epoch := status.Epoch + 1 // status.Epoch is already at least the epoch of every cached pod
	type listed struct {
		pods *classifiedPods
		err  error
		took time.Duration
	}
	done := make(chan listed, 1)
	go func() {
		start := r.Clock.Now()
		lv, err := r.listPods(ctx, ss, true)
		done <- listed{lv, err, r.Clock.Now().Sub(start)}
	}()
	reserveStart := r.Clock.Now()
	reserve := ss.DeepCopy()
	reserve.Status.Epoch = epoch
	// Always a write (epoch is above ss.Status.Epoch), and under the optimistic lock: it fails when
	// another reconcile reserved meanwhile, so no epoch is ever handed out twice.
	_, reserveErr := opsutil.PatchStatus(ctx, r.Client, reserve, ss, opsutil.WithOptimisticLock())
	reserveTook := r.Clock.Now().Sub(reserveStart)
	l := <-done
	if reserveErr != nil {
		return nil, 0, ignoreConflict(reserveErr)
	}
	ss.ResourceVersion = reserve.ResourceVersion
	status.Epoch = epoch // the status written at the end of this reconcile keeps the reservation
	if l.err != nil {
		return nil, 0, l.err
	}
	s.timing.list, s.timing.reserve = l.took, reserveTook
	recordStart := r.Clock.Now()
	if err := r.exitsRecorded(ctx, l.pods); err != nil {
		return nil, 0, err
	}
	s.timing.exitRecord = r.Clock.Now().Sub(recordStart)
	return l.pods, epoch, nil
}

// exitRecordWait bounds the wait for an accepted exit report's annotation: one API write.
const exitRecordWait = 10 * time.Second

// exitsRecorded waits until the annotation of every exit report that pods counted on before the API
// showed it (exitsAccepted) is written, so that a release never precedes the record of the stop it
// follows. It fails when a record's write failed: the pod blocks again, and nothing is released.
func (r *Reconciler) exitsRecorded(ctx context.Context, pods *classifiedPods) error {
	if len(pods.exitsAccepted) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, exitRecordWait)
	defer cancel()
	for _, uid := range pods.exitsAccepted {
		if err := r.exits.Recorded(ctx, uid); err != nil {
			return fmt.Errorf("the exit report of pod UID %s was accepted but not recorded, so no pod is released on it: %w", uid, err)
		}
	}
	return nil
}

// release releases the pod with the epoch reserved in status, in one patch. If the patch fails the
// epoch is skipped, never reused.
func (r *Reconciler) release(ctx context.Context, s *scope, pod *corev1.Pod, epoch int64) error {
	released, patch, err := releasePatch(pod, epoch)
	if err != nil {
		return err
	}
	patchStart := r.Clock.Now()
	if err := r.Client.Patch(ctx, released, patch); err != nil {
		s.status.Epoch = epoch
		return err
	}
	r.recordRelease(ctx, s, pod, epoch, patchStart)
	if r.released != nil {
		r.released(released) // a Wrapper pod's long poll is answered now, not on the patch's watch event
	}
	s.released = true
	s.status.Epoch = epoch
	recordActive(s, pod, "pod "+pod.Name+" is active")
	r.Recorder.Eventf(s.ss, pod, corev1.EventTypeNormal, singletonv1.ReasonPodStarted, "Release", "released pod %s with epoch %d", pod.Name, epoch)
	return r.markReady(ctx, released)
}

// releasePatch is the pod as released with epoch, and the patch that releases it.
func releasePatch(pod *corev1.Pod, epoch int64) (*corev1.Pod, client.Patch, error) {
	// A gated pod is patched under an optimistic lock (its gate list is rewritten, and nothing else
	// writes it while it is gated). A Wrapper pod runs: its kubelet updates its status all the time, so
	// a resourceVersion lock would fail most releases and cost a retry with a fresh epoch each; the patch
	// only adds annotations and carries the pod's UID, so it can only ever release this pod instance (a
	// pod recreated under the same name has another UID, which the API server refuses to change).
	patch := client.MergeFromWithOptions(pod.DeepCopy(), client.MergeFromWithOptimisticLock{})
	released := pod.DeepCopy()
	if released.Annotations == nil {
		released.Annotations = map[string]string{}
	}
	value := strconv.FormatInt(epoch, 10)
	released.Annotations[singletonv1.AnnotationEpoch] = value
	if hasSchedulingGate(released) {
		released.Spec.SchedulingGates = slices.DeleteFunc(released.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
			return g.Name == singletonv1.SchedulingGate
		})
		return released, patch, nil
	}
	released.Annotations[singletonv1.AnnotationStartGranted] = value
	patch, err := instancePatch(pod.UID, map[string]any{"annotations": map[string]string{
		singletonv1.AnnotationEpoch: value, singletonv1.AnnotationStartGranted: value}})
	return released, patch, err
}

// instancePatch is a merge patch of the pod's metadata that carries the pod's UID: it can only ever
// change that pod instance (a pod recreated under the same name has another UID, which the API server
// refuses to change).
func instancePatch(uid types.UID, metadata map[string]any) (client.Patch, error) {
	metadata["uid"] = uid
	raw, err := json.Marshal(map[string]any{"metadata": metadata})
	if err != nil {
		return nil, err
	}
	return client.RawPatch(types.MergePatchType, raw), nil
}

// recordRelease records a release that was patched: the transitions and handover metrics, the
// handover's duration in status, and where its time went in the log line.
func (r *Reconciler) recordRelease(ctx context.Context, s *scope, pod *corev1.Pod, epoch int64, patchStart time.Time) {
	now := r.Clock.Now()
	transitions.Inc()
	r.mu.Lock()
	gone, ok := r.goneAt[client.ObjectKeyFromObject(s.ss)]
	r.mu.Unlock()
	sinceGone := time.Duration(-1) // unknown: no pod of the singleton went away during this transition
	if ok && s.status.TransitionTimestamp != nil && !gone.Before(s.status.TransitionTimestamp.Time) {
		sinceGone = now.Sub(gone)
		handoverSeconds.Observe(sinceGone.Seconds())
		s.status.LastTransitionDuration = &metav1.Duration{Duration: sinceGone}
	}
	// Where the handover's time went: queued (old pod gone → this reconcile began), the live list and
	// the epoch reservation (concurrent), the wait for an exit report's record, the release patch.
	queued := time.Duration(-1)
	if sinceGone >= 0 {
		queued = s.timing.began.Sub(gone)
	}
	logf.FromContext(ctx).Info("Released pod", "pod", pod.Name, "epoch", epoch, "sinceOldPodGone", sinceGone.String(),
		"queued", queued.String(), "liveList", s.timing.list.String(), "reserveEpoch", s.timing.reserve.String(),
		"exitRecordWait", s.timing.exitRecord.String(), "releasePatch", now.Sub(patchStart).String())
}

// checkDeadline reports a transition older than maxTransitionTime and asks to be called at the deadline.
func (r *Reconciler) checkDeadline(s *scope, now time.Time) reconcile.Result {
	ss, status := s.ss, s.status
	deadline := status.TransitionTimestamp.Add(time.Duration(ss.Spec.MaxTransitionTime) * time.Second)
	if ss.Spec.MaxTransitionTime <= 0 || now.Before(deadline) {
		return reconcile.Result{RequeueAfter: deadline.Sub(now)}
	}
	msg := fmt.Sprintf("transition exceeded maxTransitionTime (%ds); the new pod stays held: %s", ss.Spec.MaxTransitionTime, status.Message)
	if status.Phase != singletonv1.PhaseFailed {
		r.Recorder.Eventf(ss, nil, corev1.EventTypeWarning, singletonv1.ReasonTransitionTimeout, "Hold", msg)
	}
	status.Phase = singletonv1.PhaseFailed
	status.Message = msg
	setCondition(status, ss, singletonv1.ConditionTransitionTimedOut, metav1.ConditionTrue, singletonv1.ReasonTransitionTimeout, msg)
	setCondition(status, ss, singletonv1.ConditionReady, metav1.ConditionFalse, singletonv1.ReasonTransitionTimeout, msg)
	return reconcile.Result{}
}

// markReady sets the pod's readiness gate condition to True once it is released.
func (r *Reconciler) markReady(ctx context.Context, pod *corev1.Pod) error {
	if readinessGateTrue(pod) || !pod.DeletionTimestamp.IsZero() {
		return nil
	}
	patch := client.MergeFrom(pod.DeepCopy())
	ready := pod.DeepCopy()
	cond := corev1.PodCondition{Type: singletonv1.ReadinessGate, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now(), Reason: "Released"}
	i := slices.IndexFunc(ready.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == singletonv1.ReadinessGate })
	if i >= 0 {
		ready.Status.Conditions[i] = cond
	} else {
		ready.Status.Conditions = append(ready.Status.Conditions, cond)
	}
	return client.IgnoreNotFound(r.Client.Status().Patch(ctx, ready, patch))
}

// deletePod deletes the pod gracefully, only if it is still the pod that was observed.
func (r *Reconciler) deletePod(ctx context.Context, pod *corev1.Pod) error {
	return client.IgnoreNotFound(r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}))
}
