package testsupport

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

type recorder struct {
	failed bool
	msg    string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.failed = true
	r.msg = fmt.Sprintf(format, args...)
}
func (r *recorder) FailNow() { panic(r) }
func (r *recorder) Helper()  {}

func TestNeverWithinPassesWhenTheConditionNeverHolds(t *testing.T) {
	calls := 0
	start := time.Now()
	r := &recorder{}
	NeverWithin(r, 50*time.Millisecond, 10*time.Millisecond, func() bool { calls++; return false })
	assert.False(t, r.failed)
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond, "polls for the whole duration")
	assert.GreaterOrEqual(t, calls, 4)
}

func TestNeverWithinFailsAtTheFirstHold(t *testing.T) {
	calls := 0
	r := &recorder{}
	func() {
		defer func() { assert.Equal(t, r, recover(), "FailNow stops the test") }()
		NeverWithin(r, time.Second, time.Millisecond, func() bool { calls++; return calls == 3 }, "pod %s held", "x")
	}()
	assert.True(t, r.failed)
	assert.Contains(t, r.msg, "pod x held")
	assert.Equal(t, 3, calls)
}
