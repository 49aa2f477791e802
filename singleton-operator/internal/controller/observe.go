package controller

import (
	"context"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// revisionAnnotation is the Deployment controller's revision number on a ReplicaSet.
const revisionAnnotation = "deployment.kubernetes.io/revision"

// classifiedPods is a list of the singleton's pods sorted by what each may do (package documentation):
// from the caches (scope.pods) or, right before a release or adoption, from the API server
// (reserveAndList). It is not per-reconcile state: one reconcile may list twice.
type classifiedPods struct {
	all       []*corev1.Pod // the singleton's pods, by name
	held      []*corev1.Pod // held pods, the candidate first
	blocking  []*corev1.Pod // released or ungated pods that are not terminal
	active    []*corev1.Pod // released pods that are not terminal
	ungated   []*corev1.Pod // ungated pods that are not terminal
	candidate *corev1.Pod
	// conditional are the pods released on another pod's exit (stateConditional, AnnotationStartOnExit),
	// also in blocking: the grant server may already have started their app.
	conditional []*corev1.Pod
	// exitsAccepted are terminating pods counted as stopped on an exit report this process's grant
	// server accepted but whose annotation the list did not show yet (ExitReports): nothing may be
	// released until it is written.
	exitsAccepted []types.UID
}

// listPods lists and classifies the singleton's pods: from the caches, or with live from the API server.
func (r *Reconciler) listPods(ctx context.Context, ss *singletonv1.StatefulSingleton, live bool) (*classifiedPods, error) {
	sel, err := metav1.LabelSelectorAsSelector(&ss.Spec.Selector)
	if err != nil {
		return nil, err
	}
	var list corev1.PodList
	if live {
		err = r.APIReader.List(ctx, &list, client.InNamespace(ss.Namespace), client.MatchingLabelsSelector{Selector: sel})
	} else {
		list.Items, err = r.cachedPods(ctx, ss.Namespace, sel)
	}
	if err != nil {
		return nil, err
	}
	// By name, so that messages list pods in a stable order (the caches' lists have none).
	slices.SortFunc(list.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	pods := &classifiedPods{}
	for i := range list.Items {
		pod := &list.Items[i]
		pods.all = append(pods.all, pod)
		state := classify(pod)
		if (state == stateReleased || state == stateUngated) && r.exitAccepted(pod) {
			state = stateTerminal
			pods.exitsAccepted = append(pods.exitsAccepted, pod.UID)
		}
		switch state {
		case stateHeld:
			pods.held = append(pods.held, pod)
		case stateReleased:
			pods.blocking = append(pods.blocking, pod)
			pods.active = append(pods.active, pod)
		case stateUngated:
			pods.blocking = append(pods.blocking, pod)
			pods.ungated = append(pods.ungated, pod)
		case stateConditional:
			pods.blocking = append(pods.blocking, pod)
			pods.conditional = append(pods.conditional, pod)
		}
	}
	if len(pods.held) > 0 {
		r.sortCandidates(ctx, pods.held)
		pods.candidate = pods.held[0]
	}
	return pods, nil
}

// blockingPod is the pod with this UID if it blocks (it may run), or nil.
func (p *classifiedPods) blockingPod(uid types.UID) *corev1.Pod {
	for _, pod := range p.blocking {
		if pod.UID == uid {
			return pod
		}
	}
	return nil
}

// sortCandidates orders held pods the candidate first: the newest revision (rank), then the newest pod,
// then the smallest name.
func (r *Reconciler) sortCandidates(ctx context.Context, held []*corev1.Pod) {
	ranks := map[types.UID]int64{}
	for _, p := range held {
		ranks[p.UID] = r.rank(ctx, p)
	}
	slices.SortStableFunc(held, func(a, b *corev1.Pod) int {
		if ranks[a.UID] != ranks[b.UID] {
			return int(ranks[b.UID] - ranks[a.UID])
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return b.CreationTimestamp.Compare(a.CreationTimestamp.Time)
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// cachedPods lists the pods of namespace matching sel (a StatefulSingleton's selector) from the caches:
// the managed ones from the manager's cache, the others from the cache of sel, which holds only those.
// It also starts the namespace's ranking cache, so that rank finds it synced when a pod is held.
func (r *Reconciler) cachedPods(ctx context.Context, namespace string, sel labels.Selector) ([]corev1.Pod, error) {
	var managed, unmanaged corev1.PodList
	if err := r.Cache.List(ctx, &managed, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	podCache, err := r.caches.podReader(ctx, namespace, sel)
	if err != nil {
		return nil, err
	}
	if err := podCache.List(ctx, &unmanaged, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	if _, err := r.caches.reader(ctx, namespace); err != nil {
		return nil, err
	}
	return append(managed.Items, unmanaged.Items...), nil
}

// rank orders pods by revision: the Deployment revision of the pod's ReplicaSet; for a StatefulSet 1 for
// the update revision and 0 otherwise; 0 for anything else or when the owner cannot be read.
func (r *Reconciler) rank(ctx context.Context, pod *corev1.Pod) int64 {
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return 0
	}
	nsCache, err := r.caches.reader(ctx, pod.Namespace)
	if err != nil {
		return 0
	}
	switch owner.Kind {
	case "ReplicaSet":
		rs := revisionMeta()
		if err := nsCache.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: owner.Name}, rs); err != nil {
			return 0
		}
		n, _ := strconv.ParseInt(rs.Annotations[revisionAnnotation], 10, 64)
		return n
	case "StatefulSet":
		sts := &appsv1.StatefulSet{}
		if err := nsCache.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: owner.Name}, sts); err != nil {
			return 0
		}
		if sts.Status.UpdateRevision != "" && pod.Labels[appsv1.ControllerRevisionHashLabelKey] == sts.Status.UpdateRevision {
			return 1
		}
	}
	return 0
}

// selectorWinner returns the name of an older StatefulSingleton of the namespace whose selector overlaps
// this one's, or "" when this one manages its pods. Two selectors overlap when one selects the other's
// matchLabels, or when a pod of the namespace matches both.
func (r *Reconciler) selectorWinner(ctx context.Context, ss *singletonv1.StatefulSingleton) (string, error) {
	var list singletonv1.StatefulSingletonList
	// Read only, so without the cache's deep copies: every reconcile runs this over the namespace's every
	// StatefulSingleton (TestBenchSingletonScale's profile at 1,000).
	if err := r.Cache.List(ctx, &list, client.InNamespace(ss.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return "", err
	}
	mine, err := metav1.LabelSelectorAsSelector(&ss.Spec.Selector)
	if err != nil {
		return "", err
	}
	var pods []corev1.Pod
	listed := false
	for i := range list.Items {
		other := &list.Items[i]
		if other.UID == ss.UID || !older(other, ss) {
			continue
		}
		theirs, err := metav1.LabelSelectorAsSelector(&other.Spec.Selector)
		if err != nil {
			continue
		}
		if theirs.Matches(labels.Set(ss.Spec.Selector.MatchLabels)) && len(ss.Spec.Selector.MatchExpressions) == 0 ||
			mine.Matches(labels.Set(other.Spec.Selector.MatchLabels)) && len(other.Spec.Selector.MatchExpressions) == 0 {
			return other.Name, nil
		}
		if !listed {
			if pods, err = r.cachedPods(ctx, ss.Namespace, mine); err != nil {
				return "", err
			}
			listed = true
		}
		for j := range pods {
			if theirs.Matches(labels.Set(pods[j].Labels)) {
				return other.Name, nil
			}
		}
	}
	return "", nil
}

// older reports whether a was created before b (the smaller name first on a tie).
func older(a, b *singletonv1.StatefulSingleton) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}
