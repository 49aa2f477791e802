package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
)

// Claims. Each identity gets one claim per claim template, named after it and created right after its
// pod (AlreadyExists is success). A claim belongs to its identity only: when the identity is retired
// and its pod is gone, the claim is deleted or kept (labelled enge.me/retired=true and listed in
// status.retiredClaims) per persistentVolumeClaimRetentionPolicy: whenScaled for a scale-down,
// whenReplaced for every other retirement. A claim that never bound (it has no volume, so no data) is
// deleted whatever the policy, so the claims left behind are only ones that hold data. whenDeleted=Delete
// makes the StatefulCluster an owner of every claim, so the garbage collector deletes them with it.

// maxRetiredClaims caps status.retiredClaims (the CRD's maxItems).
const maxRetiredClaims = 1000

func (r *Reconciler) loadClaims(ctx context.Context, s *scope) error {
	var list corev1.PersistentVolumeClaimList
	if err := r.Cache.List(ctx, &list, client.InNamespace(s.sc.Namespace),
		client.MatchingLabels{clusterv1alpha1.ClusterNameLabel: s.sc.Name}); err != nil {
		return fmt.Errorf("listing claims: %w", err)
	}
	s.claims = list.Items
	return nil
}

func (s *scope) retentionPolicy() clusterv1alpha1.PersistentVolumeClaimRetentionPolicy {
	p := ptr.Deref(s.sc.Spec.PersistentVolumeClaimRetentionPolicy, clusterv1alpha1.PersistentVolumeClaimRetentionPolicy{})
	if p.WhenDeleted == "" {
		p.WhenDeleted = clusterv1alpha1.RetainClaimRetentionPolicy
	}
	if p.WhenScaled == "" {
		p.WhenScaled = clusterv1alpha1.RetainClaimRetentionPolicy
	}
	if p.WhenReplaced == "" {
		p.WhenReplaced = clusterv1alpha1.RetainClaimRetentionPolicy
	}
	return p
}

// createClaim creates one claim of an identity; one that exists already is fine.
func (s *scope) createClaim(ctx context.Context, identity string, ct clusterv1alpha1.PersistentVolumeClaimTemplate) error {
	labels := map[string]string{}
	for k, v := range ct.Metadata.Labels {
		labels[k] = v
	}
	if s.sc.Spec.Selector != nil {
		for k, v := range s.sc.Spec.Selector.MatchLabels {
			labels[k] = v
		}
	}
	labels[clusterv1alpha1.ClusterNameLabel] = s.sc.Name
	labels[clusterv1alpha1.IdentityLabel] = identity
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: claimName(s.sc, ct.Metadata.Name, identity), Namespace: s.sc.Namespace,
			Labels: labels, Annotations: ct.Metadata.Annotations,
		},
		Spec: *ct.Spec.DeepCopy(),
	}
	if s.retentionPolicy().WhenDeleted == clusterv1alpha1.DeleteClaimRetentionPolicy {
		claim.OwnerReferences = []metav1.OwnerReference{claimOwnerRef(s.sc)}
	}
	if err := s.r.Client.Create(ctx, claim); err != nil && !apierrors.IsAlreadyExists(err) {
		createFailures.WithLabelValues(s.sc.Namespace, s.sc.Name).Inc()
		s.r.Recorder.Eventf(s.sc, nil, corev1.EventTypeWarning, clusterv1alpha1.ReasonCreateFailed, "Create",
			"Failed to create claim %s: %v", claim.Name, err)
		return fmt.Errorf("creating claim %s: %w", claim.Name, err)
	}
	return nil
}

func claimOwnerRef(sc *clusterv1alpha1.StatefulCluster) metav1.OwnerReference {
	ref := *controllerRef(sc)
	ref.Controller, ref.BlockOwnerDeletion = nil, nil
	return ref
}

// ensureClaims creates the missing claims of live pods that are not scheduled yet: a claim creation
// that failed after its pod was created is retried. A scheduled pod's missing claim is not recreated
// (it was deleted by someone: an empty claim under the same identity would be a reuse in disguise).
func (r *Reconciler) ensureClaims(ctx context.Context, s *scope) {
	if len(s.sc.Spec.VolumeClaimTemplates) == 0 {
		return
	}
	have := map[string]bool{}
	for _, c := range s.claims {
		have[c.Name] = true
	}
	for _, m := range s.pods {
		if m.pod == nil || m.terminating || m.pod.Spec.NodeName != "" {
			continue
		}
		for _, ct := range s.sc.Spec.VolumeClaimTemplates {
			if have[claimName(s.sc, ct.Metadata.Name, m.name)] {
				continue
			}
			if err := s.createClaim(ctx, m.name, ct); apierrors.IsInvalid(err) {
				s.refuse(err)
			} else if err != nil {
				s.fail("%v", err)
			}
		}
	}
}

// retireClaims applies the retention policy to the claims of identities whose pod is gone.
func (r *Reconciler) retireClaims(ctx context.Context, s *scope) {
	present := map[string]bool{}
	for _, m := range s.pods {
		present[m.name] = true
	}
	policy := s.retentionPolicy()
	for i := range s.claims {
		claim := &s.claims[i]
		identity := claim.Labels[clusterv1alpha1.IdentityLabel]
		if identity == "" || present[identity] || claim.Labels[clusterv1alpha1.RetiredLabel] == "true" || !claim.DeletionTimestamp.IsZero() {
			continue
		}
		// The cache may lag: confirm with the API server that the identity's pod is gone.
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: s.sc.Namespace, Name: identity}, &corev1.Pod{})
		if err == nil {
			continue
		}
		if !apierrors.IsNotFound(err) {
			s.fail("reading pod %s: %v", identity, err)
			continue
		}
		keep := policy.WhenReplaced
		switch reason, known := s.reasonOf(identity); {
		case known && reason == clusterv1alpha1.RetiredScaledDown:
			keep = policy.WhenScaled
		case !known && policy.WhenScaled == clusterv1alpha1.RetainClaimRetentionPolicy:
			keep = clusterv1alpha1.RetainClaimRetentionPolicy // reason lost: keep the data
		}
		neverBound := !claimBound(claim)
		if neverBound {
			// It never had a volume, so it holds no data: whatever the policy, it is not left behind.
			keep = clusterv1alpha1.DeleteClaimRetentionPolicy
		}
		if keep == clusterv1alpha1.DeleteClaimRetentionPolicy {
			if err := r.Client.Delete(ctx, claim, client.Preconditions{UID: &claim.UID}); client.IgnoreNotFound(err) != nil {
				s.fail("deleting claim %s: %v", claim.Name, err)
				continue
			}
			claimsRetired.WithLabelValues(s.sc.Namespace, s.sc.Name, "Delete").Inc()
			note := ""
			if neverBound {
				note = " (never bound: it held no data)"
			}
			r.Recorder.Eventf(s.sc, claim, corev1.EventTypeNormal, clusterv1alpha1.EventClaimDeleted, "Delete",
				"Deleted claim %s of retired identity %s%s", claim.Name, identity, note)
			continue
		}
		orig := claim.DeepCopy()
		claim.Labels[clusterv1alpha1.RetiredLabel] = "true"
		if claim.Annotations == nil {
			claim.Annotations = map[string]string{}
		}
		claim.Annotations[clusterv1alpha1.RetiredAtAnnotation] = s.now.UTC().Format(time.RFC3339)
		if err := r.Client.Patch(ctx, claim, client.MergeFrom(orig)); err != nil {
			s.fail("labelling claim %s retired: %v", claim.Name, err)
			continue
		}
		claimsRetired.WithLabelValues(s.sc.Namespace, s.sc.Name, "Retain").Inc()
		r.Recorder.Eventf(s.sc, claim, corev1.EventTypeNormal, clusterv1alpha1.EventClaimRetained, "Retain",
			"Kept claim %s of retired identity %s (label %s=true)", claim.Name, identity, clusterv1alpha1.RetiredLabel)
	}
}

// reasonOf looks an identity up in the ledger.
func (s *scope) reasonOf(identity string) (clusterv1alpha1.RetirementReason, bool) {
	for _, rec := range s.sc.Status.Identities {
		if rec.Name == identity {
			return rec.Reason, true
		}
	}
	return "", false
}

// ownClaims makes the StatefulCluster an owner of its claims exactly when whenDeleted is Delete, also
// after the policy changed.
func (r *Reconciler) ownClaims(ctx context.Context, s *scope) {
	want := s.retentionPolicy().WhenDeleted == clusterv1alpha1.DeleteClaimRetentionPolicy
	for i := range s.claims {
		claim := &s.claims[i]
		if !claim.DeletionTimestamp.IsZero() {
			continue
		}
		idx := slices.IndexFunc(claim.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == s.sc.UID })
		if (idx >= 0) == want {
			continue
		}
		orig := claim.DeepCopy()
		if want {
			claim.OwnerReferences = append(claim.OwnerReferences, claimOwnerRef(s.sc))
		} else {
			claim.OwnerReferences = slices.Delete(claim.OwnerReferences, idx, idx+1)
		}
		if err := r.Client.Patch(ctx, claim, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			s.fail("setting the owner of claim %s: %v", claim.Name, err)
		}
	}
}

// retiredClaims lists the retained claims, newest first, for status.
func (s *scope) retiredClaims() []clusterv1alpha1.RetiredClaim {
	var out []clusterv1alpha1.RetiredClaim
	for _, c := range s.claims {
		if c.Labels[clusterv1alpha1.RetiredLabel] != "true" || !c.DeletionTimestamp.IsZero() {
			continue
		}
		rc := clusterv1alpha1.RetiredClaim{Name: c.Name, Identity: c.Labels[clusterv1alpha1.IdentityLabel]}
		if t, err := time.Parse(time.RFC3339, c.Annotations[clusterv1alpha1.RetiredAtAnnotation]); err == nil {
			rc.RetiredAt = &metav1.Time{Time: t}
		}
		out = append(out, rc)
	}
	slices.SortFunc(out, func(a, b clusterv1alpha1.RetiredClaim) int {
		ta, tb := ptr.Deref(a.RetiredAt, metav1.Time{}).Time, ptr.Deref(b.RetiredAt, metav1.Time{}).Time
		if c := tb.Compare(ta); c != 0 {
			return c
		}
		return compareStrings(b.Name, a.Name)
	})
	if len(out) > maxRetiredClaims {
		out = out[:maxRetiredClaims]
	}
	return out
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
