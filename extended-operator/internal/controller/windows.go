package controller

import (
	"fmt"
	"strings"
	"time"
	// The operator's image has no zoneinfo files: the time zones of restart windows come with the binary.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// cronParser reads the 5-field expressions of spec.updateStrategy.restartWindows[].schedule; no
// descriptors (@daily): the CRD refuses them, so the parser must not give them a meaning.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// restartWindow is one parsed entry of spec.updateStrategy.restartWindows.
type restartWindow struct {
	schedule cron.Schedule
	duration time.Duration
	// spec is how the window reads in messages: its schedule, time zone and duration.
	spec string
}

// restartWindows are the parsed windows; none means configuration restarts are not held.
type restartWindows []restartWindow

// parseRestartWindows parses the windows of the spec. The CRD refuses most bad input; what it cannot
// see (a range whose end is below its start, an unknown time zone, a date that never comes) is an
// error naming the window, and configuration restarts then wait until the spec is fixed: restarting
// outside the windows would break what the user asked for.
func parseRestartWindows(spec []extendedv1alpha1.RestartWindow, now time.Time) (restartWindows, error) {
	out := make(restartWindows, 0, len(spec))
	for i, w := range spec {
		tz := w.TimeZone
		if tz == "" {
			tz = "UTC"
		}
		loc, err := time.LoadLocation(tz)
		if err != nil {
			return nil, fmt.Errorf("spec.updateStrategy.restartWindows[%d].timeZone %q is not a known time zone", i, w.TimeZone)
		}
		s, err := cronParser.Parse(strings.TrimSpace(w.Schedule))
		if err != nil {
			return nil, fmt.Errorf("spec.updateStrategy.restartWindows[%d].schedule %q: %v", i, w.Schedule, err)
		}
		// The parser reads in time.Local; the window's zone replaces it.
		s.(*cron.SpecSchedule).Location = loc
		if s.Next(now).IsZero() {
			// The library looks five years ahead, e.g. "0 0 30 2 *".
			return nil, fmt.Errorf("spec.updateStrategy.restartWindows[%d].schedule %q never opens", i, w.Schedule)
		}
		out = append(out, restartWindow{schedule: s, duration: w.Duration.Duration,
			spec: fmt.Sprintf("%q %s for %s", w.Schedule, tz, shortDuration(w.Duration.Duration))})
	}
	return out, nil
}

// open reports whether now is inside a window: a window is open from each time its schedule names
// (included) for its duration (excluded). The library's Next returns the first time strictly after
// its argument, so a start in (now-duration, now] is the one that makes now inside.
func (ws restartWindows) open(now time.Time) bool {
	for _, w := range ws {
		if start := w.schedule.Next(now.Add(-w.duration)); !start.IsZero() && !start.After(now) {
			return true
		}
	}
	return false
}

// next is the earliest time after now at which a window opens, and that window (zero time when none
// opens within the five years the library looks ahead).
func (ws restartWindows) next(now time.Time) (time.Time, restartWindow) {
	var at time.Time
	var which restartWindow
	for _, w := range ws {
		if t := w.schedule.Next(now); !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at, which = t, w
		}
	}
	return at, which
}

// shortDuration is d without the zero minutes and seconds time.Duration.String writes ("2h", not "2h0m0s").
func shortDuration(d time.Duration) string {
	out := d.String()
	if strings.HasSuffix(out, "m0s") {
		out = strings.TrimSuffix(out, "0s")
	}
	if strings.HasSuffix(out, "h0m") {
		out = strings.TrimSuffix(out, "0m")
	}
	return out
}
