package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

// role is what the operator writes on a pod: the role label, the lock that labelled it (so that the
// labels of a lock that no longer exists can be found and removed), and on the writer its fencing
// epoch and the Lease it writes for (so that no other pod is labelled writer for that Lease while it
// is), as an annotation and as a label the fence lists by (leaseKey). The zero role is none of them.
type role struct {
	name, lock, epoch, lease string
}

// leaseKey is the writer-lease-key label's value for a Lease name: the name itself when it fits a
// label value (a Lease name is a DNS subdomain: the characters always do), otherwise "sha256-" and the
// first 48 hex digits of its SHA-256. Two names with one key only cost the fence a longer list: it
// still compares the writer-lease annotation.
func leaseKey(lease string) string {
	if lease == "" || len(lease) <= validation.LabelValueMaxLength {
		return lease
	}
	sum := sha256.Sum256([]byte(lease))
	return "sha256-" + hex.EncodeToString(sum[:])[:48]
}

func readerRole(lock *leasev1.StatefulSetLock) role {
	return role{name: leasev1.RoleReader, lock: lock.Name}
}

func writerRole(lock *leasev1.StatefulSetLock, epoch string) role {
	return role{name: leasev1.RoleWriter, lock: lock.Name, epoch: epoch, lease: lock.Spec.LeaseName}
}

// hasRole reports whether the pod carries exactly this role ("" values for keys it must not carry).
func hasRole(pod *corev1.Pod, want role) bool {
	has := func(m map[string]string, key, value string) bool {
		got, ok := m[key]
		return got == value && ok == (value != "")
	}
	return has(pod.Labels, leasev1.RoleLabel, want.name) && has(pod.Labels, leasev1.LockLabel, want.lock) &&
		has(pod.Labels, leasev1.WriterLeaseKeyLabel, leaseKey(want.lease)) && has(pod.Annotations, leasev1.WriterEpochAnnotation, want.epoch) && has(pod.Annotations, leasev1.WriterLeaseAnnotation, want.lease)
}

// patch is the merge patch that sets the role's keys on a pod and removes those it has no value for
// (writeRole's fallback when another manager still owns a key the apply dropped).
func (want role) patch() map[string]any {
	value := func(v string) any {
		if v == "" {
			return nil // removes the key
		}
		return v
	}
	return map[string]any{"metadata": map[string]any{
		"labels": map[string]any{leasev1.RoleLabel: value(want.name), leasev1.LockLabel: value(want.lock),
			leasev1.WriterLeaseKeyLabel: value(leaseKey(want.lease))},
		"annotations": map[string]any{leasev1.WriterEpochAnnotation: value(want.epoch), leasev1.WriterLeaseAnnotation: value(want.lease)},
	}}
}

// epochString is the writer-epoch annotation's value for a leaseTransitions count.
func epochString(transitions int32) string { return strconv.FormatInt(int64(transitions), 10) }

// labelledWriter returns the one pod labelled writer and its epoch, when a lock without a Lease finds
// the pods as a lock of the same name left them (deleted while no operator ran, then created again: a
// re-install), or as an older version labelled them (no lock label): the lock keeps that writer, if it
// is still usable, instead of moving the role, and its epochs go on from the pod's, so the fencing
// epoch still only grows across a re-install. A writer labelled by another lock is not adopted (fence
// removes its labels when that lock no longer exists). Anything else (no writer, two, an epoch that
// does not parse) is a fresh election from transitions.
func labelledWriter(pods []corev1.Pod, lock string, transitions int32) (Holder, int32) {
	var found *corev1.Pod
	for i := range pods {
		if pods[i].Labels[leasev1.RoleLabel] != leasev1.RoleWriter {
			continue
		}
		if by, ok := pods[i].Labels[leasev1.LockLabel]; ok && by != lock {
			return Holder{}, transitions
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
func (r *Reconciler) demote(ctx context.Context, lock *leasev1.StatefulSetLock, pods []corev1.Pod, writer string, force []string) ([]string, error) {
	var demoted []string
	reader := readerRole(lock)
	for _, name := range force {
		if name == "" || name == writer {
			continue
		}
		if err := r.forceRole(ctx, lock.Namespace, name, reader); err != nil {
			return demoted, fmt.Errorf("labelling pod %s %s: %w", name, leasev1.RoleReader, err)
		}
		demoted = append(demoted, name)
	}
	for i := range pods {
		pod := &pods[i]
		if pod.Name == writer || hasRole(pod, reader) || slices.Contains(force, pod.Name) {
			continue
		}
		wasWriter := pod.Labels[leasev1.RoleLabel] == leasev1.RoleWriter
		if err := r.setRole(ctx, pod, reader, false); err != nil {
			return demoted, fmt.Errorf("labelling pod %s %s: %w", pod.Name, leasev1.RoleReader, err)
		}
		if wasWriter {
			demoted = append(demoted, pod.Name)
		}
	}
	return demoted, nil
}

// forceRole gives the pod the role whatever the cached copy says: it reads the pod from the API
// server and applies under that resourceVersion, reading again when the pod changed in between
// (conflict-retry with backoff). A pod that does not exist needs no demotion.
func (r *Reconciler) forceRole(ctx context.Context, namespace, name string, want role) error {
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		pod := &corev1.Pod{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
			return err
		}
		return r.writeRole(ctx, pod, want)
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// promote labels the writer pod `writer` with its fencing epoch. The write carries the
// resourceVersion the election saw, so a pod that changed since (became not Ready, was deleted and
// recreated) is not promoted: the conflict makes the next reconcile decide again.
func (r *Reconciler) promote(ctx context.Context, pod *corev1.Pod, writer role) (bool, error) {
	if hasRole(pod, writer) {
		return false, nil
	}
	if err := r.setRole(ctx, pod, writer, true); err != nil {
		return false, fmt.Errorf("labelling pod %s %s: %w", pod.Name, leasev1.RoleWriter, err)
	}
	return true, nil
}

// setRole writes the pod's role keys (the zero role removes them all). With optimistic locking the
// write carries the resourceVersion of the copy given: a pod that changed since is not written (a
// conflict). Without, a pod that changed since is read again (forceRole), and a pod that no longer
// exists counts as done.
func (r *Reconciler) setRole(ctx context.Context, pod *corev1.Pod, want role, optimistic bool) error {
	err := r.writeRole(ctx, pod, want)
	if optimistic || err == nil {
		return err
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	if !apierrors.IsConflict(err) {
		return err
	}
	return r.forceRole(ctx, pod.Namespace, pod.Name, want)
}

// applyConfig is the role as a server-side apply configuration: exactly the keys the role has a value
// for, under the pod's resourceVersion. The field manager statefulsetlock owns these keys and nothing
// else: a key it no longer applies is removed, and someone else's apply of the rest of the pod (a
// GitOps tool, kubectl apply --server-side) neither conflicts with them nor removes them.
func (want role) applyConfig(pod *corev1.Pod) *corev1ac.PodApplyConfiguration {
	ac := corev1ac.Pod(pod.Name, pod.Namespace).WithResourceVersion(pod.ResourceVersion)
	labels, annotations := map[string]string{}, map[string]string{}
	set := func(m map[string]string, key, value string) {
		if value != "" {
			m[key] = value
		}
	}
	set(labels, leasev1.RoleLabel, want.name)
	set(labels, leasev1.LockLabel, want.lock)
	set(labels, leasev1.WriterLeaseKeyLabel, leaseKey(want.lease))
	set(annotations, leasev1.WriterEpochAnnotation, want.epoch)
	set(annotations, leasev1.WriterLeaseAnnotation, want.lease)
	if len(labels) > 0 {
		ac.WithLabels(labels)
	}
	if len(annotations) > 0 {
		ac.WithAnnotations(annotations)
	}
	return ac
}

// writeRole server-side applies the role's keys on the pod under the field manager statefulsetlock,
// with the pod's resourceVersion as the precondition (a pod that changed since is a conflict; a pod
// that is gone is NotFound). On success pod holds what the API server returned.
//
// The apply forces ownership of these keys, and of these only: they are the fencing truth Services
// select on and must be the operator's alone, and an earlier write of them by another manager (an
// older version of this operator wrote them with merge patches; a pod template may carry sts-role)
// would otherwise be a conflict that stops every failover. For the same reason a key the role has
// no value for that another manager still owns after the apply (the apply only removes what
// statefulsetlock alone owned) is removed with a merge patch under the resourceVersion the apply
// returned, so a reader never keeps a writer's epoch.
func (r *Reconciler) writeRole(ctx context.Context, pod *corev1.Pod, want role) error {
	ac := want.applyConfig(pod)
	if err := r.Client.Apply(ctx, ac, client.FieldOwner(leasev1.FieldManager), client.ForceOwnership); err != nil {
		// An apply to a pod that is gone is an attempt to create it, which the API server refuses
		// (the role keys alone are no valid pod, and the operator may not create pods) with an
		// error that does not say the pod is gone: ask.
		if !apierrors.IsConflict(err) {
			if getErr := r.APIReader.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}); apierrors.IsNotFound(getErr) {
				return getErr
			}
		}
		return err
	}
	pod.Labels, pod.Annotations = ac.Labels, ac.Annotations
	pod.UID, pod.ResourceVersion = ptr.Deref(ac.UID, pod.UID), ptr.Deref(ac.ResourceVersion, pod.ResourceVersion)
	if !hasRole(pod, want) {
		patch := want.patch()
		patch["metadata"].(map[string]any)["resourceVersion"] = pod.ResourceVersion
		raw, err := json.Marshal(patch)
		if err != nil {
			return err
		}
		if err := r.Client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, raw), client.FieldOwner(leasev1.FieldManager)); err != nil {
			return err
		}
	}
	r.writes.Wrote(pod)
	return nil
}
