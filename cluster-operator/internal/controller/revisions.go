package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
)

// Revisions: like a StatefulSet, every distinct spec.template is stored in a ControllerRevision owned
// by the StatefulCluster, so that pods of an older revision can still be built (a partition keeps the
// oldest identities on it) and a template set back to an earlier one reuses that revision (rollback).

// revisionData is what a ControllerRevision stores: the pod template.
type revisionData struct {
	Template corev1.PodTemplateSpec `json:"template"`
}

// revisionSet is the state of the revisions in one reconcile.
type revisionSet struct {
	update, current *appsv1.ControllerRevision
	all             []*appsv1.ControllerRevision
	templates       map[string]*corev1.PodTemplateSpec
}

// template returns the pod template of a revision name, falling back to the update revision's.
func (s *revisionSet) template(name string) *corev1.PodTemplateSpec {
	if t, ok := s.templates[name]; ok {
		return t
	}
	return s.templates[s.update.Name]
}

func revisionName(sc *clusterv1alpha1.StatefulCluster, raw []byte, collisions int32) string {
	h := fnv.New32a()
	h.Write(raw)
	h.Write([]byte(strconv.Itoa(int(collisions))))
	return sc.Name + "-" + rand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10))
}

// syncRevisions finds or creates the update revision (the current template's) and finds the current
// one (status.currentRevision while it still exists).
func (r *Reconciler) syncRevisions(ctx context.Context, sc *clusterv1alpha1.StatefulCluster) (*revisionSet, error) {
	raw, err := json.Marshal(revisionData{Template: sc.Spec.Template})
	if err != nil {
		return nil, err
	}
	set, maxRevision, err := r.listRevisions(ctx, sc)
	if err != nil {
		return nil, err
	}
	switch {
	case set.update == nil:
		rev, err := r.createRevision(ctx, sc, raw, maxRevision+1)
		if err != nil {
			return nil, err
		}
		set.update = rev
		set.all = append(set.all, rev)
		set.templates[rev.Name] = sc.Spec.Template.DeepCopy()
	case set.update.Revision < maxRevision:
		// The template went back to an earlier one: that revision becomes the newest again.
		set.update.Revision = maxRevision + 1
		if err := r.Client.Update(ctx, set.update); err != nil {
			return nil, fmt.Errorf("renumbering ControllerRevision %s: %w", set.update.Name, err)
		}
	}
	for _, rev := range set.all {
		if rev.Name == sc.Status.CurrentRevision {
			set.current = rev
		}
	}
	if set.current == nil {
		set.current = set.update
	}
	return set, nil
}

// listRevisions reads the StatefulCluster's revisions, oldest first, with their templates and the
// highest revision number; the update revision is set when one holds the current template.
func (r *Reconciler) listRevisions(ctx context.Context, sc *clusterv1alpha1.StatefulCluster) (*revisionSet, int64, error) {
	var list appsv1.ControllerRevisionList
	if err := r.Cache.List(ctx, &list, client.InNamespace(sc.Namespace), client.MatchingLabels{clusterv1alpha1.ClusterNameLabel: sc.Name}); err != nil {
		return nil, 0, fmt.Errorf("listing ControllerRevisions: %w", err)
	}
	set := &revisionSet{templates: map[string]*corev1.PodTemplateSpec{}}
	var maxRevision int64
	for i := range list.Items {
		rev := &list.Items[i]
		if ref := metav1.GetControllerOf(rev); ref == nil || ref.UID != sc.UID {
			continue
		}
		set.all = append(set.all, rev)
		maxRevision = max(maxRevision, rev.Revision)
		var data revisionData
		if err := json.Unmarshal(rev.Data.Raw, &data); err == nil {
			set.templates[rev.Name] = &data.Template
			// Compared decoded, not as bytes: the API server may re-encode the stored JSON.
			if set.update == nil && equality.Semantic.DeepEqual(data.Template, sc.Spec.Template) {
				set.update = rev
			}
		}
	}
	slices.SortFunc(set.all, func(a, b *appsv1.ControllerRevision) int { return int(a.Revision - b.Revision) })
	return set, maxRevision, nil
}

// createRevision stores the current template (raw) as revision number n. A revision of that name
// holding another template is a hash collision: status.collisionCount goes up and the next reconcile
// tries the next name.
func (r *Reconciler) createRevision(ctx context.Context, sc *clusterv1alpha1.StatefulCluster, raw []byte, n int64) (*appsv1.ControllerRevision, error) {
	collisions := ptr.Deref(sc.Status.CollisionCount, 0)
	rev := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name: revisionName(sc, raw, collisions), Namespace: sc.Namespace,
			Labels:          map[string]string{clusterv1alpha1.ClusterNameLabel: sc.Name},
			OwnerReferences: []metav1.OwnerReference{*controllerRef(sc)},
		},
		Data:     runtime.RawExtension{Raw: raw},
		Revision: n,
	}
	err := r.Client.Create(ctx, rev)
	if err == nil {
		return rev, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating ControllerRevision %s: %w", rev.Name, err)
	}
	existing := &appsv1.ControllerRevision{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(rev), existing); err != nil {
		return nil, err
	}
	var data revisionData
	if err := json.Unmarshal(existing.Data.Raw, &data); err != nil || !equality.Semantic.DeepEqual(data.Template, sc.Spec.Template) {
		// A hash collision: the next name includes a higher collision count.
		sc.Status.CollisionCount = ptr.To(collisions + 1)
		return nil, fmt.Errorf("ControllerRevision %s exists with another template (hash collision)", rev.Name)
	}
	return existing, nil
}

// truncateHistory deletes the oldest revisions beyond revisionHistoryLimit that no pod uses.
func (r *Reconciler) truncateHistory(ctx context.Context, sc *clusterv1alpha1.StatefulCluster, set *revisionSet, used map[string]bool) error {
	limit := int(ptr.Deref(sc.Spec.RevisionHistoryLimit, 0))
	var old []*appsv1.ControllerRevision
	for _, rev := range set.all {
		if rev.Name != set.update.Name && rev.Name != set.current.Name && !used[rev.Name] {
			old = append(old, rev)
		}
	}
	for i := 0; i < len(old)-limit; i++ {
		if err := r.Client.Delete(ctx, old[i]); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting ControllerRevision %s: %w", old[i].Name, err)
		}
	}
	return nil
}
