package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

func window(schedule, duration, tz string) extendedv1alpha1.RestartWindow {
	d, err := time.ParseDuration(duration)
	if err != nil {
		panic(err)
	}
	return extendedv1alpha1.RestartWindow{Schedule: schedule, Duration: metav1.Duration{Duration: d}, TimeZone: tz}
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// TestRestartWindowTimes checks the window computation of ES-B3: a window is open from each start its
// schedule names (included) for its duration (excluded); next is the earliest start after now among all
// windows; schedules read in their time zone.
func TestRestartWindowTimes(t *testing.T) {
	now := utc("2026-11-30T12:00:00Z") // a Monday
	parse := func(t *testing.T, ws ...extendedv1alpha1.RestartWindow) restartWindows {
		t.Helper()
		out, err := parseRestartWindows(ws, now)
		require.NoError(t, err)
		return out
	}

	t.Run("daily window, UTC", func(t *testing.T) {
		ws := parse(t, window("0 3 * * *", "1h", ""))
		for at, open := range map[string]bool{
			"2026-11-30T02:59:59.999Z": false,
			"2026-11-30T03:00:00Z":     true, // the start is inside
			"2026-11-30T03:30:00Z":     true,
			"2026-11-30T03:59:59.999Z": true,
			"2026-11-30T04:00:00Z":     false, // the end is not
			"2026-11-30T12:00:00Z":     false,
		} {
			assert.Equal(t, open, ws.open(utc(at)), at)
		}
		next, w := ws.next(utc("2026-11-30T02:59:59.5Z"))
		assert.Equal(t, utc("2026-11-30T03:00:00Z"), next.UTC())
		assert.Equal(t, `"0 3 * * *" UTC for 1h`, w.spec)
		next, _ = ws.next(utc("2026-11-30T03:00:00Z"))
		assert.Equal(t, utc("2026-12-01T03:00:00Z"), next.UTC(), "inside a window, next is the following start")
		next, _ = ws.next(utc("2026-11-30T12:00:00Z"))
		assert.Equal(t, utc("2026-12-01T03:00:00Z"), next.UTC())
	})

	t.Run("a window across midnight, weekdays only", func(t *testing.T) {
		ws := parse(t, window("0 22 * * mon-fri", "8h", "UTC"))
		assert.True(t, ws.open(utc("2026-12-05T05:59:00Z")), "Saturday 05:59, from Friday 22:00")
		assert.False(t, ws.open(utc("2026-12-06T05:00:00Z")), "Sunday 05:00: no window started Saturday")
		next, _ := ws.next(utc("2026-12-05T12:00:00Z"))
		assert.Equal(t, utc("2026-12-07T22:00:00Z"), next.UTC(), "Saturday noon: Monday 22:00")
	})

	t.Run("time zones", func(t *testing.T) {
		ws := parse(t, window("0 3 * * *", "30m", "Europe/Berlin"))
		next, w := ws.next(utc("2026-11-30T12:00:00Z"))
		assert.Equal(t, utc("2026-12-01T02:00:00Z"), next.UTC(), "winter: Berlin is UTC+1")
		assert.Equal(t, `"0 3 * * *" Europe/Berlin for 30m`, w.spec)
		next, _ = ws.next(utc("2026-07-01T12:00:00Z"))
		assert.Equal(t, utc("2026-07-02T01:00:00Z"), next.UTC(), "summer: UTC+2")
		assert.True(t, ws.open(utc("2026-07-02T01:10:00Z")))
		assert.False(t, ws.open(utc("2026-07-02T03:10:00Z")), "03:10 UTC is 05:10 in Berlin")

		ny := parse(t, window("0 3 * * *", "30m", "America/New_York"))
		next, _ = ny.next(utc("2026-11-30T12:00:00Z"))
		assert.Equal(t, utc("2026-12-01T08:00:00Z"), next.UTC(), "New York is UTC-5 in winter")
	})

	t.Run("several windows: the earliest opens next, any one open is enough", func(t *testing.T) {
		ws := parse(t, window("0 3 * * *", "1h", ""), window("30 12 * * 1", "15m", ""), window("*/20 8-9 1 * *", "5m", ""))
		next, w := ws.next(now)
		assert.Equal(t, utc("2026-11-30T12:30:00Z"), next.UTC())
		assert.Equal(t, `"30 12 * * 1" UTC for 15m`, w.spec)
		assert.True(t, ws.open(utc("2026-11-30T12:44:59Z")))
		assert.True(t, ws.open(utc("2026-12-01T08:44:00Z")), "the third window, first of the month 08:40")
		assert.False(t, ws.open(utc("2026-12-01T08:45:00Z")))
		next, _ = ws.next(utc("2026-12-01T08:00:00Z"))
		assert.Equal(t, utc("2026-12-01T08:20:00Z"), next.UTC())
	})

	t.Run("names, lists, steps and question marks as the CRD allows them", func(t *testing.T) {
		ws := parse(t, window("0,30 */6 ? JAN-MAR,dec SUN", "10m", ""))
		next, _ := ws.next(now)
		assert.Equal(t, utc("2026-12-06T00:00:00Z"), next.UTC(), "Sunday 6 December, 00:00")
	})

	t.Run("what the CRD cannot refuse is an error naming the window", func(t *testing.T) {
		for _, tc := range []struct {
			w   extendedv1alpha1.RestartWindow
			err string
		}{
			{window("0 5-2 * * *", "1h", ""), `spec.updateStrategy.restartWindows[1].schedule "0 5-2 * * *": beginning of range (5) beyond end of range (2): 5-2`},
			{window("0 0 30 2 *", "1h", ""), `spec.updateStrategy.restartWindows[1].schedule "0 0 30 2 *" never opens`},
			{window("0 3 * * *", "1h", "Mars/Olympus_Mons"), `spec.updateStrategy.restartWindows[1].timeZone "Mars/Olympus_Mons" is not a known time zone`},
		} {
			_, err := parseRestartWindows([]extendedv1alpha1.RestartWindow{window("0 3 * * *", "1h", ""), tc.w}, now)
			assert.EqualError(t, err, tc.err)
		}
	})

	t.Run("an invalid window is reported: Ready, Stalled and, with a change waiting, RestartPending", func(t *testing.T) {
		ests := withConditions()
		ests.Spec.UpdateStrategy.RestartWindows = []extendedv1alpha1.RestartWindow{window("0 5-2 * * *", "1h", "")}
		_, err := parseRestartWindows(ests.Spec.UpdateStrategy.RestartWindows, now)
		require.Error(t, err)
		s := &scope{ests: ests, windowErr: err.Error()}
		s.restartPending = true
		ready, reason, msg := s.readiness(false, "", "")
		assert.False(t, ready)
		assert.Equal(t, extendedv1alpha1.ReasonInvalidRestartWindow, reason)
		assert.Equal(t, err.Error()+"; configuration restarts wait until it is fixed", msg)
		set := setter(ests)
		set(extendedv1alpha1.ConditionReady, ready, reason, msg)
		applyKstatus(ests, false, set)
		assert.True(t, meta.IsStatusConditionTrue(ests.Status.Conditions, extendedv1alpha1.ConditionStalled))
		applyRestartPending(ests, s, set)
		c := meta.FindStatusCondition(ests.Status.Conditions, extendedv1alpha1.ConditionRestartPending)
		require.NotNil(t, c)
		assert.Equal(t, extendedv1alpha1.ReasonInvalidRestartWindow, c.Reason)
		assert.Equal(t, metav1.ConditionTrue, c.Status)

		ests.Spec.UpdateStrategy.RestartWindows = nil
		applyRestartPending(ests, &scope{ests: ests}, set)
		assert.Nil(t, meta.FindStatusCondition(ests.Status.Conditions, extendedv1alpha1.ConditionRestartPending), "no windows, no condition")
	})

	t.Run("durations read short", func(t *testing.T) {
		for d, want := range map[time.Duration]string{time.Hour: "1h", 90 * time.Minute: "1h30m", time.Minute: "1m",
			168 * time.Hour: "168h", 90 * time.Second: "1m30s", time.Hour + time.Second: "1h0m1s"} {
			assert.Equal(t, want, shortDuration(d))
		}
	})
}
