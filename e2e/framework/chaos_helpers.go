//go:build e2e

package framework

import (
	"math/rand"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

func IgnoreGone(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// SleepRandom waits a random duration in [lo, hi) (the test driver, not a reconcile).
func SleepRandom(rng *rand.Rand, lo, hi time.Duration) {
	time.Sleep(lo + time.Duration(rng.Int63n(int64(hi-lo))))
}
