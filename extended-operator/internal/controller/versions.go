package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// version is one StatefulSet of an ExtendedStatefulSet, as read back from the API: all the upgrade state
// is in its annotations.
type version struct {
	number int
	sts    *appsv1.StatefulSet
}

func (v *version) annotation(key string) string { return v.sts.Annotations[key] }

func (v *version) stale() bool { return v.annotation(extendedv1alpha1.StaleAnnotation) == "true" }

func (v *version) phase() string { return v.annotation(extendedv1alpha1.PhaseAnnotation) }

func (v *version) templateHash() string { return v.annotation(extendedv1alpha1.TemplateHashAnnotation) }

func (v *version) configHash() string {
	return v.sts.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation]
}

// phaseStart is when the version's current watch started (zero when unknown: the watch starts now).
func (v *version) phaseStart() time.Time {
	t, err := time.Parse(time.RFC3339Nano, v.annotation(extendedv1alpha1.PhaseStartAnnotation))
	if err != nil {
		return time.Time{}
	}
	return t
}

func (v *version) intAnnotation(key string) int32 {
	n, _ := strconv.ParseInt(v.annotation(key), 10, 32)
	return int32(n)
}

func (v *version) specReplicas() int32 { return ptr.Deref(v.sts.Spec.Replicas, 1) }

// ready is the number of Ready pods of the version that run its current template (a StatefulSet that
// has not yet observed its latest spec counts none, so a stale status never passes a canary).
func (v *version) ready() int32 {
	st := v.sts.Status
	if st.ObservedGeneration < v.sts.Generation {
		return 0
	}
	return st.ReadyReplicas
}

// rolledOut is whether every desired pod of the version runs its current template and is Ready.
func (v *version) rolledOut() bool {
	st := v.sts.Status
	want := v.specReplicas()
	return st.ObservedGeneration >= v.sts.Generation && st.ReadyReplicas >= want && st.UpdatedReplicas >= want &&
		st.Replicas == want && (st.UpdateRevision == "" || st.CurrentRevision == st.UpdateRevision)
}

// updatedReplicas are the pods of the version: all its pods, or in place those on the update revision.
func (v *version) updatedReplicas() int32 {
	if v.inPlace() {
		return v.sts.Status.UpdatedReplicas
	}
	return v.sts.Status.Replicas
}

// running is the seed's notion: at least one pod of the version is Ready.
func (v *version) running() bool { return v.sts.Status.ReadyReplicas > 0 }

// statefulSetName is the deterministic name of a version's StatefulSet: <name>-v<version>, or
// <name>-z<zone index>-v<version> in a zone.
func statefulSetName(ests *extendedv1alpha1.ExtendedStatefulSet, z zone, number int) string {
	if inPlace(ests) {
		// One StatefulSet for good (inplace.go): no version in its name.
		if z.zoned() {
			return fmt.Sprintf("%s-z%d", ests.Name, z.index)
		}
		return ests.Name
	}
	if z.zoned() {
		return fmt.Sprintf("%s-z%d-v%d", ests.Name, z.index, number)
	}
	return fmt.Sprintf("%s-v%d", ests.Name, number)
}

// templateHash hashes what makes a version: the template's metadata and spec without replicas, so that
// scaling never makes a new version (quarks' REPLICAS env restarted pods on every scale; ES-12).
func templateHash(ests *extendedv1alpha1.ExtendedStatefulSet) string {
	return hashTemplate(&ests.Spec.Template)
}

// hashTemplate is templateHash of a template.
func hashTemplate(tmpl *extendedv1alpha1.StatefulSetTemplate) string {
	t := tmpl.DeepCopy()
	t.Spec.Replicas = nil
	raw, err := json.Marshal(t) // map keys are sorted: the encoding is deterministic
	if err != nil {
		panic(err) // an API struct always marshals
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:8])
}

// listVersions returns the ExtendedStatefulSet's StatefulSets, lowest version first. StatefulSets without
// a parsable version (not created by the operator) are ignored.
func (r *Reconciler) listVersions(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet) ([]*version, error) {
	var list appsv1.StatefulSetList
	if err := r.Cache.List(ctx, &list, client.InNamespace(ests.Namespace),
		client.MatchingLabels{extendedv1alpha1.NameLabel: ests.Name}); err != nil {
		return nil, fmt.Errorf("listing StatefulSets: %w", err)
	}
	var out []*version
	for i := range list.Items {
		sts := &list.Items[i]
		if !metav1.IsControlledBy(sts, ests) {
			continue
		}
		n, err := strconv.Atoi(sts.Annotations[extendedv1alpha1.VersionAnnotation])
		if err != nil || n < 1 {
			continue
		}
		out = append(out, &version{number: n, sts: sts})
	}
	slices.SortFunc(out, func(a, b *version) int { return a.number - b.number })
	return out, nil
}

// buildStatefulSet returns the StatefulSet of a new version: the template's StatefulSet, named by the
// operator, with the version in its labels, selector and pod labels (so that the pods of two versions
// never match each other's selector) and the upgrade state in its annotations.
func buildStatefulSet(ests *extendedv1alpha1.ExtendedStatefulSet, z zone, number int, cfgHash, phase string,
	replicas int32, now time.Time) *appsv1.StatefulSet {
	hash := z.hash
	v := strconv.Itoa(number)
	own := map[string]string{extendedv1alpha1.NameLabel: ests.Name, extendedv1alpha1.VersionLabel: v}
	spec := ests.Spec.Template.Spec.DeepCopy()
	spec.Replicas = ptr.To(replicas)
	// Ordinals are the operator's: a volume handover moves the first ordinal of the old version up.
	spec.Ordinals = nil
	sel := spec.Selector.DeepCopy()
	if sel == nil {
		sel = &metav1.LabelSelector{}
	}
	if inPlace(ests) {
		// The selector cannot change, and in place the pods of two versions are one StatefulSet's: it
		// names the ExtendedStatefulSet only; the pods still carry their version label.
		sel.MatchLabels = mergeMaps(sel.MatchLabels, map[string]string{extendedv1alpha1.NameLabel: ests.Name})
	} else {
		sel.MatchLabels = mergeMaps(sel.MatchLabels, own)
	}
	spec.Selector = sel
	spec.Template.Labels = mergeMaps(spec.Template.Labels, own)
	if cfgHash != "" {
		spec.Template.Annotations = mergeMaps(spec.Template.Annotations, map[string]string{extendedv1alpha1.ConfigHashAnnotation: cfgHash})
	}
	// The operator's versioned upgrades replace the StatefulSet's own: within a version, pods roll only for
	// a configuration change, one at a time.
	spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{
			Name:      statefulSetName(ests, z, number),
			Namespace: ests.Namespace,
			Labels:    mergeMaps(ests.Spec.Template.Metadata.Labels, own),
			Annotations: mergeMaps(ests.Spec.Template.Metadata.Annotations, map[string]string{
				extendedv1alpha1.VersionAnnotation:       v,
				extendedv1alpha1.TemplateHashAnnotation:  hash,
				extendedv1alpha1.PhaseAnnotation:         phase,
				extendedv1alpha1.PhaseStartAnnotation:    now.UTC().Format(time.RFC3339Nano),
				extendedv1alpha1.ProgressAnnotation:      "0",
				extendedv1alpha1.CanaryRetriesAnnotation: "0",
				extendedv1alpha1.ClaimStorageAnnotation:  claimStorage(claimRequests(ests)),
			}),
		},
		Spec: *spec,
	}
	if inPlace(ests) {
		// Through a PhasedRollout, the partition starts where an idle one holds it: at replicas, so
		// nothing rolls unchecked before it manages the StatefulSet.
		setPartition(sts, 0)
		if viaRollout(ests) {
			setPartition(sts, replicas)
		}
		sts.Annotations[extendedv1alpha1.CurrentVersionAnnotation] = v
		sts.Annotations[extendedv1alpha1.FixedFieldsAnnotation] = fixedFieldsAnnotation(ests)
	}
	applyZone(sts, z)
	return sts
}

// setOwner makes the ExtendedStatefulSet the controller of the StatefulSet, so deleting it deletes the
// StatefulSets (never the user's ConfigMaps or Secrets, which get no ownerReference).
func (r *Reconciler) setOwner(ests *extendedv1alpha1.ExtendedStatefulSet, sts *appsv1.StatefulSet) error {
	return controllerutil.SetControllerReference(ests, sts, r.Scheme)
}

// mergeMaps returns a new map with a's entries overwritten by b's.
func mergeMaps(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}
