//go:build integration

package controller

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// shiftedClock is the real clock moved by an offset the test sets: time flows, as the operator's
// requeues and debounce need, and the test puts the operator's wall time where it wants it.
type shiftedClock struct{ offset atomic.Int64 }

func (c *shiftedClock) Now() time.Time                   { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *shiftedClock) Since(ts time.Time) time.Duration { return c.Now().Sub(ts) }

// set makes the clock read at, from now on moving with the real clock.
func (c *shiftedClock) set(at time.Time) { c.offset.Store(int64(time.Until(at))) }

// startOperatorWithClock is startOperator with the operator's clock replaced.
func startOperatorWithClock(t *testing.T, clk *shiftedClock) {
	t.Helper()
	opts := Options{ConfigQuietPeriod: 500 * time.Millisecond, ConfigMaxDelay: 5 * time.Second, Overrides: opsutil.Overrides{Clock: clk}}
	suite.StartManager(t, opts.Setup, func(o *ctrl.Options) { CacheOptions(&o.Cache) })
}

// withConfigMap gives the fixture's ExtendedStatefulSet's container the env of ConfigMap "conf", created
// here.
func (f *fixture) withConfigMap(ests *extendedv1alpha1.ExtendedStatefulSet) {
	f.t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "conf", Namespace: f.ns}, Data: map[string]string{"port": "80"}}
	require.NoError(f.t, suite.Client.Create(f.t.Context(), cm))
	ests.Spec.Template.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}},
	}
}

// TestRestartWindows checks ES-B3 with the operator's clock set by the test: a configuration change
// outside the restart window does not roll the pods, RestartPending=True names when the window opens
// (one Normal Event; a further edit while it waits writes nothing), and the roll happens when the window
// opens, brought by the operator's own requeue, not by an event; inside the window a change rolls as
// usual; a template change outside the window starts its new version at once.
func TestRestartWindows(t *testing.T) {
	clk := &shiftedClock{}
	clk.set(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	startOperatorWithClock(t, clk)
	f := newFixture(t)
	ests := f.newESTS(3, "app:1")
	f.withConfigMap(ests)
	ests.Spec.UpdateStrategy.RestartWindows = []extendedv1alpha1.RestartWindow{
		{Schedule: "0 3 * * *", Duration: metav1.Duration{Duration: time.Hour}},
	}
	changes := watchTemplateChanges(t, f.ns)
	f.create(ests)
	f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.NotEmpty(c, sts.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation])
	}, "version 1 with a config hash")
	f.setStatus(1, 3)
	f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, extendedv1alpha1.ReasonReconciled)
	f.waitCondition(extendedv1alpha1.ConditionRestartPending, metav1.ConditionFalse, extendedv1alpha1.ReasonReconciled)
	pendingEvents := func() int {
		return testsupport.Occurrences(testsupport.Events(t, suite.Client, f.ns, "ExtendedStatefulSet", f.name, extendedv1alpha1.ReasonOutsideRestartWindow))
	}
	const opens = "2026-12-01T03:00:00Z"

	t.Run("a change outside the window waits", func(t *testing.T) {
		patchConfigMap(t, f.ns, "conf", func(cm *corev1.ConfigMap) { cm.Data["port"] = "81" })
		f.waitCondition(extendedv1alpha1.ConditionRestartPending, metav1.ConditionTrue, extendedv1alpha1.ReasonOutsideRestartWindow)
		c := f.condition(extendedv1alpha1.ConditionRestartPending)
		assert.Equal(t, `referenced configuration changed; the pods restart when the next restart window opens at `+opens+` ("0 3 * * *" UTC for 1h)`, c.Message)
		require.Eventually(t, func() bool { return pendingEvents() == 1 }, wait, tick, "one Event on entering RestartPending")
		ready := f.condition(extendedv1alpha1.ConditionReady)
		assert.Equal(t, metav1.ConditionTrue, ready.Status, "the pods that run keep running: %s", ready.Message)
		testsupport.NeverWithin(t, 2*time.Second, 50*time.Millisecond, func() bool { return changes.count("web-v1") > 0 }, "rolled outside the window")
	})

	t.Run("another change while waiting writes nothing", func(t *testing.T) {
		rv := f.get().ResourceVersion
		patchConfigMap(t, f.ns, "conf", func(cm *corev1.ConfigMap) { cm.Data["port"] = "82" })
		testsupport.NeverWithin(t, 2*time.Second, 50*time.Millisecond, func() bool { return changes.count("web-v1") > 0 }, "rolled outside the window")
		assert.Equal(t, rv, f.get().ResourceVersion, "the status was rewritten while waiting")
		assert.Equal(t, 1, pendingEvents())
	})

	t.Run("the roll happens when the window opens", func(t *testing.T) {
		windowStart := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
		clk.set(windowStart.Add(-4 * time.Second))
		// An edit a few seconds before the opening: still deferred (the same window, so no new Event and
		// no status write); from here only the operator's requeue can bring the roll.
		patchConfigMap(t, f.ns, "conf", func(cm *corev1.ConfigMap) { cm.Data["port"] = "83" })
		testsupport.NeverWithin(t, 2*time.Second, 50*time.Millisecond, func() bool { return changes.count("web-v1") > 0 }, "rolled before the window opened")
		require.Eventually(t, func() bool { return changes.count("web-v1") == 1 }, wait, tick, "rolled once the window opened")
		assert.False(t, clk.Now().Before(windowStart), "rolled at %s, before the window opened", clk.Now())
		f.waitCondition(extendedv1alpha1.ConditionRestartPending, metav1.ConditionFalse, extendedv1alpha1.ReasonReconciled)
		assert.Equal(t, 1, pendingEvents())
		f.setStatus(1, 3)
		f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, extendedv1alpha1.ReasonReconciled)
	})

	t.Run("inside the window a change rolls as usual", func(t *testing.T) {
		patchConfigMap(t, f.ns, "conf", func(cm *corev1.ConfigMap) { cm.Data["port"] = "84" })
		require.Eventually(t, func() bool { return changes.count("web-v1") == 2 }, wait, tick)
		assert.Equal(t, metav1.ConditionFalse, f.condition(extendedv1alpha1.ConditionRestartPending).Status)
		f.setStatus(1, 3)
	})

	t.Run("a template change outside the window is not held", func(t *testing.T) {
		clk.set(time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC))
		f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
			e.Spec.Template.Spec.Template.Spec.Containers[0].Image = "app:2"
		})
		f.waitSTS(2, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "version 2 started outside the window")
	})
}

// TestRestartWindowRefusals checks what the CRD refuses at apply time in restartWindows: a schedule
// that is not a 5-field cron expression of the allowed values (descriptors and a CRON_TZ= prefix
// included), a duration outside 1m..168h, a time zone that is not a name, more than 16 windows.
func TestRestartWindowRefusals(t *testing.T) {
	f := newFixture(t)
	w := func(schedule, duration, tz string) extendedv1alpha1.RestartWindow {
		d, err := time.ParseDuration(duration)
		require.NoError(t, err)
		return extendedv1alpha1.RestartWindow{Schedule: schedule, Duration: metav1.Duration{Duration: d}, TimeZone: tz}
	}
	apply := func(ws ...extendedv1alpha1.RestartWindow) error {
		ests := f.newESTS(1, "app:1")
		ests.GenerateName, ests.Name = "w-", ""
		ests.Spec.UpdateStrategy.RestartWindows = ws
		return suite.Client.Create(t.Context(), ests)
	}
	for _, ok := range []extendedv1alpha1.RestartWindow{
		w("0 3 * * *", "1h", ""),
		w("*/15 22-23,0-5 ? jan-mar,DEC mon-fri", "1m", "Europe/Berlin"),
		w(" 30 2 1 * ? ", "168h", "America/Argentina/Buenos_Aires"),
		w("0 0 * * 0", "90m", "Etc/GMT+5"),
	} {
		assert.NoError(t, apply(ok), "%+v", ok)
	}
	for _, tc := range []struct {
		w    extendedv1alpha1.RestartWindow
		want string
	}{
		{w("@daily", "1h", ""), "schedule must be a 5-field cron expression"},
		{w("CRON_TZ=UTC 0 3 * * *", "1h", ""), "schedule must be a 5-field cron expression"},
		{w("0 3 * *", "1h", ""), "schedule must be a 5-field cron expression"},
		{w("0 0 3 * * *", "1h", ""), "schedule must be a 5-field cron expression"},
		{w("60 3 * * *", "1h", ""), "schedule must be a 5-field cron expression"},
		{w("0 24 * * *", "1h", ""), "schedule must be a 5-field cron expression"},
		{w("0 3 0 * *", "1h", ""), "schedule must be a 5-field cron expression"},
		{w("0 3 * 13 *", "1h", ""), "schedule must be a 5-field cron expression"},
		{w("0 3 * * 7", "1h", ""), "schedule must be a 5-field cron expression"},
		{w("*/0 3 * * *", "1h", ""), "schedule must be a 5-field cron expression"},
		{w("0 3 * * *", "59s", ""), "duration must be a duration between 1m and 168h"},
		{w("0 3 * * *", "169h", ""), "duration must be a duration between 1m and 168h"},
		{w("0 3 * * *", "1h", "../etc/passwd"), "timeZone"},
	} {
		err := apply(tc.w)
		if assert.Error(t, err, "%+v", tc.w) {
			assert.Contains(t, err.Error(), tc.want, "%+v", tc.w)
		}
	}
	many := make([]extendedv1alpha1.RestartWindow, 17)
	for i := range many {
		many[i] = w("0 3 * * *", "1h", "")
	}
	err := apply(many...)
	if assert.Error(t, err) {
		assert.Contains(t, err.Error(), "must have at most 16 items")
	}
}

// TestRestartWindowInvalid checks what the CRD cannot refuse (here a range whose end is below its
// start): Stalled=True InvalidRestartWindow at once, with a Warning Event; a configuration change then
// waits (RestartPending=True, same reason) rather than restart outside the windows the user meant; fixing
// the window releases it.
func TestRestartWindowInvalid(t *testing.T) {
	startOperator(t, nil)
	f := newFixture(t)
	ests := f.newESTS(3, "app:1")
	f.withConfigMap(ests)
	ests.Spec.UpdateStrategy.RestartWindows = []extendedv1alpha1.RestartWindow{
		{Schedule: "0 5-2 * * *", Duration: metav1.Duration{Duration: time.Hour}},
	}
	changes := watchTemplateChanges(t, f.ns)
	f.create(ests)
	f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {}, "version 1 starts: a window holds only configuration restarts")
	f.setStatus(1, 3)
	f.waitCondition(extendedv1alpha1.ConditionStalled, metav1.ConditionTrue, extendedv1alpha1.ReasonInvalidRestartWindow)
	stalled := f.condition(extendedv1alpha1.ConditionStalled)
	assert.Contains(t, stalled.Message, `spec.updateStrategy.restartWindows[0].schedule "0 5-2 * * *": beginning of range (5) beyond end of range (2)`)
	require.Eventually(t, func() bool {
		evs := testsupport.Events(t, suite.Client, f.ns, "ExtendedStatefulSet", f.name, extendedv1alpha1.ReasonInvalidRestartWindow)
		return len(evs) > 0 && evs[0].Type == corev1.EventTypeWarning && strings.Contains(evs[0].Note, "5-2")
	}, wait, tick, "a Warning Event names the window")

	patchConfigMap(t, f.ns, "conf", func(cm *corev1.ConfigMap) { cm.Data["port"] = "81" })
	f.waitCondition(extendedv1alpha1.ConditionRestartPending, metav1.ConditionTrue, extendedv1alpha1.ReasonInvalidRestartWindow)
	testsupport.NeverWithin(t, 2*time.Second, 50*time.Millisecond, func() bool { return changes.count("web-v1") > 0 }, "rolled with an invalid window")

	f.update(func(e *extendedv1alpha1.ExtendedStatefulSet) {
		e.Spec.UpdateStrategy.RestartWindows[0].Schedule = "* * * * *" // open all the time
	})
	require.Eventually(t, func() bool { return changes.count("web-v1") == 1 }, wait, tick, "rolled once the window was fixed")
	f.waitCondition(extendedv1alpha1.ConditionStalled, metav1.ConditionFalse, "")
	f.waitCondition(extendedv1alpha1.ConditionRestartPending, metav1.ConditionFalse, extendedv1alpha1.ReasonReconciled)
}
