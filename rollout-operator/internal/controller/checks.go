package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// Several checks per step (spec.checks beside spec.check) and their verdicts. A spec with only
// spec.check and no verdict field runs step.go's seed path unchanged (its status also gets the
// "check" entry of status.rollingPodStatus.checks); any other spec runs runChecks: every check has
// its own initial delay (from status.rollingPodStatus.podsReadyTime), period, threshold and maxTries,
// and the step passes when every check passed.

// namedCheck is one check of a step: spec.check (named "check") or a spec.checks element.
type namedCheck struct {
	name string
	spec *rolloutv1alpha1.Check
}

// stepChecks lists the checks of every step: spec.check when it has a query or a webhook, then
// spec.checks.
func stepChecks(pr *rolloutv1alpha1.PhasedRollout) []namedCheck {
	var out []namedCheck
	if pr.Spec.Check.Query != nil || pr.Spec.Check.Webhook != nil {
		out = append(out, namedCheck{name: rolloutv1alpha1.SeedCheckName, spec: &pr.Spec.Check})
	}
	for i := range pr.Spec.Checks {
		out = append(out, namedCheck{name: pr.Spec.Checks[i].Name, spec: &pr.Spec.Checks[i].Check})
	}
	return out
}

// usesCheckSet reports whether the steps run runChecks: spec.checks is not empty or spec.check has a
// query and a verdict field.
func usesCheckSet(pr *rolloutv1alpha1.PhasedRollout) bool {
	return len(pr.Spec.Checks) > 0 || (pr.Spec.Check.Query != nil && pr.Spec.Check.CheckVerdict != (rolloutv1alpha1.CheckVerdict{}))
}

// runChecks runs every check of the current step that is due and has not passed yet, records each
// result, and decides the step (decideChecks).
func (r *Reconciler) runChecks(ctx context.Context, s *scope, partition, ordinal int32) (reconcile.Result, error) {
	checks, run := r.evaluateChecks(ctx, s, ordinal, true)
	return r.decideChecks(ctx, s, partition, checks, run)
}

// evaluateChecks runs every check of the step in status.rollingPodStatus that is due and has not
// passed yet, judging the pod of ordinal, and records each result in that step; it decides nothing
// (runChecks and the dry run decide from what it returns). live (not the dry run) counts the passes
// in a row in the Reconciler's memory (streak.go) and takes them, not the status's, as the truth.
func (r *Reconciler) evaluateChecks(ctx context.Context, s *scope, ordinal int32, live bool) ([]namedCheck, checkRun) {
	pr, st := s.pr, s.pr.Status.RollingPodStatus
	checks := stepChecks(pr)
	if st.PodsReadyTime == nil {
		st.PodsReadyTime = ptr.To(metav1.NewTime(ceilSecond(s.now)))
	}
	if st.AnalisysStartTime == nil {
		first := slices.MinFunc(checks, func(a, b namedCheck) int { return int(initialDelay(a) - initialDelay(b)) })
		st.AnalisysStartTime = ptr.To(metav1.NewTime(st.PodsReadyTime.Add(initialDelay(first))))
	}
	syncCheckStatuses(st, checks)
	run := checkRun{checkedAt: s.now}
	for i, c := range checks {
		cs := &st.Checks[i]
		var mem streak
		if live {
			mem = r.streaks.get(pr, c.name)
			// A check passed only if this process saw its streak: a status written by another
			// process (or before a lost write) does not count, the check runs again.
			cs.Passed = cs.Passed && mem.passes >= max(c.spec.SuccessThreshold, 1)
		}
		if cs.Passed {
			continue
		}
		if w := dueIn(st, c, cs, mem.lastCheck, s.now); w > 0 {
			run.requeue(w)
			continue
		}
		res := r.runQuery(ctx, s, ordinal, c.name, c.spec)
		run.checkedAt = time.Now()
		recordNamedCheck(pr, cs, c, res, run.checkedAt)
		if live {
			// The passes in a row this process saw, never the status's count plus one (streak.go).
			cs.ConsecutiveSuccessfulChecks = r.streaks.record(pr, c.name, res.Verdict == VerdictPass, run.checkedAt)
			cs.Passed = cs.ConsecutiveSuccessfulChecks >= max(c.spec.SuccessThreshold, 1)
		}
		run.messages = append(run.messages, c.name+": "+res.Message)
		switch {
		case cs.Passed:
			continue
		case res.Verdict == VerdictInconclusive:
			run.inconclusive = true
		case res.Verdict == VerdictError:
			run.errors = append(run.errors, c.name+": "+res.Message)
		}
		if c.spec.MaxTries != nil && cs.TotalChecks >= *c.spec.MaxTries {
			run.failed = append(run.failed, c)
		}
		run.requeue(time.Duration(max(c.spec.PeriodSeconds, 1)) * time.Second)
	}
	mirrorFirstCheck(st)
	if len(run.messages) > 0 {
		pr.Status.LastQueryResult = boundMessage(strings.Join(run.messages, "; "))
	}
	return checks, run
}

// notPassed lists the names of the checks of step st that have not reached their threshold.
func notPassed(st *rolloutv1alpha1.RollingPodStatus) string {
	var names []string
	for _, cs := range st.Checks {
		if !cs.Passed {
			names = append(names, cs.Name)
		}
	}
	return strings.Join(names, ", ")
}

// allChecksPassed reports whether every check of step st reached its threshold.
func allChecksPassed(st *rolloutv1alpha1.RollingPodStatus) bool {
	return !slices.ContainsFunc(st.Checks, func(cs rolloutv1alpha1.CheckStatus) bool { return !cs.Passed })
}

// checkRun is what one runChecks saw.
type checkRun struct {
	checkedAt    time.Time
	wait         time.Duration // the earliest next due check; 0 means none
	messages     []string      // "name: message" of each check run
	errors       []string      // "name: message" of each check run that could not be evaluated
	failed       []namedCheck  // checks that used up their maxTries
	inconclusive bool          // a check returned no data under noDataPolicy Inconclusive
}

func (run *checkRun) requeue(d time.Duration) {
	if run.wait == 0 || d < run.wait {
		run.wait = d
	}
}

// decideChecks decides the step after runChecks: a check that used up its maxTries fails it (Rollback
// when any failing check says so), an inconclusive check pauses it, every check passed moves the
// partition; otherwise the step waits for its next due check in its state.
func (r *Reconciler) decideChecks(ctx context.Context, s *scope, partition int32, checks []namedCheck, run checkRun) (reconcile.Result, error) {
	pr, st := s.pr, s.pr.Status.RollingPodStatus
	erroring, paused := false, false
	for i, c := range checks {
		if cs := st.Checks[i]; !cs.Passed && cs.LastResult == rolloutv1alpha1.CheckResultError {
			erroring = true
			paused = paused || c.spec.ErrorPolicy == rolloutv1alpha1.ErrorPause
		}
	}
	switch {
	case paused:
		st.Status = rolloutv1alpha1.StepCheckError
	case erroring:
		st.Status = rolloutv1alpha1.StepPrometheusError
	}
	switch {
	case len(run.errors) > 0:
		pr.Status.LastError = boundMessage(strings.Join(run.errors, "; "))
	case !erroring:
		pr.Status.LastError = ""
	}
	if len(run.failed) > 0 {
		whys, rollback := make([]string, 0, len(run.failed)), false
		for _, c := range run.failed {
			whys = append(whys, fmt.Sprintf("check %q used up maxTries=%d without %d consecutive passing checks", c.name, *c.spec.MaxTries, max(c.spec.SuccessThreshold, 1)))
			rollback = rollback || c.spec.OnFailure == rolloutv1alpha1.OnFailureRollback
		}
		return r.failStep(ctx, s, partition, strings.Join(whys, ", "), rollback)
	}
	if run.inconclusive {
		st.Status = rolloutv1alpha1.StepInconclusive
		return reconcile.Result{}, nil
	}
	if allChecksPassed(st) {
		return r.stepPassed(ctx, s, partition, run.checkedAt)
	}
	if !erroring {
		st.Status = rolloutv1alpha1.StepWaitForChecks
		if !slices.ContainsFunc(st.Checks, func(cs rolloutv1alpha1.CheckStatus) bool { return cs.LastCheckTime != nil }) {
			st.Status = rolloutv1alpha1.StepWaitForInitialDelay
		}
	}
	return reconcile.Result{RequeueAfter: run.wait}, nil
}

// initialDelay is a check's initialDelaySeconds (default 60).
func initialDelay(c namedCheck) time.Duration {
	return time.Duration(ptr.Deref(c.spec.InitialDelaySeconds, 60)) * time.Second
}

// dueIn returns how long check c still waits: its initial delay from podsReadyTime, then its period
// since its last run (the later of the status's and lastCheck, the one this process saw: the status
// may have missed a write); zero or less when it is due.
func dueIn(st *rolloutv1alpha1.RollingPodStatus, c namedCheck, cs *rolloutv1alpha1.CheckStatus, lastCheck, now time.Time) time.Duration {
	due := st.PodsReadyTime.Add(initialDelay(c))
	if cs.LastCheckTime != nil && cs.LastCheckTime.After(lastCheck) {
		lastCheck = cs.LastCheckTime.Time
	}
	if !lastCheck.IsZero() {
		if next := lastCheck.Add(time.Duration(max(c.spec.PeriodSeconds, 1)) * time.Second); next.After(due) {
			due = next
		}
	}
	return due.Sub(now)
}

// syncCheckStatuses makes status.rollingPodStatus.checks one entry per check, in the checks' order,
// keeping the records of the checks that were already there.
func syncCheckStatuses(st *rolloutv1alpha1.RollingPodStatus, checks []namedCheck) {
	out := make([]rolloutv1alpha1.CheckStatus, len(checks))
	for i, c := range checks {
		out[i] = rolloutv1alpha1.CheckStatus{Name: c.name}
		if j := slices.IndexFunc(st.Checks, func(cs rolloutv1alpha1.CheckStatus) bool { return cs.Name == c.name }); j >= 0 {
			out[i] = st.Checks[j]
		}
	}
	st.Checks = out
}

// recordNamedCheck counts one run of check c in its status and the metrics. A pass or a fail (or an
// error under errorPolicy CountAsFailure) is a try; an inconclusive run or an error under errorPolicy
// Pause is not, and it breaks the run of consecutive passes.
func recordNamedCheck(pr *rolloutv1alpha1.PhasedRollout, cs *rolloutv1alpha1.CheckStatus, c namedCheck, res CheckResult, at time.Time) {
	checksTotal.WithLabelValues(pr.Namespace, pr.Name, res.Verdict.String(), c.name).Inc()
	cs.LastCheckTime = ptr.To(metav1.NewTime(ceilSecond(at)))
	cs.LastResult, cs.LastValue = resultKind(res.Verdict), lastValue(res)
	switch {
	case res.Verdict == VerdictPass:
		cs.TotalChecks++
		cs.ConsecutiveSuccessfulChecks++
		cs.ConsecutiveFailedChecks = 0
		cs.Passed = cs.ConsecutiveSuccessfulChecks >= max(c.spec.SuccessThreshold, 1)
	case res.Verdict == VerdictInconclusive, res.Verdict == VerdictError && c.spec.ErrorPolicy == rolloutv1alpha1.ErrorPause:
		cs.ConsecutiveSuccessfulChecks = 0
	default:
		cs.TotalChecks++
		cs.ConsecutiveSuccessfulChecks = 0
		cs.ConsecutiveFailedChecks++
		cs.TotalFailedChecks++
	}
}

// mirrorFirstCheck keeps the step-level counters of status.rollingPodStatus with their meaning for
// the first check (spec.check when it has a query, else the first spec.checks element).
func mirrorFirstCheck(st *rolloutv1alpha1.RollingPodStatus) {
	if len(st.Checks) == 0 {
		return
	}
	cs := st.Checks[0]
	st.LastCheckTime = cs.LastCheckTime
	st.TotalChecks, st.TotalFailedChecks = cs.TotalChecks, cs.TotalFailedChecks
	st.ConsecutiveSuccessfulChecks, st.ConsecutiveFailedChecks = cs.ConsecutiveSuccessfulChecks, cs.ConsecutiveFailedChecks
}

// mirrorSeedCheck writes the "check" entry of status.rollingPodStatus.checks from the step-level
// counters of the seed path (step.go's recordCheck) and its last result.
func mirrorSeedCheck(st *rolloutv1alpha1.RollingPodStatus, res CheckResult, threshold int32) {
	cs := rolloutv1alpha1.CheckStatus{
		Name: rolloutv1alpha1.SeedCheckName, LastResult: resultKind(res.Verdict), LastValue: lastValue(res),
		LastCheckTime: st.LastCheckTime, TotalChecks: st.TotalChecks, TotalFailedChecks: st.TotalFailedChecks,
		ConsecutiveSuccessfulChecks: st.ConsecutiveSuccessfulChecks, ConsecutiveFailedChecks: st.ConsecutiveFailedChecks,
		Passed: st.ConsecutiveSuccessfulChecks >= threshold,
	}
	st.Checks = []rolloutv1alpha1.CheckStatus{cs}
}

// resetChecks forgets the passes of a step whose pods are no longer all available (as the seed path
// resets consecutiveSuccessfulChecks): every check must pass again, after its initial delay from
// when the pods are ready again.
func resetChecks(st *rolloutv1alpha1.RollingPodStatus) {
	st.PodsReadyTime = nil
	for i := range st.Checks {
		st.Checks[i].ConsecutiveSuccessfulChecks = 0
		st.Checks[i].Passed = false
	}
}

// resultKind names a verdict as status.rollingPodStatus.checks[].lastResult.
func resultKind(v Verdict) rolloutv1alpha1.CheckResultKind {
	switch v {
	case VerdictPass:
		return rolloutv1alpha1.CheckResultPass
	case VerdictFail:
		return rolloutv1alpha1.CheckResultFail
	case VerdictInconclusive:
		return rolloutv1alpha1.CheckResultInconclusive
	default:
		return rolloutv1alpha1.CheckResultError
	}
}

// lastValue is a result's lastValue: the samples, or the error, cut to maxValueBytes.
func lastValue(res CheckResult) string {
	if res.Value != "" {
		return res.Value
	}
	return cutUTF8(res.Message, maxValueBytes, "…")
}

// holdInconclusive keeps a step in state Inconclusive, running no check, until the PhasedRollout is
// edited (its generation moves past the one that saw the inconclusive result); then the step goes on.
func holdInconclusive(s *scope) bool {
	pr, st := s.pr, s.pr.Status.RollingPodStatus
	if st.Status != rolloutv1alpha1.StepInconclusive {
		return false
	}
	if pr.Status.ObservedGeneration == pr.Generation {
		return true
	}
	st.Status = rolloutv1alpha1.StepWaitForChecks
	return false
}

// checksNamed lists the names of the checks whose last result is kind and that have not passed.
func checksNamed(st *rolloutv1alpha1.RollingPodStatus, kind rolloutv1alpha1.CheckResultKind) string {
	var names []string
	for _, cs := range st.Checks {
		if !cs.Passed && cs.LastResult == kind {
			names = append(names, fmt.Sprintf("%q (%s)", cs.Name, cs.LastValue))
		}
	}
	return strings.Join(names, ", ")
}

// waitingMessage explains the states Inconclusive and CheckError, or returns "" in any other state.
func waitingMessage(pr *rolloutv1alpha1.PhasedRollout, st *rolloutv1alpha1.RollingPodStatus) (reason, msg string) {
	switch st.Status {
	case rolloutv1alpha1.StepInconclusive:
		return rolloutv1alpha1.ReasonCheckInconclusive, fmt.Sprintf("the checks of pod %s are inconclusive: %s returned no data (noDataPolicy Inconclusive); the partition stays at %d and no check runs until the PhasedRollout is edited or promoted",
			st.Pod, checksNamed(st, rolloutv1alpha1.CheckResultInconclusive), ptr.Deref(st.Partition, 0))
	case rolloutv1alpha1.StepCheckError:
		return rolloutv1alpha1.ReasonCheckError, fmt.Sprintf("the checks of pod %s are paused: a check could not be evaluated (errorPolicy Pause: not counted as a try, retried every periodSeconds): %s", st.Pod, pr.Status.LastError)
	}
	return "", ""
}

// setCheckConditions overrides the conditions derived from the phase in the states Inconclusive
// (Ready False, Stalled True: only an edit or a promotion goes on) and CheckError (Ready False,
// Reconciling stays True: the step goes on by itself), each with its reason.
func setCheckConditions(pr *rolloutv1alpha1.PhasedRollout) {
	st := pr.Status.RollingPodStatus
	if st == nil || (pr.Status.Phase != rolloutv1alpha1.PhaseRolling && pr.Status.Phase != rolloutv1alpha1.PhaseVerifying) {
		return
	}
	reason, msg := waitingMessage(pr, st)
	if reason == "" {
		return
	}
	set := func(t string, status metav1.ConditionStatus) {
		meta.SetStatusCondition(&pr.Status.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: pr.Generation})
	}
	set(rolloutv1alpha1.ConditionReady, metav1.ConditionFalse)
	if st.Status == rolloutv1alpha1.StepInconclusive {
		set(rolloutv1alpha1.ConditionStalled, metav1.ConditionTrue)
		set(rolloutv1alpha1.ConditionReconciling, metav1.ConditionFalse)
	}
}

// checkStateEvent records the Event of a step entering Inconclusive or CheckError and reports whether
// it did.
func (r *Reconciler) checkStateEvent(pr *rolloutv1alpha1.PhasedRollout, st *rolloutv1alpha1.RollingPodStatus) bool {
	reason, msg := waitingMessage(pr, st)
	if reason == "" {
		return false
	}
	r.Recorder.Eventf(pr, nil, corev1.EventTypeWarning, reason, "Wait", "%s", msg)
	return true
}

// checksProblem returns the first problem of the successConditions and of spec.checks' queries that
// the API server could not refuse (CEL cannot compile CEL or parse PromQL), or nil.
func checksProblem(pr *rolloutv1alpha1.PhasedRollout) *specProblem {
	for _, c := range stepChecks(pr) {
		field := "spec.check"
		if c.spec != &pr.Spec.Check {
			field = fmt.Sprintf("spec.checks[%s]", c.name)
			if c.spec.Query != nil {
				if p := queryProblem(pr, field, c.spec.Query); p != nil {
					return p
				}
			}
		}
		if c.spec.SuccessCondition == "" {
			continue
		}
		if _, err := compileCondition(c.spec.SuccessCondition); err != nil {
			return &specProblem{reason: rolloutv1alpha1.ReasonInvalidSuccessCondition, message: fmt.Sprintf("%s.successCondition does not compile: %v", field, err)}
		}
	}
	return nil
}
