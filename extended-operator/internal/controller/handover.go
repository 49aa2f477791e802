package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// Volume handover between versions. A version's StatefulSet names its claims after itself
// (<claim>-<name>-v<N>-<ordinal>), so a new version would start on empty volumes. Instead, for a template
// with volumeClaimTemplates, the ordinals move one at a time: the volumes of ordinal k are held first
// (reclaim policy Retain, labelled with their destination), the old version stops ordinal k (its
// spec.ordinals.start moves past k), and once that pod object is gone each volume is rebound to the new
// version's claim of ordinal k (old claim deleted, the volume's claimRef pointed at a new claim created
// pre-bound to it); only then does the new version grow to include ordinal k. At no instant do two pods
// of one ordinal exist, so a ReadWriteOnce volume is never mounted twice (as far as the pod objects
// tell: a force-deleted pod on a lost node is the StatefulSet's own limit), and every ordinal keeps its
// data. The same move runs backwards when the new version fails or is superseded. Every step is read
// back from the API (pods, claims, volumes, StatefulSets), so an operator restart resumes it.

// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=create;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=get;list;watch;patch

const (
	// handoverLabel marks a PersistentVolume on its way to another claim: a hash of the target claim's
	// namespace/name (labels are short), so the volume is found again after its old claim is gone.
	handoverLabel = "fissile.cloudfoundry.org/handover-to"
	// reclaimAnnotation keeps the volume's reclaim policy while it is held at Retain for a move.
	reclaimAnnotation = "fissile.cloudfoundry.org/original-reclaim-policy"
	// handoverClaimAnnotation names the claim (namespace/name) a held volume is moving to.
	handoverClaimAnnotation = "fissile.cloudfoundry.org/handover-claim"
	// handoverPoll bounds the wait for a pod or claim to go (pods and claims are not watched).
	handoverPoll = time.Second
)

// usesHandover reports whether versions of the template move their volumes ordinal by ordinal.
func usesHandover(sts *appsv1.StatefulSet) bool { return len(sts.Spec.VolumeClaimTemplates) > 0 }

// ordinalStart is the first ordinal of a StatefulSet.
func ordinalStart(sts *appsv1.StatefulSet) int32 {
	if sts.Spec.Ordinals == nil {
		return 0
	}
	return sts.Spec.Ordinals.Start
}

// setOrdinals makes the StatefulSet run ordinals [start, end): the StatefulSet controller deletes the
// pods outside the range.
func (r *Reconciler) setOrdinals(ctx context.Context, v *version, start, end int32) (changed bool, err error) {
	replicas := max(end-start, 0)
	if ordinalStart(v.sts) == start && v.specReplicas() == replicas && v.annotation(replicasAnnotation) == strconv.Itoa(int(replicas)) {
		return false, nil
	}
	return true, r.patchVersion(ctx, v, func(sts *appsv1.StatefulSet) {
		if start == 0 {
			sts.Spec.Ordinals = nil
		} else {
			sts.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: start}
		}
		sts.Spec.Replicas = ptr.To(replicas)
		sts.Annotations[replicasAnnotation] = strconv.Itoa(int(replicas))
	})
}

// handOver moves ordinals from version `from` to version `to` until `to` runs ordinals [0, target) and
// `from` runs [target, desired). It returns whether `to` already runs all target ordinals. Each call
// makes at most one step and asks for a requeue while it waits.
func (r *Reconciler) handOver(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, zs *zoneScope,
	from, to *version, target, desired int32) (bool, error) {
	k := to.specReplicas()
	if k >= target {
		// Keep the old version off the ordinals already moved (e.g. after a scale-up during the upgrade).
		_, err := r.setOrdinals(ctx, from, min(k, desired), desired)
		return true, err
	}
	if moved, err := r.stepOrdinal(ctx, ests, zs, from, to, k, k+1, desired); err != nil || !moved {
		return false, err
	}
	ctrl.LoggerFrom(ctx).Info("volume handover: ordinal moved", "ordinal", k, "from", from.sts.Name, "to", to.sts.Name)
	if err := r.patchVersion(ctx, to, func(sts *appsv1.StatefulSet) {
		sts.Spec.Replicas = ptr.To(k + 1)
		sts.Annotations[replicasAnnotation] = strconv.Itoa(int(k + 1))
		// The watch of the moved ordinal starts now, not while the old pod was stopping.
		sts.Annotations[extendedv1alpha1.PhaseStartAnnotation] = r.Clock.Now().UTC().Format(time.RFC3339Nano)
		sts.Annotations[extendedv1alpha1.ProgressAnnotation] = strconv.Itoa(int(to.ready()))
	}); err != nil {
		return false, err
	}
	return k+1 >= target, nil
}

// handBack moves the ordinals of a failed version back to the serving one, highest first: the serving
// version runs [start, desired), so ordinals start-1 down to 0 come back. It returns whether the
// serving version runs all its ordinals again.
func (r *Reconciler) handBack(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, zs *zoneScope,
	failed, serving *version, desired int32) (bool, error) {
	s := ordinalStart(serving.sts)
	if s == 0 {
		_, err := r.setOrdinals(ctx, failed, 0, 0)
		return true, err
	}
	j := s - 1
	if moved, err := r.stepOrdinal(ctx, ests, zs, failed, serving, j, 0, min(j, failed.specReplicas())); err != nil || !moved {
		return false, err
	}
	ctrl.LoggerFrom(ctx).Info("volume handover: ordinal moved back", "ordinal", j, "from", failed.sts.Name, "to", serving.sts.Name)
	_, err := r.setOrdinals(ctx, serving, j, desired)
	zs.requeueAfter = minPositive(zs.requeueAfter, handoverPoll)
	return false, err
}

// stepOrdinal takes one step of moving ordinal k's volumes from version `from` to version `to`: the
// ordinal is held (its volumes kept when its pod goes), `from` is left running ordinals [start, end)
// (without k), and once its pod k is gone the claims move. It returns whether they moved; until then it
// asks for a requeue.
func (r *Reconciler) stepOrdinal(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, zs *zoneScope,
	from, to *version, k, start, end int32) (bool, error) {
	if held, err := r.holdOrdinal(ctx, from.sts, to.sts, k); err != nil || held {
		zs.requeueAfter = minPositive(zs.requeueAfter, handoverPoll)
		return false, err
	}
	if changed, err := r.setOrdinals(ctx, from, start, end); err != nil || changed {
		zs.requeueAfter = minPositive(zs.requeueAfter, handoverPoll)
		return false, err
	}
	moved, err := r.moveOrdinal(ctx, ests, from.sts, to.sts, k)
	if err != nil || !moved {
		zs.requeueAfter = minPositive(zs.requeueAfter, handoverPoll)
		return false, err
	}
	return true, nil
}

// moveOrdinal moves the claims of ordinal k from StatefulSet `from` to `to` once from's pod k is gone.
// It returns true when `to` has a claim for every volumeClaimTemplate of ordinal k.
func (r *Reconciler) moveOrdinal(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, from, to *appsv1.StatefulSet, k int32) (bool, error) {
	pod := &corev1.Pod{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: from.Namespace, Name: fmt.Sprintf("%s-%d", from.Name, k)}, pod)
	if err == nil {
		return false, nil // still running or terminating: its volumes are in use
	}
	if !apierrors.IsNotFound(err) {
		return false, err
	}
	done := true
	for i := range to.Spec.VolumeClaimTemplates {
		vct := &to.Spec.VolumeClaimTemplates[i]
		ok, err := r.moveClaim(ctx, ests, vct, claimName(vct.Name, from.Name, k), claimName(vct.Name, to.Name, k), to)
		if err != nil {
			return false, err
		}
		done = done && ok
	}
	return done, nil
}

func claimName(template, sts string, ordinal int32) string {
	return fmt.Sprintf("%s-%s-%d", template, sts, ordinal)
}

// moveClaim rebinds the volume of claim oldName to a new claim newName (created from the template), one
// step per call. It returns true once newName exists.
func (r *Reconciler) moveClaim(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, vct *corev1.PersistentVolumeClaim,
	oldName, newName string, to *appsv1.StatefulSet) (bool, error) {
	ns := to.Namespace
	newPVC := &corev1.PersistentVolumeClaim{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: newName}, newPVC); err == nil {
		return true, r.restoreReclaimPolicy(ctx, newPVC)
	} else if !apierrors.IsNotFound(err) {
		return false, err
	}
	target := handoverTarget(ns, newName)
	oldPVC := &corev1.PersistentVolumeClaim{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: oldName}, oldPVC)
	switch {
	case err == nil && oldPVC.DeletionTimestamp.IsZero() && oldPVC.Spec.VolumeName != "":
		// Hold the volume (normally done before the old pod stopped), then free it from the old claim.
		if held, err := r.holdVolume(ctx, oldPVC, newName); err != nil || held {
			return false, err
		}
		if err := r.Client.Delete(ctx, oldPVC, client.Preconditions{UID: &oldPVC.UID}); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("releasing claim %s: %w", oldName, err)
		}
		return false, nil
	case err == nil && oldPVC.DeletionTimestamp.IsZero():
		// Never bound: no data to keep. The new version's StatefulSet makes its own claim.
		return true, nil
	case err == nil:
		return false, nil // being deleted: wait until it is gone
	case !apierrors.IsNotFound(err):
		return false, err
	}

	// The old claim is gone: find the volume held for newName, or one held for oldName by a move in the
	// other direction that never completed (a hand back while the handover of this ordinal was half done).
	var pv *corev1.PersistentVolume
	for _, t := range []string{target, handoverTarget(ns, oldName)} {
		var pvs corev1.PersistentVolumeList
		if err := r.APIReader.List(ctx, &pvs, client.MatchingLabels{handoverLabel: t}); err != nil {
			return false, err
		}
		if len(pvs.Items) > 0 {
			pv = &pvs.Items[0]
			break
		}
	}
	if pv == nil {
		return true, nil // nothing was held: a fresh ordinal
	}
	if ref := pv.Spec.ClaimRef; ref == nil || ref.Namespace != ns || ref.Name != newName || ref.UID != "" || pv.Labels[handoverLabel] != target {
		orig := pv.DeepCopy()
		pv.Labels[handoverLabel] = target
		pv.Annotations[handoverClaimAnnotation] = ns + "/" + newName
		pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ns, Name: newName}
		if err := r.Client.Patch(ctx, pv, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return false, fmt.Errorf("pointing volume %s at claim %s: %w", pv.Name, newName, err)
		}
	}
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: newName, Namespace: ns, Labels: mergeMaps(vct.Labels, to.Spec.Selector.MatchLabels), Annotations: vct.Annotations},
		Spec:       *vct.Spec.DeepCopy(),
	}
	claim.Spec.VolumeName = pv.Name
	if have, ok := pv.Spec.Capacity[corev1.ResourceStorage]; ok {
		if want, ok := claim.Spec.Resources.Requests[corev1.ResourceStorage]; ok && have.Cmp(want) < 0 {
			// The template grew beyond the volume (its class may not allow expansion): the binder refuses
			// a claim asking more than its volume has, so the claim asks what the volume has, and
			// reconcileClaims grows it afterwards where the class allows.
			claim.Spec.Resources.Requests[corev1.ResourceStorage] = have
		}
	}
	if err := r.Client.Create(ctx, claim); err != nil && !apierrors.IsAlreadyExists(err) {
		return false, fmt.Errorf("creating claim %s on volume %s: %w", newName, pv.Name, err)
	}
	r.event(ests, to, corev1.EventTypeNormal, extendedv1alpha1.EventVolumeHandedOver, "Rebind", "Volume %s moved from claim %s to claim %s", pv.Name, oldName, newName)
	volumeHandovers.WithLabelValues(ests.Namespace, ests.Name).Inc()
	return true, nil
}

// holdVolume sets the reclaim policy of the claim's volume to Retain (keeping the original in an
// annotation) and labels it with its destination claim, so that neither the deletion of the old claim
// (by the operator, or by the StatefulSet controller under a persistentVolumeClaimRetentionPolicy of
// Delete) nor the PV controller can delete the data on the way. It returns whether it changed the volume.
func (r *Reconciler) holdVolume(ctx context.Context, pvc *corev1.PersistentVolumeClaim, newName string) (bool, error) {
	pv := &corev1.PersistentVolume{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	target := handoverTarget(pvc.Namespace, newName)
	if pv.Labels[handoverLabel] == target && pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimRetain {
		return false, nil
	}
	orig := pv.DeepCopy()
	if pv.Labels == nil {
		pv.Labels = map[string]string{}
	}
	if pv.Annotations == nil {
		pv.Annotations = map[string]string{}
	}
	if _, held := pv.Annotations[reclaimAnnotation]; !held {
		pv.Annotations[reclaimAnnotation] = string(pv.Spec.PersistentVolumeReclaimPolicy)
	}
	pv.Labels[handoverLabel] = target
	pv.Annotations[handoverClaimAnnotation] = pvc.Namespace + "/" + newName
	pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
	if err := r.Client.Patch(ctx, pv, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, fmt.Errorf("holding volume %s: %w", pv.Name, err)
	}
	return true, nil
}

// holdOrdinal holds the volumes of ordinal k of StatefulSet `from` for their move to `to`, before the
// ordinal stops. It returns whether it changed a volume.
func (r *Reconciler) holdOrdinal(ctx context.Context, from, to *appsv1.StatefulSet, k int32) (bool, error) {
	changed := false
	for i := range to.Spec.VolumeClaimTemplates {
		name := to.Spec.VolumeClaimTemplates[i].Name
		pvc := &corev1.PersistentVolumeClaim{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: from.Namespace, Name: claimName(name, from.Name, k)}, pvc)
		if apierrors.IsNotFound(err) || (err == nil && pvc.Spec.VolumeName == "") {
			continue
		}
		if err != nil {
			return false, err
		}
		held, err := r.holdVolume(ctx, pvc, claimName(name, to.Name, k))
		if err != nil {
			return false, err
		}
		changed = changed || held
	}
	return changed, nil
}

// restoreReclaimPolicy gives a moved volume its reclaim policy back once its new claim is bound.
func (r *Reconciler) restoreReclaimPolicy(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return nil
	}
	pv := &corev1.PersistentVolume{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err != nil {
		return client.IgnoreNotFound(err)
	}
	if _, held := pv.Labels[handoverLabel]; !held {
		return nil
	}
	orig := pv.DeepCopy()
	if policy := pv.Annotations[reclaimAnnotation]; policy != "" {
		pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimPolicy(policy)
	}
	delete(pv.Labels, handoverLabel)
	delete(pv.Annotations, reclaimAnnotation)
	delete(pv.Annotations, handoverClaimAnnotation)
	return r.Client.Patch(ctx, pv, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}

func handoverTarget(ns, claim string) string {
	sum := sha256.Sum256([]byte(ns + "/" + claim))
	return hex.EncodeToString(sum[:16])
}

// restoreHeldVolumes gives every volume of the namespace that was held for a move, and whose new claim
// is bound to it, its reclaim policy back (a move completes in steps; this finishes the last one).
// It asks for a requeue while a moved volume's new claim is not bound yet (claims are not watched).
func (r *Reconciler) restoreHeldVolumes(ctx context.Context, zs *zoneScope, ns string) error {
	var pvs corev1.PersistentVolumeList
	if err := r.APIReader.List(ctx, &pvs, client.HasLabels{handoverLabel}); err != nil {
		return err
	}
	for i := range pvs.Items {
		pv := &pvs.Items[i]
		claimNS, name, ok := strings.Cut(pv.Annotations[handoverClaimAnnotation], "/")
		if !ok || claimNS != ns {
			continue
		}
		pvc := &corev1.PersistentVolumeClaim{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pvc); err != nil {
			if apierrors.IsNotFound(err) {
				continue // still on its way: the handover goes on
			}
			return err
		}
		if pvc.Spec.VolumeName != pv.Name {
			continue
		}
		if pvc.Status.Phase != corev1.ClaimBound {
			zs.requeueAfter = minPositive(zs.requeueAfter, handoverPoll)
			continue
		}
		if err := r.restoreReclaimPolicy(ctx, pvc); err != nil {
			return err
		}
	}
	return nil
}

// driveHandover moves the newest version through its phases when its volumes move ordinal by ordinal:
// an ordinal moves only when every ordinal moved before it is Ready, so at most one ordinal is down.
func (r *Reconciler) driveHandover(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, zs *zoneScope,
	v *version, desired int32, now time.Time) error {
	current := zs.current
	if v.stale() {
		_, err := r.handBack(ctx, ests, zs, v, current, desired)
		return err
	}
	canary := v.phase() == extendedv1alpha1.PhaseCanary
	k := v.specReplicas()
	if v.ready() < k {
		return r.checkWatch(ctx, ests, zs, v, now, canary)
	}
	target := desired
	if canary {
		target = min(ptr.Deref(ests.Spec.UpdateStrategy.Canaries, 1), desired)
	}
	if k < target {
		_, err := r.handOver(ctx, ests, zs, current, v, k+1, desired)
		return err
	}
	if k > target {
		// Scaled down during the upgrade: the highest ordinals stop (their claims stay, as for any
		// StatefulSet), and the old version never runs them again.
		if err := r.ensureReplicas(ctx, ests, v, target); err != nil {
			return err
		}
		_, err := r.setOrdinals(ctx, current, target, desired)
		return err
	}
	if canary {
		return r.setPhase(ctx, ests, v, extendedv1alpha1.PhaseRollout, k, now,
			"Version %d: %d canaries Ready on their own volumes, moving the remaining ordinals", v.number, k)
	}
	if !v.rolledOut() {
		return r.checkWatch(ctx, ests, zs, v, now, false)
	}
	return r.finishRollout(ctx, ests, zs, v, desired, now)
}
