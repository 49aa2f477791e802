package controller

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// In-place updates (spec.updateStrategy.type InPlace, ES-06), for workloads that cannot afford a second
// set of pods or volumes. Each zone has one StatefulSet, <name>[-z<index>], for good: its selector has
// no version label, so a template change is written into it instead of into a new StatefulSet. The
// operator owns its RollingUpdate partition: a template change sets it to replicas - canaries, so the
// StatefulSet controller updates the highest ordinals (the canaries) only; once each of them runs the
// update revision and is Ready within canaryWatchTime, the partition goes down one pod at a time, each
// pod updated and Ready within updateWatchTime. A canary that is not (after retryCount restarts), or a
// later pod that is not, marks the StatefulSet stale and freezes the partition: the ordinals below it
// keep the previous template and serve. The next template change starts over from replicas - canaries.
//
// The state is the StatefulSet's: the partition in its spec, the phase, watch start, progress, retries
// and staleness in the same annotations as a versioned upgrade, so a restarted operator resumes. The
// version annotation still counts template changes (status.versions has one entry), and
// CurrentVersionAnnotation keeps the last version fully rolled out (status.currentVersion). A
// configuration change (updateOnEnvChange) takes the same path, canaries first, with the same version.

// inPlace reports whether the ExtendedStatefulSet updates its StatefulSets in place.
func inPlace(ests *extendedv1alpha1.ExtendedStatefulSet) bool {
	return ests.Spec.UpdateStrategy.Type == extendedv1alpha1.InPlaceUpdateStrategy
}

// viaRollout reports whether a PhasedRollout rolls the in-place updates (spec.updateStrategy.restartVia
// PhasedRollout, ES-B2): the operator writes the template and the config hash into the StatefulSet and
// never its partition, which the rollout-operator steps down one pod per passed check, so a
// configuration restart takes the same checked path as an image change.
func viaRollout(ests *extendedv1alpha1.ExtendedStatefulSet) bool {
	return inPlace(ests) && ests.Spec.UpdateStrategy.RestartVia == extendedv1alpha1.RestartViaPhasedRollout
}

// managingRollout is the PhasedRollout that manages the StatefulSet (the annotation the rollout-operator
// sets on its targets), or "".
func managingRollout(sts *appsv1.StatefulSet) string {
	return sts.Annotations[rolloutv1alpha1.ManagedByAnnotation]
}

// inPlace reports whether the version's StatefulSet is updated in place: its selector, which cannot
// change, has no version label.
func (v *version) inPlace() bool {
	if v.sts.Spec.Selector == nil {
		return false
	}
	_, versioned := v.sts.Spec.Selector.MatchLabels[extendedv1alpha1.VersionLabel]
	return !versioned
}

// partition is the StatefulSet's RollingUpdate partition: the pods below it keep the current revision.
func partition(sts *appsv1.StatefulSet) int32 {
	if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		return *ru.Partition
	}
	return 0
}

func setPartition(sts *appsv1.StatefulSet, p int32) {
	sts.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{
		Type:          appsv1.RollingUpdateStatefulSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To(p)},
	}
}

// servedNumber is the version the pods below the partition run (the version for a versioned one).
func (v *version) servedNumber() int {
	if v.inPlace() {
		if n := int(v.intAnnotation(extendedv1alpha1.CurrentVersionAnnotation)); n > 0 {
			return n
		}
	}
	return v.number
}

// inPlaceRolling reports whether an in-place StatefulSet is between a template (or configuration)
// change and its last pod updated, and not stale.
func inPlaceRolling(v *version) bool {
	p := v.phase()
	return v.sts.DeletionTimestamp.IsZero() && !v.stale() && (p == extendedv1alpha1.PhaseCanary || p == extendedv1alpha1.PhaseRollout)
}

// reconcileZoneInPlace makes one zone's in-place StatefulSet agree with the spec: it creates it, keeps
// its replicas, starts an update on a template change (when the zone gate allows) or a configuration
// change (after the debounce and restart windows, when the gate allows) and drives the update.
func (r *Reconciler) reconcileZoneInPlace(ctx context.Context, s *scope, zs *zoneScope, g gate) error {
	ests, z, desired := s.ests, zs.zone, zs.zone.replicas
	if len(zs.versions) == 0 {
		if len(zs.missing) > 0 {
			return nil // never start pods that cannot start: MissingReference says why
		}
		v, err := r.createVersion(ctx, ests, z, g.next, s.wantCfg, extendedv1alpha1.PhaseDone, desired, s.now, "")
		if v != nil {
			zs.versions = []*version{v}
			zs.newest, zs.current = v, v
		}
		return err
	}
	v := zs.newest
	if !v.sts.DeletionTimestamp.IsZero() {
		zs.waiting = fmt.Sprintf("StatefulSet %s is being deleted; it is created again once it is gone", v.sts.Name)
		zs.requeueAfter = minPositive(zs.requeueAfter, pollWhileWaiting)
		return nil
	}
	if err := r.ensureReplicas(ctx, ests, v, desired); err != nil {
		return err
	}
	if pr := managingRollout(v.sts); pr != "" && !viaRollout(ests) {
		// Two owners of one partition would undo each other's steps: neither is picked silently.
		zs.waiting, zs.waitReason = fmt.Sprintf("PhasedRollout %s manages StatefulSet %s, whose partition this operator owns unless spec.updateStrategy.restartVia is PhasedRollout: "+
			"set restartVia PhasedRollout to let the PhasedRollout roll the updates, or delete it; nothing is updated meanwhile", pr, v.sts.Name), extendedv1alpha1.ReasonPartitionConflict
		return nil
	}
	key := debounceKey(ests, z)
	switch {
	case v.templateHash() != z.hash:
		r.debounce.forget(key) // the template change carries the configuration too
		switch {
		case len(changedFixedFields(ests, v)) > 0:
			// Never applied in part: the StatefulSet keeps what it has until the user decides.
			zs.waiting, zs.waitReason = fmt.Sprintf("the template changes %s, which StatefulSet %s fixes at creation (only a claim template's storage request can grow); "+
				"nothing is applied until it is reverted, or create a new ExtendedStatefulSet with spec.updateStrategy.type Versioned to make that change",
				strings.Join(changedFixedFields(ests, v), ", "), v.sts.Name), extendedv1alpha1.ReasonImmutableInPlace
		case !g.upgrade:
			zs.waiting, zs.waitReason = g.why, extendedv1alpha1.ReasonZoneUpgrade
			zs.requeueAfter = minPositive(zs.requeueAfter, pollWhileWaiting)
		case len(zs.missing) > 0:
			zs.waiting = "the template changed, but the updated pods would not start: " + strings.Join(zs.missing, ", ") + " missing"
		case v.phase() == extendedv1alpha1.PhaseDone && !v.stale() && !ests.Spec.UpdateStrategy.UpdateNotReady && !v.rolledOut():
			// As for a versioned upgrade: only from a settled, Ready set (a change during an update
			// starts it over at once).
			zs.waiting = fmt.Sprintf("the template changed; version %d is not Ready, so the update waits (set spec.updateStrategy.updateNotReady to update anyway)", v.number)
			zs.requeueAfter = minPositive(zs.requeueAfter, pollWhileWaiting)
		default:
			return r.startInPlace(ctx, s, zs, v, v.number+1, "the template changed")
		}
	case s.wantCfg != "" && len(zs.missing) == 0 && !v.stale() && v.configHash() != s.wantCfg:
		if r.holdForWindow(s, zs) {
			break
		}
		if !g.roll {
			holdConfig(zs, s.wantCfg)
			break
		}
		wait, first := r.debounce.wait(key, s.wantCfg, s.now, quietPeriod(ests))
		if wait > 0 {
			zs.configPending = true
			zs.requeueAfter = minPositive(zs.requeueAfter, wait)
			break
		}
		r.debounce.forget(key)
		configRestarts.WithLabelValues(ests.Namespace, ests.Name).Inc()
		configDelay.Observe(s.now.Sub(first).Seconds())
		zs.configRolled = true
		return r.startInPlace(ctx, s, zs, v, v.number, "referenced ConfigMap/Secret data changed")
	default:
		r.debounce.forget(key)
	}
	if err := r.driveInPlace(ctx, ests, zs, v, desired, s.now); err != nil {
		return err
	}
	return r.recreateStuckPod(ctx, ests, zs, v)
}

// fixedFields hashes, field by field, what the StatefulSet API fixes at creation as spec has it (the
// spec.template.spec... path of each): selector, serviceName, podManagementPolicy (unset is its default,
// OrderedReady) and each claim template without its storage request, which grows the claims instead.
func fixedFields(spec *appsv1.StatefulSetSpec) map[string]string {
	const path = "spec.template.spec."
	out := map[string]string{
		path + "selector":            hashJSON(spec.Selector),
		path + "serviceName":         hashJSON(spec.ServiceName),
		path + "podManagementPolicy": hashJSON(cmp.Or(spec.PodManagementPolicy, appsv1.OrderedReadyPodManagement)),
	}
	for i := range spec.VolumeClaimTemplates {
		t := spec.VolumeClaimTemplates[i].DeepCopy()
		delete(t.Spec.Resources.Requests, corev1.ResourceStorage)
		out[path+"volumeClaimTemplates["+t.Name+"]"] = hashJSON(t)
	}
	return out
}

// fixedFieldsAnnotation is the FixedFieldsAnnotation value of the spec's template.
func fixedFieldsAnnotation(ests *extendedv1alpha1.ExtendedStatefulSet) string {
	raw, err := json.Marshal(fixedFields(&ests.Spec.Template.Spec))
	if err != nil {
		panic(err) // a map of strings always marshals
	}
	return string(raw)
}

// changedFixedFields names the fields the spec's template changes that the in-place StatefulSet of v
// fixed at its creation, sorted; none for a StatefulSet made before FixedFieldsAnnotation (what it was
// made from is not known: its next template change records it).
func changedFixedFields(ests *extendedv1alpha1.ExtendedStatefulSet, v *version) []string {
	var had map[string]string
	if json.Unmarshal([]byte(v.annotation(extendedv1alpha1.FixedFieldsAnnotation)), &had) != nil {
		return nil
	}
	want := fixedFields(&ests.Spec.Template.Spec)
	var out []string
	for f, h := range want {
		if had[f] != h {
			out = append(out, f) // changed, or a claim template added
		}
	}
	for f := range had {
		if _, ok := want[f]; !ok {
			out = append(out, f) // a claim template removed
		}
	}
	slices.Sort(out)
	return out
}

// hashJSON hashes the JSON encoding of an API value (deterministic: map keys are sorted).
func hashJSON(v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err) // an API value always marshals
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:8])
}

// startInPlace writes the spec's template (a template change, number above the running version) or
// only the wanted config hash (a configuration change, same number) into the StatefulSet and sets its
// partition to replicas - canaries: the canaries are its highest ordinals. Without canaries the
// partition goes to 0 at once and the StatefulSet controller rolls every pod, each watched with
// updateWatchTime. A stale mark, the retries and the watch start over.
func (r *Reconciler) startInPlace(ctx context.Context, s *scope, zs *zoneScope, v *version, number int, why string) error {
	ests, z, desired := s.ests, zs.zone, zs.zone.replicas
	canaries := min(ptr.Deref(ests.Spec.UpdateStrategy.Canaries, 1), desired)
	phase, part := extendedv1alpha1.PhaseCanary, desired-canaries
	if canaries <= 0 {
		phase, part = extendedv1alpha1.PhaseRollout, 0
	}
	via := viaRollout(ests)
	if via {
		// The PhasedRollout holds the partition at replicas and steps it down: no canaries of ours.
		phase = extendedv1alpha1.PhaseRollout
	}
	served := v.servedNumber()
	if v.phase() == extendedv1alpha1.PhaseDone && !v.stale() {
		served = v.number // settled: every pod runs it
	}
	built := buildStatefulSet(ests, z, number, s.wantCfg, phase, desired, s.now)
	if err := r.patchVersion(ctx, v, func(sts *appsv1.StatefulSet) {
		if number != v.number {
			// What a StatefulSet lets change; the rest (selector, serviceName, podManagementPolicy, claim
			// templates) is fixed at creation: a change of it never gets here (refused at apply, or
			// ImmutableInPlace), and claim storage grows the claims (claimresize.go).
			sts.Spec.Template = built.Spec.Template
			sts.Spec.MinReadySeconds = built.Spec.MinReadySeconds
			sts.Spec.RevisionHistoryLimit = built.Spec.RevisionHistoryLimit
			sts.Spec.PersistentVolumeClaimRetentionPolicy = built.Spec.PersistentVolumeClaimRetentionPolicy
			sts.Labels = built.Labels
			sts.Annotations = mergeMaps(sts.Annotations, built.Annotations)
		} else {
			if sts.Spec.Template.Annotations == nil {
				sts.Spec.Template.Annotations = map[string]string{}
			}
			sts.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation] = s.wantCfg
		}
		switch {
		case !via:
			setPartition(sts, part)
		case managingRollout(sts) == "":
			// No PhasedRollout yet (restartVia set on a StatefulSet made without it, whose partition
			// is 0): held at replicas, as an idle PhasedRollout holds it, so nothing rolls unchecked.
			setPartition(sts, desired)
		}
		sts.Annotations[extendedv1alpha1.VersionAnnotation] = strconv.Itoa(number)
		sts.Annotations[extendedv1alpha1.TemplateHashAnnotation] = z.hash
		sts.Annotations[extendedv1alpha1.CurrentVersionAnnotation] = strconv.Itoa(served)
		sts.Annotations[extendedv1alpha1.PhaseAnnotation] = phase
		sts.Annotations[extendedv1alpha1.PhaseStartAnnotation] = s.now.UTC().Format(time.RFC3339Nano)
		sts.Annotations[extendedv1alpha1.ProgressAnnotation] = "0"
		sts.Annotations[extendedv1alpha1.CanaryRetriesAnnotation] = "0"
		delete(sts.Annotations, extendedv1alpha1.StaleAnnotation)
		delete(sts.Annotations, extendedv1alpha1.StaleReasonAnnotation)
	}); err != nil {
		return err
	}
	v.number = number
	if via {
		ctrl.LoggerFrom(ctx).Info("updating in place through a PhasedRollout", "statefulSet", v.sts.Name, "version", number,
			"phasedRollout", managingRollout(v.sts), "why", why)
		r.event(ests, v.sts, corev1.EventTypeNormal, extendedv1alpha1.EventInPlaceUpdate, "Upgrade",
			"Version %d: %s; written into StatefulSet %s, whose pods its PhasedRollout rolls (spec.updateStrategy.restartVia)", number, why, v.sts.Name)
		return nil
	}
	zs.requeueAfter = minPositive(zs.requeueAfter, watchTime(ests, phase))
	ctrl.LoggerFrom(ctx).Info("updating in place", "statefulSet", v.sts.Name, "version", number, "partition", part, "why", why)
	r.event(ests, v.sts, corev1.EventTypeNormal, extendedv1alpha1.EventInPlaceUpdate, "Upgrade",
		"Version %d: %s; updating StatefulSet %s in place, ordinals %d and up first (partition %d)", number, why, v.sts.Name, part, part)
	return nil
}

// driveInPlace moves an in-place update on: in phase Canary the partition is replicas - canaries, in
// Rollout it goes down one pod at a time; each step waits until every pod at or above the partition
// runs the update revision and is Ready, within the phase's watch time. A stale StatefulSet stays as
// it is; a settled one keeps partition 0.
func (r *Reconciler) driveInPlace(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, zs *zoneScope,
	v *version, desired int32, now time.Time) error {
	if v.stale() {
		return nil // frozen: the ordinals below the partition keep serving the previous template
	}
	if viaRollout(ests) {
		return r.followRollout(ctx, ests, zs, v, desired, now)
	}
	part := partition(v.sts)
	phase := v.phase()
	if phase != extendedv1alpha1.PhaseCanary && phase != extendedv1alpha1.PhaseRollout {
		if part != 0 { // edited by hand: a settled set runs one template
			return r.patchVersion(ctx, v, func(sts *appsv1.StatefulSet) { setPartition(sts, 0) })
		}
		return nil
	}
	if phase == extendedv1alpha1.PhaseCanary {
		// Replicas may change during the canary phase: the canaries stay the highest ordinals.
		if want := max(desired-min(ptr.Deref(ests.Spec.UpdateStrategy.Canaries, 1), desired), 0); part != want {
			return r.patchVersion(ctx, v, func(sts *appsv1.StatefulSet) { setPartition(sts, want) })
		}
	}
	updated, err := r.updatedFrom(ctx, v, part, desired)
	if err != nil || updated < 0 {
		return err
	}
	if updated < desired-min(part, desired) {
		return r.watchInPlace(ctx, ests, zs, v, now, phase == extendedv1alpha1.PhaseCanary, updated, part)
	}
	if part == 0 {
		return r.rolledOutInPlace(ctx, ests, v, desired, now, "")
	}
	next := min(part, desired) - 1
	msg := fmt.Sprintf("Version %d: pods from ordinal %d updated and Ready; updating ordinal %d (partition %d)", v.number, part, next, next)
	if phase == extendedv1alpha1.PhaseCanary {
		msg = fmt.Sprintf("Version %d: %d canaries updated and Ready; updating the remaining pods one at a time (partition %d)", v.number, updated, next)
	}
	if err := r.patchVersion(ctx, v, func(sts *appsv1.StatefulSet) {
		setPartition(sts, next)
		sts.Annotations[extendedv1alpha1.PhaseAnnotation] = extendedv1alpha1.PhaseRollout
		sts.Annotations[extendedv1alpha1.PhaseStartAnnotation] = now.UTC().Format(time.RFC3339Nano)
		sts.Annotations[extendedv1alpha1.ProgressAnnotation] = strconv.Itoa(int(updated))
	}); err != nil {
		return err
	}
	zs.requeueAfter = minPositive(zs.requeueAfter, watchTime(ests, extendedv1alpha1.PhaseRollout))
	r.event(ests, v.sts, corev1.EventTypeNormal, extendedv1alpha1.ReasonRollout, "Upgrade", "%s", msg)
	return nil
}

// followRollout follows an in-place update that a PhasedRollout rolls (restartVia PhasedRollout): the
// partition is the PhasedRollout's, as are the checks, their failures and the retries, so the operator
// only waits until every pod runs the update revision and is Ready and then records the version as
// rolled out. Without a PhasedRollout managing the StatefulSet it says so (NoPhasedRollout): the
// partition stays where it is and no pod is rolled.
func (r *Reconciler) followRollout(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, zs *zoneScope,
	v *version, desired int32, now time.Time) error {
	if !inPlaceRolling(v) {
		return nil // settled: the idle PhasedRollout holds the partition at replicas
	}
	updated, err := r.updatedFrom(ctx, v, 0, desired)
	if err != nil || updated < 0 {
		return err
	}
	pr := managingRollout(v.sts)
	if updated < desired {
		if pr == "" {
			zs.waiting, zs.waitReason = fmt.Sprintf("version %d is written into StatefulSet %s, but no PhasedRollout manages it (spec.updateStrategy.restartVia is PhasedRollout): "+
				"create one with targetRef %s (rollout-operator); until then no pod is rolled (%d of %d updated)", v.number, v.sts.Name, v.sts.Name, updated, desired),
				extendedv1alpha1.ReasonNoPhasedRollout
		}
		zs.requeueAfter = minPositive(zs.requeueAfter, pollWhileWaiting)
		return nil
	}
	return r.rolledOutInPlace(ctx, ests, v, desired, now, pr)
}

// rolledOutInPlace records an in-place update whose pods all run the update revision and are Ready:
// phase Done, and the version is the one served. by is the PhasedRollout that rolled it, if any.
func (r *Reconciler) rolledOutInPlace(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, v *version,
	desired int32, now time.Time, by string) error {
	if err := r.patchVersion(ctx, v, func(sts *appsv1.StatefulSet) {
		sts.Annotations[extendedv1alpha1.PhaseAnnotation] = extendedv1alpha1.PhaseDone
		sts.Annotations[extendedv1alpha1.PhaseStartAnnotation] = now.UTC().Format(time.RFC3339Nano)
		sts.Annotations[extendedv1alpha1.CurrentVersionAnnotation] = strconv.Itoa(v.number)
	}); err != nil {
		return err
	}
	how := "in place"
	if by != "" {
		how = "in place by PhasedRollout " + by
	}
	ctrl.LoggerFrom(ctx).Info("updated in place", "statefulSet", v.sts.Name, "version", v.number, "phasedRollout", by)
	r.event(ests, v.sts, corev1.EventTypeNormal, extendedv1alpha1.EventRolledOut, "Upgrade",
		"Version %d rolled out %s: all %d pods of StatefulSet %s updated and Ready", v.number, how, desired, v.sts.Name)
	return nil
}

// updatedFrom counts the pods with an ordinal from part up to desired that run the StatefulSet's update
// revision and are Ready (read live: pods are not cached). -1 while the StatefulSet controller has not
// observed the latest spec, whose update revision is not known yet.
func (r *Reconciler) updatedFrom(ctx context.Context, v *version, part, desired int32) (int32, error) {
	st := v.sts.Status
	if st.ObservedGeneration < v.sts.Generation || st.UpdateRevision == "" {
		return -1, nil
	}
	pods, err := r.versionPods(ctx, v)
	if err != nil {
		return 0, err
	}
	n := int32(0)
	for i := range pods {
		p := &pods[i]
		o := int32(podOrdinal(v.sts.Name, p.Name))
		if o < part || o >= desired || !p.DeletionTimestamp.IsZero() || !ownedBy(p, v.sts) {
			continue
		}
		if p.Labels[appsv1.ControllerRevisionHashLabelKey] == st.UpdateRevision && opsutil.PodReady(p) {
			n++
		}
	}
	return n, nil
}

func ownedBy(p *corev1.Pod, sts *appsv1.StatefulSet) bool {
	for _, o := range p.OwnerReferences {
		if o.Controller != nil && *o.Controller && o.UID == sts.UID {
			return true
		}
	}
	return false
}

// watchInPlace enforces the watch of an in-place step, as checkWatch does for a version: each newly
// updated and Ready pod restarts it; when it runs out the canaries that are not Ready are deleted (the
// StatefulSet recreates them from the update revision) up to retryCount times, and then the StatefulSet
// is marked stale with its partition where it is.
func (r *Reconciler) watchInPlace(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, zs *zoneScope,
	v *version, now time.Time, canary bool, updated, part int32) error {
	limit := watchTime(ests, v.phase())
	start := v.phaseStart()
	if start.IsZero() || updated > v.intAnnotation(extendedv1alpha1.ProgressAnnotation) {
		zs.requeueAfter = minPositive(zs.requeueAfter, limit)
		return r.patchVersion(ctx, v, func(sts *appsv1.StatefulSet) {
			sts.Annotations[extendedv1alpha1.PhaseStartAnnotation] = now.UTC().Format(time.RFC3339Nano)
			sts.Annotations[extendedv1alpha1.ProgressAnnotation] = strconv.Itoa(int(updated))
		})
	}
	if left := start.Add(limit).Sub(now); left > 0 {
		zs.requeueAfter = minPositive(zs.requeueAfter, left+10*time.Millisecond)
		return nil
	}
	retries := v.intAnnotation(extendedv1alpha1.CanaryRetriesAnnotation)
	if canary && retries < ests.Spec.UpdateStrategy.RetryCount {
		if err := r.restartNotReadyFrom(ctx, v, part); err != nil {
			return err
		}
		canaryRetries.WithLabelValues(ests.Namespace, ests.Name).Inc()
		r.event(ests, v.sts, corev1.EventTypeWarning, extendedv1alpha1.EventCanaryRetry, "Restart",
			"Version %d: canaries (ordinals %d and up) not Ready within %s; restarted them (retry %d of %d)",
			v.number, part, limit, retries+1, ests.Spec.UpdateStrategy.RetryCount)
		zs.requeueAfter = minPositive(zs.requeueAfter, limit)
		return r.patchVersion(ctx, v, func(sts *appsv1.StatefulSet) {
			sts.Annotations[extendedv1alpha1.CanaryRetriesAnnotation] = strconv.Itoa(int(retries + 1))
			sts.Annotations[extendedv1alpha1.PhaseStartAnnotation] = now.UTC().Format(time.RFC3339Nano)
			sts.Annotations[extendedv1alpha1.ProgressAnnotation] = "0"
		})
	}
	reason, what := extendedv1alpha1.ReasonCanaryFailed, "canaries"
	if !canary {
		reason, what = extendedv1alpha1.ReasonUpdateFailed, "pods"
	}
	msg := fmt.Sprintf("version %d: %s not updated and Ready within %s after %d retries; marked stale, partition frozen at %d: ordinals below it keep running version %d",
		v.number, what, limit, retries, part, v.servedNumber())
	if err := r.patchVersion(ctx, v, func(sts *appsv1.StatefulSet) {
		sts.Annotations[extendedv1alpha1.StaleAnnotation] = "true"
		sts.Annotations[extendedv1alpha1.StaleReasonAnnotation] = reason + ": " + msg
	}); err != nil {
		return err
	}
	staleVersions.WithLabelValues(ests.Namespace, ests.Name, reason).Inc()
	ctrl.LoggerFrom(ctx).Info("marked an in-place update stale", "statefulSet", v.sts.Name, "version", v.number, "reason", reason)
	r.event(ests, v.sts, corev1.EventTypeWarning, extendedv1alpha1.EventVersionStale, "MarkStale", "%s", msg)
	return nil
}

// restartNotReadyFrom deletes the StatefulSet's pods at or above the partition that are not Ready.
func (r *Reconciler) restartNotReadyFrom(ctx context.Context, v *version, part int32) error {
	pods, err := r.versionPods(ctx, v)
	if err != nil {
		return err
	}
	for i := range pods {
		p := &pods[i]
		if int32(podOrdinal(v.sts.Name, p.Name)) < part || !ownedBy(p, v.sts) || !p.DeletionTimestamp.IsZero() || opsutil.PodReady(p) {
			continue
		}
		if err := r.Client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("restarting canary %s: %w", p.Name, err)
		}
	}
	return nil
}
