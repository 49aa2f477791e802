package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// Growing claims with their template (ES-11). A StatefulSet's volumeClaimTemplates are immutable, and
// every other template change is a new version whose pods replace the old ones, ordinal by ordinal
// (handover.go). A change of nothing but the storage requests of volumeClaimTemplates is not a new
// version: the versions' StatefulSets keep the claim templates they were made with (their hash
// annotation moves to the new template's, restampStorageOnly) and the operator patches the existing
// claims to the larger request instead, where their StorageClass allows volume expansion; the volume
// plugin grows the volumes under the running pods. This is the least disruptive way: no pod is
// deleted, no StatefulSet is recreated. Recreating the StatefulSet with the new claim templates
// (deleted with --cascade=orphan, its pods adopted by the new one) would also keep the pods, but it
// leaves a window with no StatefulSet, and the operator's own upgrade state lives in the StatefulSet's
// annotations; all it would buy is new ordinals' claims created at the new size, and those are grown
// here like every other claim once bound. Shrinking is refused at apply (the transition rule on
// StatefulSetTemplate), since no volume plugin shrinks a volume.
//
// Claims are not watched (like pods): while a resize is under way the reconcile comes back every
// claimResizePoll to report it. A StorageClass is watched, so allowing expansion on it resumes the
// ExtendedStatefulSets waiting for it at once.

// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=patch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list;watch

const (
	// claimResizePoll is how often a resize under way is looked at again.
	claimResizePoll = 10 * time.Second
	// claimsNamed is how many claims a condition message names; the rest are counted.
	claimsNamed = 3
)

// claimRequests are the storage requests of the spec's claim templates, by template name (a template
// without one is left out: there is nothing to grow to).
func claimRequests(ests *extendedv1alpha1.ExtendedStatefulSet) map[string]resource.Quantity {
	out := map[string]resource.Quantity{}
	for _, t := range ests.Spec.Template.Spec.VolumeClaimTemplates {
		if q, ok := t.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
			out[t.Name] = q
		}
	}
	return out
}

// claimStorage is the ClaimStorageAnnotation value of claim storage requests.
func claimStorage(requests map[string]resource.Quantity) string {
	raw, err := json.Marshal(requests) // map keys are sorted: the encoding is deterministic
	if err != nil {
		panic(err) // a map of quantities always marshals
	}
	return string(raw)
}

// hashedStorage is the storage requests of the claim templates version v's template hash was computed
// with: its ClaimStorageAnnotation, or, on a StatefulSet made before the annotation, its own claim
// templates (right until its first storage-only change).
func hashedStorage(v *version) map[string]resource.Quantity {
	had := map[string]resource.Quantity{}
	if a, ok := v.sts.Annotations[extendedv1alpha1.ClaimStorageAnnotation]; ok && json.Unmarshal([]byte(a), &had) == nil {
		return had
	}
	had = map[string]resource.Quantity{}
	for _, t := range v.sts.Spec.VolumeClaimTemplates {
		if q, ok := t.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
			had[t.Name] = q
		}
	}
	return had
}

// storageOnly reports whether version v is the spec's template but for the storage requests of its
// claim templates: with each of them put back to what v's template hash was computed with
// (hashedStorage; not the StatefulSet's claim templates, which neither a storage-only change nor an
// in-place template change updates), the template hashes to v's.
func storageOnly(ests *extendedv1alpha1.ExtendedStatefulSet, z zone, v *version) bool {
	if len(ests.Spec.Template.Spec.VolumeClaimTemplates) == 0 || v.templateHash() == z.hash {
		return false
	}
	had := hashedStorage(v)
	tmpl := ests.Spec.Template.DeepCopy()
	for i := range tmpl.Spec.VolumeClaimTemplates {
		t := &tmpl.Spec.VolumeClaimTemplates[i]
		q, ok := had[t.Name]
		if _, wants := t.Spec.Resources.Requests[corev1.ResourceStorage]; !ok || !wants {
			return false // a template added, or its request added or removed: more than a size
		}
		t.Spec.Resources.Requests[corev1.ResourceStorage] = q
	}
	return z.versionHash(hashTemplate(tmpl)) == v.templateHash()
}

// restampStorageOnly gives every version of the zone that differs from the spec's template only in
// claim storage requests the template's hash (and its storage requests), so that a storage change makes
// no new version (and no retry of a stale one): its claims are resized instead (reconcileClaims).
func (r *Reconciler) restampStorageOnly(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, zs *zoneScope) error {
	for _, v := range zs.versions {
		if !v.sts.DeletionTimestamp.IsZero() || !storageOnly(ests, zs.zone, v) {
			continue
		}
		if err := r.patchVersion(ctx, v, func(sts *appsv1.StatefulSet) {
			sts.Annotations[extendedv1alpha1.TemplateHashAnnotation] = zs.zone.hash
			sts.Annotations[extendedv1alpha1.ClaimStorageAnnotation] = claimStorage(claimRequests(ests))
		}); err != nil {
			return err
		}
		ctrl.LoggerFrom(ctx).Info("only claim storage requests changed: the version stays, its claims grow", "statefulSet", v.sts.Name)
	}
	return nil
}

// claimTemplateOf is the claim template a claim of the ExtendedStatefulSet was made from
// (<template>-<name>[-z<zone index>]-v<version>-<ordinal>), "" when none of templates matches; the
// longest name wins where one template's name extends another's.
func claimTemplateOf(estsName, claim string, templates map[string]resource.Quantity) string {
	best := ""
	for t := range templates {
		prefix := t + "-" + estsName + "-"
		if len(t) > len(best) && strings.HasPrefix(claim, prefix) && claimSuffix.MatchString(claim[len(prefix):]) {
			best = t
		}
	}
	return best
}

// claimSuffix is what follows "<template>-<name>-" in a claim's name: [z<i>-]v<N>-<ordinal>, or
// [z<i>-]<ordinal> for an in-place StatefulSet (inplace.go), whose name has no version.
var claimSuffix = regexp.MustCompile(`^(z[0-9]+-)?(v[0-9]+-)?[0-9]+$`)

// claimClass is the claim's StorageClass as the API server's resize admission reads it (the beta
// annotation first).
func claimClass(pvc *corev1.PersistentVolumeClaim) string {
	if c, ok := pvc.Annotations[corev1.BetaStorageClassAnnotation]; ok {
		return c
	}
	return ptr.Deref(pvc.Spec.StorageClassName, "")
}

// claimState is one claim below its template's request, for the condition message.
type claimState struct {
	name string
	// have is the claim's capacity ("" while it is not bound), want the template's request.
	have, want string
}

func (c claimState) String() string {
	if c.have == "" {
		return fmt.Sprintf("%s (not bound yet, %s requested)", c.name, c.want)
	}
	return fmt.Sprintf("%s (%s of %s)", c.name, c.have, c.want)
}

// claimReport is what reconcileClaims found, for the ClaimsResized condition.
type claimReport struct {
	// total counts the claims of the templates.
	total int
	// pending are the claims asked to grow (or not bound yet) whose volume is not that large yet.
	pending []claimState
	// blocked are the claims below the request that stay so, by StorageClass ("" for none).
	blocked map[string][]claimState
}

// newClaimState describes a claim that is below want.
func newClaimState(pvc *corev1.PersistentVolumeClaim, want resource.Quantity) claimState {
	c := claimState{name: pvc.Name, want: want.String()}
	if q, ok := pvc.Status.Capacity[corev1.ResourceStorage]; ok && pvc.Status.Phase == corev1.ClaimBound {
		c.have = q.String()
	}
	return c
}

// resizing reports whether a claim that requests at least want is still growing to it: its capacity is
// below want, or the file system resize waits for the node.
func resizing(pvc *corev1.PersistentVolumeClaim, want resource.Quantity) bool {
	if pvc.Status.Phase != corev1.ClaimBound {
		return false // provisioned at its request once bound
	}
	for _, c := range pvc.Status.Conditions {
		if (c.Type == corev1.PersistentVolumeClaimFileSystemResizePending || c.Type == corev1.PersistentVolumeClaimResizing) &&
			c.Status == corev1.ConditionTrue {
			return true
		}
	}
	have, ok := pvc.Status.Capacity[corev1.ResourceStorage]
	return ok && have.Cmp(want) < 0
}

// reconcileClaims grows the existing claims of every claim template to the template's storage request
// where their StorageClass allows it, and records in the scope what it found (s.claims, nil without
// claim templates).
func (r *Reconciler) reconcileClaims(ctx context.Context, s *scope) error {
	ests := s.ests
	requests := claimRequests(ests)
	if len(requests) == 0 {
		return nil
	}
	var pvcs corev1.PersistentVolumeClaimList
	if err := r.APIReader.List(ctx, &pvcs, client.InNamespace(ests.Namespace),
		client.MatchingLabels{extendedv1alpha1.NameLabel: ests.Name}); err != nil {
		return fmt.Errorf("listing the claims: %w", err)
	}
	slices.SortFunc(pvcs.Items, func(a, b corev1.PersistentVolumeClaim) int { return strings.Compare(a.Name, b.Name) })
	rep := &claimReport{blocked: map[string][]claimState{}}
	expandable := map[string]bool{}
	var grown []string
	for i := range pvcs.Items {
		pvc := &pvcs.Items[i]
		tmpl := claimTemplateOf(ests.Name, pvc.Name, requests)
		if tmpl == "" || !pvc.DeletionTimestamp.IsZero() {
			continue
		}
		rep.total++
		want := requests[tmpl]
		req := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		if req.Cmp(want) >= 0 {
			if resizing(pvc, want) {
				rep.pending = append(rep.pending, newClaimState(pvc, want))
			}
			continue
		}
		if pvc.Status.Phase != corev1.ClaimBound {
			// Only a bound claim can grow (API validation); once bound, a later reconcile grows it.
			rep.pending = append(rep.pending, newClaimState(pvc, want))
			continue
		}
		class := claimClass(pvc)
		ok, known := expandable[class]
		if !known {
			var err error
			if ok, err = r.allowsExpansion(ctx, class); err != nil {
				return err
			}
			expandable[class] = ok
		}
		if !ok {
			rep.blocked[class] = append(rep.blocked[class], newClaimState(pvc, want))
			continue
		}
		refused, err := r.growClaim(ctx, pvc, want)
		if err != nil {
			return err
		}
		if refused {
			// Its admission reads StorageClasses from its own cache: a class just changed is tried again.
			rep.blocked[class] = append(rep.blocked[class], newClaimState(pvc, want))
			s.requeueAfter = minPositive(s.requeueAfter, claimResizePoll)
			continue
		}
		grown = append(grown, fmt.Sprintf("%s from %s to %s", pvc.Name, req.String(), want.String()))
		rep.pending = append(rep.pending, newClaimState(pvc, want))
	}
	if len(grown) > 0 {
		claimsResized.WithLabelValues(ests.Namespace, ests.Name).Add(float64(len(grown)))
		r.event(ests, nil, corev1.EventTypeNormal, extendedv1alpha1.EventClaimsResized, "Resize",
			"Asked %d claims to grow to their template's storage request: %s", len(grown), strings.Join(grown, ", "))
	}
	if len(rep.pending) > 0 {
		s.requeueAfter = minPositive(s.requeueAfter, claimResizePoll)
	}
	s.claims = rep
	return nil
}

// allowsExpansion reports whether the StorageClass sets allowVolumeExpansion: true (a claim without a
// class, or whose class does not exist, cannot grow: the API server's resize admission refuses it).
func (r *Reconciler) allowsExpansion(ctx context.Context, class string) (bool, error) {
	if class == "" {
		return false, nil
	}
	sc := &storagev1.StorageClass{}
	if err := r.Cache.Get(ctx, client.ObjectKey{Name: class}, sc); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading StorageClass %s: %w", class, err)
	}
	return ptr.Deref(sc.AllowVolumeExpansion, false), nil
}

// growClaim sets the claim's storage request to want, with a resourceVersion precondition (a claim
// grown further meanwhile is never shrunk back). refused says the API server would not let it grow (its
// resize admission read another StorageClass than the cache): the claim is reported, not retried.
func (r *Reconciler) growClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim, want resource.Quantity) (refused bool, err error) {
	orig := pvc.DeepCopy()
	if pvc.Spec.Resources.Requests == nil {
		pvc.Spec.Resources.Requests = corev1.ResourceList{}
	}
	pvc.Spec.Resources.Requests[corev1.ResourceStorage] = want
	err = r.Client.Patch(ctx, pvc, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
		ctrl.LoggerFrom(ctx).Info("the API server refuses to grow a claim", "claim", pvc.Name, "error", err.Error())
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("growing claim %s: %w", pvc.Name, err)
	}
	return false, nil
}

// applyClaimsResized sets ClaimsResized from the claims reconcileClaims found: only with claim templates,
// and only when it looked (after an error before it, the condition stays as it was).
func applyClaimsResized(ests *extendedv1alpha1.ExtendedStatefulSet, s *scope, set func(string, bool, string, string)) {
	if len(claimRequests(ests)) == 0 {
		meta.RemoveStatusCondition(&ests.Status.Conditions, extendedv1alpha1.ConditionClaimsResized)
		return
	}
	if s.claims == nil {
		return
	}
	status, reason, msg := s.claims.condition()
	set(extendedv1alpha1.ConditionClaimsResized, status, reason, msg)
}

// condition is the ClaimsResized condition of the report: claims that cannot grow come first (only a
// change by the user helps them), then the resizes under way.
func (rep *claimReport) condition() (bool, string, string) {
	var parts []string
	classes := make([]string, 0, len(rep.blocked))
	for c := range rep.blocked {
		classes = append(classes, c)
	}
	slices.Sort(classes)
	for _, c := range classes {
		claims := rep.blocked[c]
		if c == "" {
			parts = append(parts, fmt.Sprintf("%s no StorageClass, so they cannot be expanded: %s",
				countClaims(len(claims), "has", "have"), nameClaims(claims)))
			continue
		}
		parts = append(parts, fmt.Sprintf("StorageClass %q does not allow volume expansion (allowVolumeExpansion is not true): %s below the template's storage request: %s",
			c, countClaims(len(claims), "stays", "stay"), nameClaims(claims)))
	}
	if len(parts) > 0 {
		msg := strings.Join(parts, "; ") + "; the pods keep running on them"
		if len(rep.pending) > 0 {
			msg += fmt.Sprintf("; %s growing: %s", countClaims(len(rep.pending), "is", "are"), nameClaims(rep.pending))
		}
		return false, extendedv1alpha1.ReasonExpansionNotAllowed, msg
	}
	if len(rep.pending) > 0 {
		return false, extendedv1alpha1.ReasonResizeInProgress, fmt.Sprintf("%d of %d claims are growing to their template's storage request: %s",
			len(rep.pending), rep.total, nameClaims(rep.pending))
	}
	return true, extendedv1alpha1.ReasonReconciled, fmt.Sprintf("every claim (%d) has the storage its template requests", rep.total)
}

// countClaims is "1 claim <one>" or "<n> claims <many>".
func countClaims(n int, one, many string) string {
	if n == 1 {
		return "1 claim " + one
	}
	return fmt.Sprintf("%d claims %s", n, many)
}

// nameClaims names the first claimsNamed claims and counts the rest.
func nameClaims(claims []claimState) string {
	names := make([]string, 0, claimsNamed)
	for _, c := range claims[:min(len(claims), claimsNamed)] {
		names = append(names, c.String())
	}
	out := strings.Join(names, ", ")
	if rest := len(claims) - claimsNamed; rest > 0 {
		out += fmt.Sprintf(" and %d more", rest)
	}
	return out
}

// claimEvents records a Warning Event when ClaimsResized turns to ExpansionNotAllowed (once per entry:
// its message counts claims, so a new message is no new problem).
func (r *Reconciler) claimEvents(ests, orig *extendedv1alpha1.ExtendedStatefulSet) {
	now := meta.FindStatusCondition(ests.Status.Conditions, extendedv1alpha1.ConditionClaimsResized)
	if now == nil || now.Status != metav1.ConditionFalse || now.Reason != extendedv1alpha1.ReasonExpansionNotAllowed {
		return
	}
	if was := meta.FindStatusCondition(orig.Status.Conditions, extendedv1alpha1.ConditionClaimsResized); was != nil &&
		was.Status == now.Status && was.Reason == now.Reason {
		return
	}
	r.event(ests, nil, corev1.EventTypeWarning, now.Reason, "Resize", "%s", now.Message)
}

// expansionWaiters maps a StorageClass change to the ExtendedStatefulSets whose claims wait for a class
// to allow expansion (ClaimsResized=False, ExpansionNotAllowed): StorageClasses change rarely, and which
// class each waits for is only in its message, so all of them look again.
func (r *Reconciler) expansionWaiters(ctx context.Context, _ client.Object) []reconcile.Request {
	var list extendedv1alpha1.ExtendedStatefulSetList
	if err := r.Cache.List(ctx, &list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the ExtendedStatefulSets waiting for volume expansion")
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		c := meta.FindStatusCondition(list.Items[i].Status.Conditions, extendedv1alpha1.ConditionClaimsResized)
		if c != nil && c.Reason == extendedv1alpha1.ReasonExpansionNotAllowed {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// expansionChanged passes StorageClasses created or whose allowVolumeExpansion changed.
func expansionChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*storagev1.StorageClass)
			n, ok2 := e.ObjectNew.(*storagev1.StorageClass)
			return ok1 && ok2 && ptr.Deref(o.AllowVolumeExpansion, false) != ptr.Deref(n.AllowVolumeExpansion, false)
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
