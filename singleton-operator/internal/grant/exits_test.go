package grant

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// An accepted report is Accepted at once and tells the controller (an event); Recorded waits for its
// write and returns how it ended. A failed write is forgotten (the pod blocks again), a retried report
// is registered once, and a nil registry registers nothing.
func TestExits(t *testing.T) {
	exits := NewExits()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "old-0", UID: "uid-1"}}
	assert.False(t, exits.Accepted("uid-1"))
	assert.ErrorIs(t, exits.Recorded(t.Context(), "uid-1"), errNoReport)

	end := exits.Begin(pod)
	assert.True(t, exits.Accepted("uid-1"))
	select {
	case e := <-exits.Events():
		assert.Equal(t, "old-0", e.Object.GetName())
	default:
		t.Fatal("no event for the accepted report")
	}
	exits.Begin(pod)(errors.New("a retried report is not registered twice: this changes nothing"))
	assert.Empty(t, exits.Events())

	waiting, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, exits.Recorded(waiting, "uid-1"), context.DeadlineExceeded, "the write has not ended")
	go func() { time.Sleep(20 * time.Millisecond); end(nil) }()
	require.NoError(t, exits.Recorded(t.Context(), "uid-1"))
	assert.True(t, exits.Accepted("uid-1"), "kept until the pod is deleted")

	failed := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "uid-2"}}
	endFailed := exits.Begin(failed)
	assert.True(t, exits.Accepted("uid-2"))
	endFailed(errors.New("conflict"))
	assert.False(t, exits.Accepted("uid-2"), "a failed write is forgotten")

	var none *Exits
	none.Begin(pod)(nil)
}

// Successful reviews are reused, keyed by the token; failures are asked again every time.
func TestCachedAuthenticator(t *testing.T) {
	calls := map[string]int{}
	authenticate := CachedAuthenticator(func(_ context.Context, token string) (authenticationv1.UserInfo, error) {
		calls[token]++
		if token == "bad" {
			return authenticationv1.UserInfo{}, errors.New("token not authenticated")
		}
		return authenticationv1.UserInfo{Username: "user-of-" + token}, nil
	})
	for range 3 {
		user, err := authenticate(t.Context(), "good")
		require.NoError(t, err)
		assert.Equal(t, "user-of-good", user.Username)
		_, err = authenticate(t.Context(), "bad")
		assert.Error(t, err)
	}
	user, err := authenticate(t.Context(), "other")
	require.NoError(t, err)
	assert.Equal(t, "user-of-other", user.Username, "answers are per token")
	assert.Equal(t, map[string]int{"good": 1, "bad": 3, "other": 1}, calls)
}
