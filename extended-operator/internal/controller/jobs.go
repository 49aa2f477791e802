package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// Upgrade Jobs (spec.upgradeJobs). Their state lives in the API like the rest of an upgrade: a version
// that waits for its pre Job is a StatefulSet at 0 replicas in phase PreJob, annotated with the Job's
// name; a version whose post Job runs is in phase PostJob; the Jobs themselves, owned by the
// ExtendedStatefulSet and named after their version, say how they ended. A Job name is deterministic, so
// a reconcile that does not see the Job yet (cache lag, a restarted operator) gets AlreadyExists and
// waits instead of running it twice.

// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete

// jobs are the ExtendedStatefulSet's upgrade Jobs, by name.
type jobs map[string]*batchv1.Job

// listJobs returns the upgrade Jobs the ExtendedStatefulSet controls.
func (r *Reconciler) listJobs(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet) (jobs, error) {
	var list batchv1.JobList
	if err := r.Cache.List(ctx, &list, client.InNamespace(ests.Namespace),
		client.MatchingLabels{extendedv1alpha1.NameLabel: ests.Name}); err != nil {
		return nil, fmt.Errorf("listing upgrade Jobs: %w", err)
	}
	out := jobs{}
	for i := range list.Items {
		if j := &list.Items[i]; metav1.IsControlledBy(j, ests) && j.Labels[extendedv1alpha1.UpgradeJobLabel] != "" {
			out[j.Name] = j
		}
	}
	return out, nil
}

// jobState is Running, Complete or Failed from the Job's own conditions; "" when there is no Job.
func jobState(j *batchv1.Job) string {
	if j == nil {
		return ""
	}
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return extendedv1alpha1.JobComplete
		case batchv1.JobFailed:
			return extendedv1alpha1.JobFailed
		}
	}
	return extendedv1alpha1.JobRunning
}

func jobVersion(j *batchv1.Job) int {
	n, _ := strconv.Atoi(j.Labels[extendedv1alpha1.VersionLabel])
	return n
}

// jobName is the name of the upgrade Job of kind for version n: <name>-<kind>-v<n>. Should that name
// belong to a Job of another template (a version number used again, e.g. by a zone added back), the
// template hash is appended, which is just as deterministic.
func jobName(ests *extendedv1alpha1.ExtendedStatefulSet, js jobs, kind string, n int) string {
	name := fmt.Sprintf("%s-%s-v%d", ests.Name, kind, n)
	hash := templateHash(ests)
	if j := js[name]; j != nil && j.Annotations[extendedv1alpha1.TemplateHashAnnotation] != hash {
		name += "-" + hash[:6]
	}
	return name
}

// jobTemplate is the spec's template of kind, nil when none is set.
func jobTemplate(ests *extendedv1alpha1.ExtendedStatefulSet, kind string) *batchv1.JobTemplateSpec {
	uj := ests.Spec.UpgradeJobs
	if uj == nil {
		return nil
	}
	if kind == extendedv1alpha1.UpgradeJobPre {
		return uj.Pre
	}
	return uj.Post
}

// buildJob returns the upgrade Job of kind for version n: the template as given, plus the operator's
// labels, the template hash it belongs to, and restartPolicy Never when unset (a Job requires one).
func buildJob(ests *extendedv1alpha1.ExtendedStatefulSet, tmpl *batchv1.JobTemplateSpec, kind, name string, n int) *batchv1.Job {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: ests.Namespace,
			Labels: mergeMaps(tmpl.Labels, map[string]string{
				extendedv1alpha1.NameLabel:       ests.Name,
				extendedv1alpha1.VersionLabel:    strconv.Itoa(n),
				extendedv1alpha1.UpgradeJobLabel: kind,
			}),
			Annotations: mergeMaps(tmpl.Annotations, map[string]string{extendedv1alpha1.TemplateHashAnnotation: templateHash(ests)}),
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	// Only the kind on the pods: the name and version labels could make them match a version's selector.
	job.Spec.Template.Labels = mergeMaps(job.Spec.Template.Labels, map[string]string{extendedv1alpha1.UpgradeJobLabel: kind})
	if job.Spec.Template.Spec.RestartPolicy == "" {
		job.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	}
	return job
}

// ensureJob returns the upgrade Job called name, creating it from the spec's template when it does not
// exist. It returns nil while the Job exists but the cache does not show it yet (AlreadyExists), and
// when the spec has no template of that kind any more.
func (r *Reconciler) ensureJob(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, js jobs, kind, name string, n int) (*batchv1.Job, error) {
	if j := js[name]; j != nil {
		return j, nil
	}
	tmpl := jobTemplate(ests, kind)
	if tmpl == nil {
		return nil, nil
	}
	job := buildJob(ests, tmpl, kind, name, n)
	if err := controllerutil.SetControllerReference(ests, job, r.Scheme); err != nil {
		return nil, err
	}
	if err := r.Client.Create(ctx, job); err != nil {
		if apierrors.IsAlreadyExists(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return nil, nil // created before; the cache shows it on the next reconcile
		}
		return nil, fmt.Errorf("creating upgrade Job %s: %w", name, err)
	}
	upgradeJobsCreated.WithLabelValues(ests.Namespace, ests.Name, kind).Inc()
	ctrl.LoggerFrom(ctx).Info("created an upgrade Job", "job", name, "kind", kind, "version", n)
	r.event(ests, job, corev1.EventTypeNormal, extendedv1alpha1.EventUpgradeJobCreated, "Create",
		"Created %s upgrade Job %s for version %d", kind, name, n)
	js[name] = job
	return job, nil
}

// preJobFor returns the pre Job name a new version of the zone waits for, and whether that Job already
// completed. With zones the pre Job runs once per version: a zone upgrading after the first finds the
// Job of a live version of another zone built from the same template and reuses it.
func preJobFor(ests *extendedv1alpha1.ExtendedStatefulSet, js jobs, all []*version, n int) (string, bool) {
	hash := templateHash(ests)
	for _, v := range all {
		name := v.annotation(extendedv1alpha1.PreJobAnnotation)
		if j := js[name]; name != "" && v.sts.DeletionTimestamp.IsZero() && !v.stale() && j != nil &&
			j.Annotations[extendedv1alpha1.TemplateHashAnnotation] == hash {
			return name, jobState(j) == extendedv1alpha1.JobComplete
		}
	}
	return jobName(ests, js, extendedv1alpha1.UpgradeJobPre, n), false
}

// drivePre waits for the pre Job of a version in phase PreJob: created if missing; Complete starts the
// version's pods; Failed marks the version stale (the upgrade does not start, the serving version is
// untouched).
func (r *Reconciler) drivePre(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, zs *zoneScope,
	v *version, desired int32) error {
	name := v.annotation(extendedv1alpha1.PreJobAnnotation)
	state := extendedv1alpha1.JobComplete // no Job to wait for (an annotation removed by hand)
	var job *batchv1.Job
	if name != "" {
		var err error
		if job, err = r.ensureJob(ctx, ests, zs.jobs, extendedv1alpha1.UpgradeJobPre, name, v.number); err != nil {
			return err
		}
		state = jobState(job)
		if job == nil && jobTemplate(ests, extendedv1alpha1.UpgradeJobPre) == nil {
			state = extendedv1alpha1.JobComplete // the pre Job was removed from the spec before it was created
		}
	}
	switch state {
	case extendedv1alpha1.JobComplete:
		phase, replicas := firstPhase(ests, zs.current, desired)
		return r.setPhase(ctx, ests, v, phase, replicas, r.Clock.Now(),
			"Version %d: pre upgrade Job %s completed, starting the pods", v.number, name)
	case extendedv1alpha1.JobFailed:
		msg := fmt.Sprintf("version %d: pre upgrade Job %s failed; the upgrade did not start", v.number, name)
		if zs.current != nil {
			msg += fmt.Sprintf(", version %d keeps serving", zs.current.number)
		}
		r.event(ests, job, corev1.EventTypeWarning, extendedv1alpha1.ReasonJobFailed, "PreUpgradeJob",
			"Pre upgrade Job %s of version %d failed: the upgrade is blocked", name, v.number)
		return r.markStale(ctx, ests, v, extendedv1alpha1.ReasonJobFailed, msg)
	}
	// Running (the Job's events wake the reconcile); poll in case the cache missed them.
	zs.requeueAfter = minPositive(zs.requeueAfter, pollWhileWaiting)
	return nil
}

// postJobName is the post Job of version n: the existing one of this template, else a new name.
func postJobName(ests *extendedv1alpha1.ExtendedStatefulSet, js jobs, n int) string {
	hash := templateHash(ests)
	for name, j := range js {
		if j.Labels[extendedv1alpha1.UpgradeJobLabel] == extendedv1alpha1.UpgradeJobPost && jobVersion(j) == n &&
			j.Annotations[extendedv1alpha1.TemplateHashAnnotation] == hash {
			return name
		}
	}
	return jobName(ests, js, extendedv1alpha1.UpgradeJobPost, n)
}

// reconcilePost runs the post Job once every zone runs the new template fully (each zone's newest version
// in phase PostJob, or already Done after a partial pass), and acts on its end: Complete, or Failed
// without rollbackOnPostFailure, makes every zone's version Done (lower versions deleted); Failed with it
// rolls every zone back to its previous version.
func (r *Reconciler) reconcilePost(ctx context.Context, s *scope) error {
	ests, zones, perZone, js := s.ests, s.layout, s.perZone, s.jobs
	pending, rollingBack := false, false
	for i, zs := range perZone {
		n := zs.newest
		if n != nil && n.stale() && rolledBack(n) {
			rollingBack = true // a zone rolled back already: the others follow, whatever became of the Job
			continue
		}
		if n == nil || n != zs.current || n.templateHash() != zones[i].hash || !n.rolledOut() ||
			(n.phase() != extendedv1alpha1.PhasePostJob && n.phase() != extendedv1alpha1.PhaseDone) {
			return nil // some zone still upgrades (or is stale): the post Job waits
		}
		pending = pending || n.phase() == extendedv1alpha1.PhasePostJob
	}
	if !pending {
		return nil
	}
	number := perZone[0].newest.number
	if rollingBack {
		return r.rollBackNext(ctx, ests, perZone, postJobName(ests, js, number))
	}
	name := postJobName(ests, js, number)
	job, err := r.ensureJob(ctx, ests, js, extendedv1alpha1.UpgradeJobPost, name, number)
	if err != nil {
		return err
	}
	state := jobState(job)
	if job == nil && jobTemplate(ests, extendedv1alpha1.UpgradeJobPost) == nil {
		state = extendedv1alpha1.JobComplete // the post Job was removed from the spec: nothing to wait for
	}
	// Without rollback the first zone moves first and a rollback marks a zone in this reconcile, so the
	// Event is recorded once even when a later write fails.
	first := perZone[0].newest.phase() == extendedv1alpha1.PhasePostJob && perZone[len(perZone)-1].newest.phase() == extendedv1alpha1.PhasePostJob
	switch state {
	case extendedv1alpha1.JobComplete:
		if first && job != nil {
			r.event(ests, job, corev1.EventTypeNormal, extendedv1alpha1.EventUpgradeJobSucceeded, "PostUpgradeJob",
				"Post upgrade Job %s of version %d completed", name, number)
		}
		return r.finishPost(ctx, ests, perZone, "post upgrade Job "+name+" completed")
	case extendedv1alpha1.JobFailed:
		rollback := ests.Spec.UpgradeJobs != nil && ests.Spec.UpgradeJobs.RollbackOnPostFailure
		if first {
			what := "version " + strconv.Itoa(number) + " keeps running"
			if rollback {
				what = "rolling back to the previous version"
			}
			r.event(ests, job, corev1.EventTypeWarning, extendedv1alpha1.ReasonJobFailed, "PostUpgradeJob",
				"Post upgrade Job %s of version %d failed: %s", name, number, what)
		}
		if !rollback {
			return r.finishPost(ctx, ests, perZone, "post upgrade Job "+name+" failed (no rollback asked for)")
		}
		return r.rollBackNext(ctx, ests, perZone, name)
	}
	for _, zs := range perZone {
		zs.postJob = name // running: the status says so
	}
	return nil
}

// finishPost makes every zone's version in phase PostJob Done and deletes the lower versions.
func (r *Reconciler) finishPost(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, perZone []*zoneScope, why string) error {
	for _, zs := range perZone {
		v := zs.newest
		if v.phase() != extendedv1alpha1.PhasePostJob {
			continue
		}
		if err := r.setPhase(ctx, ests, v, extendedv1alpha1.PhaseDone, v.specReplicas(), r.Clock.Now(),
			"Version %d done: %s", v.number, why); err != nil {
			return err
		}
		for _, old := range zs.versions {
			if old.number < v.number {
				if err := r.deleteVersion(ctx, ests, old, "version "+strconv.Itoa(v.number)+" done"); err != nil {
					return err
				}
			}
		}
		zs.previous = nil
	}
	return nil
}

// rollBackNext rolls back one zone at a time, the last upgraded first, as upgrades go zone by zone: a
// zone starts once the one rolled back before it runs its previous version fully and the failed
// version has no pod left.
func (r *Reconciler) rollBackNext(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, perZone []*zoneScope, job string) error {
	for i := len(perZone) - 1; i >= 0; i-- {
		zs := perZone[i]
		n := zs.newest
		if !n.stale() && n.phase() == extendedv1alpha1.PhasePostJob {
			return r.rollBack(ctx, ests, zs, job)
		}
		if !n.stale() || !rolledBack(n) {
			continue // nothing to roll back (no previous version was left: it stays Done)
		}
		if n.specReplicas() > 0 || n.sts.Status.Replicas > 0 || (zs.current != nil && !zs.current.rolledOut()) {
			zs.requeueAfter = minPositive(zs.requeueAfter, pollWhileWaiting)
			return nil // this zone is still rolling back
		}
	}
	return nil
}

// rollBack restores a zone's previous version after its post Job failed: the new version is marked
// stale (reason RolledBack) and the previous one serves again. Without volumes the new version keeps
// its pods until the previous one is rolled out again (driveNewest); with volumes the ordinals move
// back one at a time (handBack). Without a previous version (deleted by hand) the new one stays, Done.
func (r *Reconciler) rollBack(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, zs *zoneScope, job string) error {
	v, prev := zs.newest, zs.previous
	if v.phase() != extendedv1alpha1.PhasePostJob || v.stale() {
		return nil
	}
	if prev == nil {
		return r.finishPost(ctx, ests, []*zoneScope{zs}, "post upgrade Job "+job+" failed, but no previous version is left to roll back to")
	}
	msg := fmt.Sprintf("version %d: post upgrade Job %s failed; rolled back to version %d", v.number, job, prev.number)
	if err := r.markStaleKeeping(ctx, ests, v, extendedv1alpha1.ReasonRolledBack, msg, true); err != nil {
		return err
	}
	zs.current, zs.previous = prev, nil
	return nil
}

// rolledBack reports whether a stale version was marked stale by a rollback (it serves until the
// previous version runs again).
func rolledBack(v *version) bool {
	return strings.HasPrefix(v.annotation(extendedv1alpha1.StaleReasonAnnotation), extendedv1alpha1.ReasonRolledBack+":")
}

// keepPrevious reports whether lower versions are kept for a rollback while the post Job runs.
func keepPrevious(ests *extendedv1alpha1.ExtendedStatefulSet) bool {
	uj := ests.Spec.UpgradeJobs
	return uj != nil && uj.Post != nil && uj.RollbackOnPostFailure
}

// pruneJobs deletes the finished upgrade Jobs beyond historyLimit, oldest first. Jobs of live versions
// (a version's pre Job, the post Job of a live version number) are never counted or deleted: they are
// the record of that version's upgrade.
func (r *Reconciler) pruneJobs(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, all []*version, js jobs) error {
	limit := 3
	if uj := ests.Spec.UpgradeJobs; uj != nil && uj.HistoryLimit != nil {
		limit = int(*uj.HistoryLimit)
	}
	inUse := map[string]bool{}
	live := map[int]bool{}
	for _, v := range all {
		if v.sts.DeletionTimestamp.IsZero() {
			inUse[v.annotation(extendedv1alpha1.PreJobAnnotation)] = true
			live[v.number] = true
		}
	}
	var past []*batchv1.Job
	for name, j := range js {
		isPost := j.Labels[extendedv1alpha1.UpgradeJobLabel] == extendedv1alpha1.UpgradeJobPost
		if inUse[name] || (isPost && live[jobVersion(j)]) || !j.DeletionTimestamp.IsZero() ||
			jobState(j) == extendedv1alpha1.JobRunning {
			continue
		}
		past = append(past, j)
	}
	if len(past) <= limit {
		return nil
	}
	slices.SortFunc(past, func(a, b *batchv1.Job) int {
		if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
			return c
		}
		return jobVersion(b) - jobVersion(a)
	})
	for _, j := range past[limit:] {
		if err := r.Client.Delete(ctx, j, client.Preconditions{UID: &j.UID},
			client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting upgrade Job %s: %w", j.Name, err)
		}
		delete(js, j.Name)
		ctrl.LoggerFrom(ctx).Info("deleted an upgrade Job beyond the history limit", "job", j.Name, "historyLimit", limit)
		r.event(ests, j, corev1.EventTypeNormal, extendedv1alpha1.EventUpgradeJobDeleted, "Delete",
			"Deleted upgrade Job %s of version %d (historyLimit %d)", j.Name, jobVersion(j), limit)
	}
	return nil
}

// jobStatus is status.upgradeJobs: the Jobs that exist, newest version first.
func jobStatus(js jobs) []extendedv1alpha1.UpgradeJobStatus {
	out := make([]extendedv1alpha1.UpgradeJobStatus, 0, len(js))
	for name, j := range js {
		typ := extendedv1alpha1.UpgradeJobTypePre
		if j.Labels[extendedv1alpha1.UpgradeJobLabel] == extendedv1alpha1.UpgradeJobPost {
			typ = extendedv1alpha1.UpgradeJobTypePost
		}
		out = append(out, extendedv1alpha1.UpgradeJobStatus{Name: name, Type: typ, Version: int32(jobVersion(j)), State: jobState(j)})
	}
	slices.SortFunc(out, func(a, b extendedv1alpha1.UpgradeJobStatus) int {
		if a.Version != b.Version {
			return int(b.Version - a.Version)
		}
		return strings.Compare(a.Name, b.Name)
	})
	if len(out) == 0 {
		return nil
	}
	return out[:min(len(out), 32)]
}

// latestPostJob is the post Job of the highest version, nil when there is none.
func latestPostJob(js jobs) *batchv1.Job {
	var latest *batchv1.Job
	for _, j := range js {
		if j.Labels[extendedv1alpha1.UpgradeJobLabel] != extendedv1alpha1.UpgradeJobPost {
			continue
		}
		if latest == nil || jobVersion(j) > jobVersion(latest) ||
			(jobVersion(j) == jobVersion(latest) && latest.CreationTimestamp.Before(&j.CreationTimestamp)) {
			latest = j
		}
	}
	return latest
}

// firstPhase is the phase and replica count a new version's pods start with: canaries first, unless none
// are asked for or nothing serves that they would protect; with volumes the ordinals move over one at a
// time from 0 replicas (handover.go).
func firstPhase(ests *extendedv1alpha1.ExtendedStatefulSet, current *version, desired int32) (string, int32) {
	canaries := min(ptr.Deref(ests.Spec.UpdateStrategy.Canaries, 1), desired)
	phase, replicas := extendedv1alpha1.PhaseCanary, canaries
	if canaries <= 0 || current == nil {
		phase, replicas = extendedv1alpha1.PhaseRollout, desired
	}
	if current != nil && len(ests.Spec.Template.Spec.VolumeClaimTemplates) > 0 {
		replicas = 0
	}
	return phase, replicas
}
