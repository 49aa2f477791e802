package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// Availability zones (spec.az). Each zone is an independent set of versions: its own StatefulSets
// <name>-z<index>-v<N>, labelled with the zone (in their selectors too, so the pods and claims of two
// zones never match each other's StatefulSet), pinned to the zone by a required node affinity, their
// containers told the zone by KUBE_AZ and AZ_INDEX. The upgrade machinery of upgrade.go runs per zone;
// zoneGate only decides which zone may start an upgrade or a configuration roll, so that at most
// one zone at a time has pods being replaced: a zone outage during an upgrade costs one zone, not two.
// Without zones there is one zone named "" whose StatefulSets are named and built exactly as before.

// zone is one zone the spec asks for.
type zone struct {
	// name is the zone name; "" without spec.az.zones.
	name string
	// index is the 1-based position in spec.az.zones (AZ_INDEX); 0 without zones.
	index int
	// nodeLabel is the node label whose value names a node's zone.
	nodeLabel string
	// replicas is the zone's share of spec.template.spec.replicas.
	replicas int32
	// hash identifies the template of the zone's versions: the template hash, plus the zone's index and
	// node label, which are part of its pods (a zone whose index changes gets a new version).
	hash string
}

// zoned reports whether the zone is a real one (spec.az.zones set).
func (z zone) zoned() bool { return z.name != "" }

// desiredZones returns the zones of the spec in order, each with its share of the total replicas: zone i
// of n gets total/n, plus one for the first total%n zones (replicas are a total, so scaling limits keep
// constraining what a quorum depends on). Without zones it returns the single unnamed zone.
func desiredZones(ests *extendedv1alpha1.ExtendedStatefulSet) []zone {
	total := ests.Spec.DesiredReplicas()
	hash := templateHash(ests)
	if ests.Spec.AZ == nil || len(ests.Spec.AZ.Zones) == 0 {
		return []zone{{replicas: total, hash: hash}}
	}
	label := ests.Spec.AZ.NodeLabel
	if label == "" {
		label = extendedv1alpha1.DefaultZoneNodeLabel
	}
	n := int32(len(ests.Spec.AZ.Zones))
	out := make([]zone, 0, n)
	for i, name := range ests.Spec.AZ.Zones {
		share := total / n
		if int32(i) < total%n {
			share++
		}
		z := zone{name: name, index: i + 1, nodeLabel: label, replicas: share}
		z.hash = z.versionHash(hash)
		out = append(out, z)
	}
	return out
}

// versionHash is the hash identifying the zone's versions of a template whose templateHash is
// tmplHash: the template hash itself without zones; with zones, also the zone's index and node label.
func (z zone) versionHash(tmplHash string) string {
	if !z.zoned() {
		return tmplHash
	}
	sum := sha256.Sum256([]byte(tmplHash + "\x00" + strconv.Itoa(z.index) + "\x00" + z.nodeLabel))
	return hex.EncodeToString(sum[:8])
}

// firstNumber is the version number of a zone's first StatefulSet. Claims kept from a removed zone at
// the same index (zoneRemovalPolicy Retain) decide it: the same zone added back takes the number of its
// newest kept claims, so its StatefulSet adopts them and finds its data; a different zone at that index
// takes a number above them, as their volumes are in another zone and its pods could never mount them.
func (r *Reconciler) firstNumber(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, all []*version, z zone) (int, error) {
	n := 1
	if z.zoned() && len(ests.Spec.Template.Spec.VolumeClaimTemplates) > 0 {
		var pvcs corev1.PersistentVolumeClaimList
		if err := r.APIReader.List(ctx, &pvcs, client.InNamespace(ests.Namespace), client.MatchingLabels{
			extendedv1alpha1.NameLabel: ests.Name, extendedv1alpha1.ZoneIndexLabel: strconv.Itoa(z.index)}); err != nil {
			return 0, fmt.Errorf("listing the kept claims of zone index %d: %w", z.index, err)
		}
		same, other := 0, 0
		for _, p := range pvcs.Items {
			v, err := strconv.Atoi(p.Labels[extendedv1alpha1.VersionLabel])
			if err != nil {
				continue
			}
			if p.Labels[extendedv1alpha1.ZoneLabel] == z.name {
				same = max(same, v)
			} else {
				other = max(other, v)
			}
		}
		if same > 0 {
			n = same
		} else {
			n = other + 1
		}
	}
	return freeNumber(ests, all, z, n), nil
}

// zoneOf is the zone a version belongs to ("" for StatefulSets without zone).
func zoneOf(v *version) string { return v.sts.Labels[extendedv1alpha1.ZoneLabel] }

// debounceKey keys the configuration debounce per zone, so that one zone applying its change does not
// restart the quiet period of the next.
func debounceKey(ests *extendedv1alpha1.ExtendedStatefulSet, z zone) types.NamespacedName {
	key := client.ObjectKeyFromObject(ests)
	if z.zoned() {
		key.Name += "/" + z.name
	}
	return key
}

// applyZone makes a StatefulSet one of the zone's: zone labels (on it, its selector and its pods, and
// quarks' names of them on it and its pods), a required node affinity to the zone (added to every term
// the template has: terms are ORed), and KUBE_AZ, AZ_INDEX, BOSH_AZ and CF_OPERATOR_AZ in every container
// and init container. KUBE_AZ and AZ_INDEX replace the template's own variables of those names; BOSH_AZ
// and CF_OPERATOR_AZ are compatibility aliases (quarks' names of the zone), added only to a container
// that does not set them itself, so a value the user chose (a BOSH AZ name other than the zone's, say)
// is kept.
func applyZone(sts *appsv1.StatefulSet, z zone) {
	if !z.zoned() {
		return
	}
	own := map[string]string{extendedv1alpha1.ZoneLabel: z.name, extendedv1alpha1.ZoneIndexLabel: strconv.Itoa(z.index)}
	sts.Labels = mergeMaps(sts.Labels, own)
	sts.Spec.Selector.MatchLabels = mergeMaps(sts.Spec.Selector.MatchLabels, own)
	sts.Spec.Template.Labels = mergeMaps(sts.Spec.Template.Labels, own)
	quarks := map[string]string{extendedv1alpha1.QuarksZoneLabel: z.name, extendedv1alpha1.QuarksZoneIndexLabel: strconv.Itoa(z.index - 1)}
	sts.Labels = mergeMaps(sts.Labels, quarks)
	sts.Spec.Template.Labels = mergeMaps(sts.Spec.Template.Labels, quarks)

	pod := &sts.Spec.Template.Spec
	req := corev1.NodeSelectorRequirement{Key: z.nodeLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{z.name}}
	if pod.Affinity == nil {
		pod.Affinity = &corev1.Affinity{}
	}
	if pod.Affinity.NodeAffinity == nil {
		pod.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := pod.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{req}}},
		}
	} else {
		terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		for i := range terms {
			terms[i].MatchExpressions = append(terms[i].MatchExpressions, req)
		}
	}

	ours := []corev1.EnvVar{
		{Name: extendedv1alpha1.ZoneEnvName, Value: z.name},
		{Name: extendedv1alpha1.ZoneIndexEnvName, Value: strconv.Itoa(z.index)},
	}
	aliases := []corev1.EnvVar{
		{Name: extendedv1alpha1.BoshZoneEnvName, Value: z.name},
		{Name: extendedv1alpha1.CFOperatorZoneEnvName, Value: z.name},
	}
	for _, cs := range [][]corev1.Container{pod.InitContainers, pod.Containers} {
		for i := range cs {
			env := append(slices.DeleteFunc(cs[i].Env, func(e corev1.EnvVar) bool { return hasEnv(ours, e.Name) }), ours...)
			for _, a := range aliases {
				if !hasEnv(env, a.Name) {
					env = append(env, a)
				}
			}
			cs[i].Env = env
		}
	}
}

// hasEnv reports whether env sets the variable name.
func hasEnv(env []corev1.EnvVar, name string) bool {
	return slices.ContainsFunc(env, func(e corev1.EnvVar) bool { return e.Name == name })
}

// upgrading reports whether a zone's versions have an upgrade in flight: a newer version than the
// serving one that is not stale, or a stale one still handing its volumes back.
func upgrading(zs *zoneScope) bool {
	n, c := zs.newest, zs.current
	if n != nil && n.inPlace() {
		return inPlaceRolling(n)
	}
	if n == nil || n == c || !n.sts.DeletionTimestamp.IsZero() {
		return false
	}
	return !n.stale() || handingOver(n, c)
}

// rolling reports whether a version's StatefulSet is replacing pods (a configuration roll under way).
func rolling(v *version) bool {
	st := v.sts.Status
	return st.ObservedGeneration < v.sts.Generation || st.UpdatedReplicas < min(v.specReplicas(), st.Replicas) ||
		(st.UpdateRevision != "" && st.CurrentRevision != st.UpdateRevision)
}

// busy reports whether a zone is replacing pods: an upgrade or a configuration roll.
func busy(zs *zoneScope) bool {
	// A stale in-place StatefulSet is frozen mid-roll: it replaces no pods.
	return upgrading(zs) || (zs.current != nil && !zs.current.stale() && rolling(zs.current)) || zs.configRolled
}

// removeZone deletes the StatefulSets of a zone that left spec.az.zones. Their claims stay unless
// zoneRemovalPolicy is Delete: a template retention policy of Delete is overridden to Retain first, as
// the policy field is the only way to have a zone's volumes deleted.
func (r *Reconciler) removeZone(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, name string, versions []*version) error {
	deleteClaims := ests.Spec.AZ != nil && ests.Spec.AZ.ZoneRemovalPolicy == extendedv1alpha1.DeleteZoneRemovalPolicy && name != ""
	deleted := 0
	for _, v := range versions {
		if !v.sts.DeletionTimestamp.IsZero() {
			continue
		}
		if p := v.sts.Spec.PersistentVolumeClaimRetentionPolicy; !deleteClaims && p != nil && p.WhenDeleted == appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
			if err := r.patchVersion(ctx, v, func(sts *appsv1.StatefulSet) {
				sts.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted = appsv1.RetainPersistentVolumeClaimRetentionPolicyType
			}); err != nil {
				return err
			}
		}
		why := fmt.Sprintf("zone %q was removed from spec.az.zones", name)
		if name == "" {
			why = "spec.az.zones was set: the StatefulSets without zone are replaced by per-zone ones"
		}
		if err := r.deleteVersion(ctx, ests, v, why); err != nil {
			return err
		}
		deleted++
	}
	if deleted == 0 {
		return nil // deleted by an earlier reconcile: done
	}
	claims := "kept"
	if deleteClaims {
		var pvcs corev1.PersistentVolumeClaimList
		if err := r.APIReader.List(ctx, &pvcs, client.InNamespace(ests.Namespace),
			client.MatchingLabels{extendedv1alpha1.NameLabel: ests.Name, extendedv1alpha1.ZoneLabel: name}); err != nil {
			return fmt.Errorf("listing the claims of zone %q: %w", name, err)
		}
		for i := range pvcs.Items {
			p := &pvcs.Items[i]
			if err := r.Client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting claim %s of removed zone %q: %w", p.Name, name, err)
			}
		}
		claims = fmt.Sprintf("%d deleted (zoneRemovalPolicy Delete)", len(pvcs.Items))
	}
	zonesRemoved.WithLabelValues(ests.Namespace, ests.Name).Inc()
	ctrl.LoggerFrom(ctx).Info("removed a zone", "zone", name, "claims", claims)
	r.event(ests, nil, corev1.EventTypeNormal, extendedv1alpha1.EventZoneRemoved, "Delete",
		"Zone %q left spec.az.zones: deleted its StatefulSets; claims %s", name, claims)
	return nil
}
