package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

// A renewal waits behind every event in the queue; a delayed failover that is due does not, and a lock
// without a writer is not requeued at all.
func TestScheduleQueuesRenewalsBehindEvents(t *testing.T) {
	r := &Reconciler{}

	renewal := &scope{renewAfter: 30 * time.Second, decision: Decision{Writer: Holder{Name: "db-0"}}}
	r.schedule(renewal)
	assert.Equal(t, 30*time.Second, renewal.result.RequeueAfter)
	require.NotNil(t, renewal.result.Priority)
	assert.Equal(t, handler.LowPriority, *renewal.result.Priority)

	delayed := &scope{renewAfter: 30 * time.Second, decision: Decision{Writer: Holder{Name: "db-0"}, RetryAfter: 2 * time.Second}}
	r.schedule(delayed)
	assert.Equal(t, 2*time.Second, delayed.result.RequeueAfter)
	require.NotNil(t, delayed.result.Priority)
	assert.Zero(t, *delayed.result.Priority)
	assert.Equal(t, leasev1.ReasonFailoverDelayed, delayed.state)

	none := &scope{renewAfter: 30 * time.Second}
	r.schedule(none)
	assert.Zero(t, none.result.RequeueAfter)
	assert.Nil(t, none.result.Priority)
}
