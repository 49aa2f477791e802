package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

// hasRole reports whether the pod carries exactly this role and fencing epoch ("" for none).
func hasRole(pod *corev1.Pod, role, epoch string) bool {
	gotRole, okRole := pod.Labels[leasev1.RoleLabel]
	gotEpoch, okEpoch := pod.Annotations[leasev1.WriterEpochAnnotation]
	return gotRole == role && okRole == (role != "") && gotEpoch == epoch && okEpoch == (epoch != "")
}

// epochString is the writer-epoch annotation's value for a leaseTransitions count.
func epochString(transitions int32) string { return strconv.FormatInt(int64(transitions), 10) }

// labelledWriter returns the one pod labelled writer and its epoch, when a new lock finds the pods
// as a deleted lock left them (its deletion keeps the labels, reconcileDelete): the new lock keeps
// that writer, if it is still usable, instead of moving the role, and its epochs go on from the
// pod's, so the fencing epoch still only grows across a re-install. Anything else (no writer, two,
// an epoch that does not parse) is a fresh election from transitions.
func labelledWriter(pods []corev1.Pod, transitions int32) (Holder, int32) {
	var found *corev1.Pod
	for i := range pods {
		if pods[i].Labels[leasev1.RoleLabel] != leasev1.RoleWriter {
			continue
		}
		if found != nil {
			return Holder{}, transitions
		}
		found = &pods[i]
	}
	if found == nil {
		return Holder{}, transitions
	}
	epoch, err := strconv.ParseInt(found.Annotations[leasev1.WriterEpochAnnotation], 10, 32)
	if err != nil || int32(epoch) < transitions {
		return Holder{}, transitions
	}
	return Holder{Name: found.Name, UID: found.UID}, int32(epoch)
}

// demote labels every pod but the writer `reader` and removes its fencing epoch. It runs before the
// Lease moves and before any pod is labelled writer: when one of these patches fails, nobody is
// promoted. A pod that is already gone needs no demotion.
//
// The pods named in force (the previous writer) are demoted whatever the cache says: the cache may
// not show yet the writer label the previous reconcile wrote, and skipping that pod would leave two
// writers once the new one is labelled.
func (r *Reconciler) demote(ctx context.Context, namespace string, pods []corev1.Pod, writer string, force []string) ([]string, error) {
	var demoted []string
	for _, name := range force {
		if name == "" || name == writer {
			continue
		}
		if err := r.forceReader(ctx, namespace, name); err != nil {
			return demoted, fmt.Errorf("labelling pod %s %s: %w", name, leasev1.RoleReader, err)
		}
		demoted = append(demoted, name)
	}
	for i := range pods {
		pod := &pods[i]
		if pod.Name == writer || hasRole(pod, leasev1.RoleReader, "") || slices.Contains(force, pod.Name) {
			continue
		}
		wasWriter := pod.Labels[leasev1.RoleLabel] == leasev1.RoleWriter
		if err := r.setRole(ctx, pod, leasev1.RoleReader, "", false); err != nil {
			return demoted, fmt.Errorf("labelling pod %s %s: %w", pod.Name, leasev1.RoleReader, err)
		}
		if wasWriter {
			demoted = append(demoted, pod.Name)
		}
	}
	return demoted, nil
}

// forceReader labels the pod `reader` and removes its epoch with a patch that does not depend on the
// cached copy. A pod that does not exist needs no demotion.
func (r *Reconciler) forceReader(ctx context.Context, namespace, name string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{leasev1.RoleLabel: leasev1.RoleReader},
		"annotations": map[string]any{leasev1.WriterEpochAnnotation: nil},
	}})
	if err != nil {
		return err
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := r.Client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	r.writes.Wrote(pod)
	return nil
}

// promote labels the writer pod `writer` with its fencing epoch. The patch carries the
// resourceVersion the election saw, so a pod that changed since (became not Ready, was deleted and
// recreated) is not promoted: the conflict makes the next reconcile decide again.
func (r *Reconciler) promote(ctx context.Context, pod *corev1.Pod, epoch string) (bool, error) {
	if hasRole(pod, leasev1.RoleWriter, epoch) {
		return false, nil
	}
	if err := r.setRole(ctx, pod, leasev1.RoleWriter, epoch, true); err != nil {
		return false, fmt.Errorf("labelling pod %s %s: %w", pod.Name, leasev1.RoleWriter, err)
	}
	return true, nil
}

// setRole patches the pod's role label and epoch annotation ("" removes them). Without optimistic
// locking a pod that no longer exists counts as done.
func (r *Reconciler) setRole(ctx context.Context, pod *corev1.Pod, role, epoch string, optimistic bool) error {
	orig := pod.DeepCopy()
	setOrDelete(&pod.Labels, leasev1.RoleLabel, role)
	setOrDelete(&pod.Annotations, leasev1.WriterEpochAnnotation, epoch)
	patch := client.MergeFrom(orig)
	if optimistic {
		patch = client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
	}
	err := r.Client.Patch(ctx, pod, patch)
	if err != nil {
		if !optimistic && apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	r.writes.Wrote(pod)
	return nil
}

func setOrDelete(m *map[string]string, key, value string) {
	if value == "" {
		delete(*m, key)
		return
	}
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[key] = value
}
