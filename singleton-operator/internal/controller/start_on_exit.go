package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// Release on the predecessor's exit (docs/singleton.md, "Release on the predecessor's exit").
//
// While the last pod that may run (the predecessor) is being deleted and the candidate already runs,
// waiting for its grant, the controller releases the candidate on condition of the predecessor's exit:
// after the same live list and epoch reservation as a release, it writes AnnotationStartOnExit (the
// reserved epoch, the predecessor's UID and node) on the candidate. The grant server answers the
// candidate's long poll the moment it accepts the predecessor's exit report (every app process of that
// pod instance gone, reported by its own status-sidecar, the pod terminating), before any API write:
// the release, the reservation and the list all happened while the predecessor's app was stopping.
//
// From the conditional release on, the candidate counts as a pod that may run (stateConditional:
// blocking), so nothing else is released beside it, whatever happens next. The controller completes the
// release — the epoch and start-granted annotations, the readiness gate, status.activePod — once the API
// shows the predecessor's exit recorded, or the predecessor gone from a node that confirmed the stop
// (a node that is not Ready, or a force deletion there, waits for fencing as any release does). A
// report that never comes changes nothing: the candidate is then granted by that completion, on
// today's rule.

// startOnExitOf is the pod whose exit the candidate can be released on, or nil: the candidate is a
// Wrapper pod that runs and waits for its grant, and the only pod that blocks it is a released Wrapper
// pod being deleted on a known node, whose wrappers can report their exit (each app container its own
// PID namespace, the exit directory mounted).
func startOnExitOf(pods *classifiedPods) *corev1.Pod {
	cand := pods.candidate
	if cand == nil || len(pods.blocking) != 1 || !cand.DeletionTimestamp.IsZero() ||
		singletonv1.HoldMode(cand.Annotations[singletonv1.AnnotationHoldMode]) != singletonv1.HoldModeWrapper ||
		hasSchedulingGate(cand) || !startPrepared(cand) {
		return nil
	}
	pred := pods.blocking[0]
	if pred.DeletionTimestamp.IsZero() || classify(pred) != stateReleased || pred.Spec.NodeName == "" ||
		singletonv1.HoldMode(pred.Annotations[singletonv1.AnnotationHoldMode]) != singletonv1.HoldModeWrapper ||
		pred.Spec.ShareProcessNamespace != nil && *pred.Spec.ShareProcessNamespace ||
		!slices.ContainsFunc(pred.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == singletonv1.ExitVolumeName }) {
		return nil
	}
	return pred
}

// releaseOnExit releases the candidate on the exit of pred once the API server confirms that pred is
// the only pod that may run (the live list of reserveAndList). When the live list shows that nothing
// blocks any more (pred's exit report was accepted meanwhile), it releases outright.
func (r *Reconciler) releaseOnExit(ctx context.Context, s *scope, pred *corev1.Pod) error {
	cand := s.pods.candidate
	live, epoch, err := r.reserveAndList(ctx, s)
	if err != nil || live == nil {
		return err
	}
	if !live.confirmsCandidate(cand, epoch) {
		return nil // the cache is behind: the events that brought it up to date reconcile again
	}
	if len(live.blocking) == 0 {
		// Nothing blocks any more: pred's exit report was accepted meanwhile, or pred is gone. Gone is
		// no exit when it vanished from a node that never confirmed the stop (force-deleted from a
		// NotReady node after the cache showed it terminating): its process may still run there, so
		// the candidate waits for fencing as after any vanished pod (waitForFencing, from the next
		// reconcile on; the epoch reserved here is skipped).
		unfenced, err := r.vanishedUnfenced(ctx, live.all, pred.UID, pred.Spec.NodeName)
		if err != nil {
			return err
		}
		if unfenced {
			r.reportFencing(s, pred.Name, pred.Spec.NodeName, cand)
			return nil
		}
		return r.release(ctx, s, live.candidate, epoch)
	}
	if len(live.blocking) != 1 || live.blocking[0].UID != pred.UID || live.blocking[0].DeletionTimestamp.IsZero() {
		return nil
	}
	cond := singletonv1.StartOnExit{Epoch: epoch, PodUID: pred.UID, Node: pred.Spec.NodeName}
	patch, err := instancePatch(cand.UID, map[string]any{"annotations": map[string]string{singletonv1.AnnotationStartOnExit: cond.String()}})
	if err != nil {
		return err
	}
	patchStart := r.Clock.Now()
	patched := live.candidate.DeepCopy()
	if err := r.Client.Patch(ctx, patched, patch); err != nil {
		return client.IgnoreNotFound(err) // the epoch is skipped, never reused
	}
	if r.released != nil {
		r.released(patched) // the grant server now answers the candidate on pred's exit report
	}
	logf.FromContext(ctx).Info("Released pod on its predecessor's exit", "pod", cand.Name, "predecessor", pred.Name,
		"epoch", epoch, "liveList", s.timing.list.String(), "reserveEpoch", s.timing.reserve.String(),
		"patch", r.Clock.Now().Sub(patchStart).String())
	r.Recorder.Eventf(s.ss, cand, corev1.EventTypeNormal, singletonv1.ReasonPodTransition, "Release",
		"released pod %s with epoch %d on the exit of pod %s: it starts once every app process of pod %s has exited", cand.Name, epoch, pred.Name, pred.Name)
	// From now on the candidate is the pod whose disappearance needs fencing: it may be granted any
	// moment, and if it then vanished from a node that is not Ready its process could still run there.
	// The predecessor's node is in the annotation for the same check (settleStartOnExit).
	s.status.ActivePod, s.status.ActivePodUID, s.status.ActivePodNode = cand.Name, string(cand.UID), cand.Spec.NodeName
	reportStartOnExit(s, cand, pred, r.Clock.Now())
	return nil
}

// reportStartOnExit reports that pod starts on pred's exit (pred's grace-period progress as of now).
func reportStartOnExit(s *scope, pod, pred *corev1.Pod, now time.Time) {
	msg := fmt.Sprintf("pod %s starts the moment every app process of pod %s has exited (its status-sidecar reports it), or once pod %s is gone",
		pod.Name, pred.Name, pred.Name)
	if progress := terminationProgress([]*corev1.Pod{pred}); progress != nil {
		s.status.Handover = progress
		msg = withGraceProgress(s, msg, progress, now)
	}
	setCondition(s.status, s.ss, singletonv1.ConditionReady, metav1.ConditionFalse, singletonv1.ReasonWaitingForOldPod, msg)
	s.status.Message = msg
}

// settleStartOnExit follows a pod released on its predecessor's exit: it waits while the predecessor
// may run, waits for fencing when it vanished from a node that never confirmed its stop, and otherwise
// completes the release.
func (r *Reconciler) settleStartOnExit(ctx context.Context, s *scope) (reconcile.Result, error) {
	now := r.Clock.Now()
	pod := s.pods.conditional[0]
	if s.status.TransitionTimestamp == nil || s.status.Phase == singletonv1.PhaseRunning || s.status.Phase == "" {
		s.status.TransitionTimestamp = &metav1.Time{Time: now}
		s.status.Phase = singletonv1.PhaseTransitioning
	}
	cond, ok := singletonv1.PodStartOnExit(pod)
	if !ok {
		// Not the operator's writing (the pod-writes policy lets it write only what it parses): the pod
		// may still have been granted, so it blocks every other until it is deleted.
		msg := fmt.Sprintf("pod %s carries an unreadable %s annotation: it may run, so no other pod is released until it is deleted",
			pod.Name, singletonv1.AnnotationStartOnExit)
		setCondition(s.status, s.ss, singletonv1.ConditionReady, metav1.ConditionFalse, singletonv1.ReasonWaitingForOldPod, msg)
		s.status.Message = msg
		return reconcile.Result{}, nil
	}
	if pred := s.pods.blockingPod(cond.PodUID); pred != nil {
		reportStartOnExit(s, pod, pred, now)
		return r.checkDeadline(s, now), nil
	}
	unfenced, err := r.vanishedUnfenced(ctx, s.pods.all, cond.PodUID, cond.Node)
	if err != nil {
		return reconcile.Result{}, err
	}
	if unfenced {
		r.reportFencing(s, "of UID "+string(cond.PodUID), cond.Node, pod)
		return r.checkDeadline(s, now), nil
	}
	return r.completeStartOnExit(ctx, s, pod, cond)
}

// completeStartOnExit releases pod outright with the epoch reserved for its release on exit, once the
// API server confirms that nothing else may run and the record of every exit report it counted on is
// written (so the API never shows the release before the stop it follows).
func (r *Reconciler) completeStartOnExit(ctx context.Context, s *scope, pod *corev1.Pod, cond singletonv1.StartOnExit) (reconcile.Result, error) {
	start := r.Clock.Now()
	live, err := r.listPods(ctx, s.ss, true)
	if err != nil {
		return reconcile.Result{}, err
	}
	s.timing.list = r.Clock.Now().Sub(start)
	if len(live.blocking) != 1 || live.blocking[0].UID != pod.UID || classify(live.blocking[0]) != stateConditional {
		return reconcile.Result{RequeueAfter: time.Second}, nil // the cache is behind; look again
	}
	if slices.ContainsFunc(live.all, func(p *corev1.Pod) bool { return p.UID != pod.UID && podEpoch(p) >= cond.Epoch }) {
		return reconcile.Result{}, fmt.Errorf("pod %s was released on exit with epoch %d, but another pod carries that epoch or a later one: not completing the release", pod.Name, cond.Epoch)
	}
	recordStart := r.Clock.Now()
	if err := r.exitsRecorded(ctx, live); err != nil {
		return reconcile.Result{}, err
	}
	s.timing.exitRecord = r.Clock.Now().Sub(recordStart)
	return reconcile.Result{}, r.release(ctx, s, live.blocking[0], cond.Epoch)
}
