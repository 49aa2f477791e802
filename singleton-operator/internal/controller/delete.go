package controller

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// deletionWaits begins the status message of a StatefulSingleton whose deletion waits for a held pod.
const deletionWaits = "deletion waits until no pod is held: "

// reconcileDelete keeps the finalizer of a StatefulSingleton being deleted until no pod is held: its pods
// go through the phases of reconcilePods (a transition in progress finishes first; nothing is adopted),
// and the status says what deletion waits for. Once finish removed the finalizer, no status is written.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (reconcile.Result, error) {
	if s.winner != "" || s.invalidSelector != nil { // it never managed any pod
		s.skipStatus = true
		return reconcile.Result{}, r.finish(ctx, s.ss)
	}
	r.recordObservation(s)
	result, err := r.reconcilePods(ctx, s)
	if err != nil {
		return reconcile.Result{}, err
	}
	// A pod released on another pod's exit still awaits its release: the finalizer stays until it has it.
	if held := len(s.pods.held) + len(s.pods.conditional); held == 0 || held == 1 && s.released { // the last one was just released
		s.skipStatus = true
		return reconcile.Result{}, r.finish(ctx, s.ss)
	}
	s.status.Message = deletionWaits + s.status.Message
	if !strings.HasPrefix(s.ss.Status.Message, deletionWaits) { // once, when the wait begins
		r.Recorder.Eventf(s.ss, s.pods.candidate, corev1.EventTypeNormal, singletonv1.ReasonDeletionWaiting, "Delete", "%s", s.status.Message)
	}
	return result, nil
}

// finish removes the finalizer of a StatefulSingleton being deleted and forgets it.
func (r *Reconciler) finish(ctx context.Context, ss *singletonv1.StatefulSingleton) error {
	if _, err := opsutil.RemoveFinalizer(ctx, r.Client, ss, singletonv1.Finalizer); err != nil {
		return err
	}
	return r.forget(ctx, client.ObjectKeyFromObject(ss), ss.UID)
}

// forget drops what the operator keeps for a StatefulSingleton that is gone (deleted without the
// finalizer, which it has only while a pod is held) or whose deletion finished (uid), and stops the
// caches that the StatefulSingletons left in the namespace (listed from the API server; those being
// deleted do not count) do not need: the cache of its selector unless another one uses it, and with the
// last one the namespace's ranking cache and its namespace label.
func (r *Reconciler) forget(ctx context.Context, key types.NamespacedName, uid types.UID) error {
	heldPods.DeleteLabelValues(key.Namespace, key.Name)
	r.mu.Lock()
	delete(r.fallback, key)
	delete(r.goneAt, key)
	r.mu.Unlock()
	var list singletonv1.StatefulSingletonList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(key.Namespace)); err != nil {
		return err
	}
	left := 0
	var selectors []labels.Selector
	for i := range list.Items {
		other := &list.Items[i]
		if other.UID == uid || !other.DeletionTimestamp.IsZero() { // a namesake re-created since counts
			continue
		}
		left++
		// A selector that does not parse never got a cache (cachedPods fails first).
		if sel, err := metav1.LabelSelectorAsSelector(&other.Spec.Selector); err == nil {
			selectors = append(selectors, sel)
		}
	}
	r.caches.retain(ctx, key.Namespace, selectors)
	if left > 0 {
		return nil
	}
	return r.ensureNamespaceLabel(ctx, key.Namespace, false)
}

// ensureNamespaceLabel puts (or removes) the label that scopes the pod webhook on the namespace.
func (r *Reconciler) ensureNamespaceLabel(ctx context.Context, name string, present bool) error {
	ns := &corev1.Namespace{}
	if err := r.Cache.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		return client.IgnoreNotFound(err)
	}
	if (ns.Labels[singletonv1.LabelNamespaceEnabled] == "true") == present {
		return nil
	}
	patch := client.MergeFrom(ns.DeepCopy())
	if present {
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[singletonv1.LabelNamespaceEnabled] = "true"
	} else {
		delete(ns.Labels, singletonv1.LabelNamespaceEnabled)
	}
	return client.IgnoreNotFound(r.Client.Patch(ctx, ns, patch))
}
