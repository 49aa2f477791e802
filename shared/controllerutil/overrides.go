package controllerutil

import (
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Overrides are what a controller's tests replace: the client it writes with (to inject API errors), its
// clock, and its cache reads (to make them lag). Every operator's controller Options embed them; the
// zero value is what production runs.
type Overrides struct {
	// Client replaces the manager's client for writes, e.g. to inject API errors.
	Client client.Client
	// Clock replaces the real clock.
	Clock clock.PassiveClock
	// Cache, when set, wraps the reads from the manager's cache, e.g. to make the cache lag behind the
	// API server for a kind.
	Cache func(cached client.Reader) client.Reader
}

// WriteClient returns the overriding client, or def when there is none.
func (o Overrides) WriteClient(def client.Client) client.Client {
	if o.Client != nil {
		return o.Client
	}
	return def
}

// CacheReader returns cached, wrapped by the Cache override when there is one.
func (o Overrides) CacheReader(cached client.Reader) client.Reader {
	if o.Cache != nil {
		return o.Cache(cached)
	}
	return cached
}

// PassiveClock returns the overriding clock, or the real clock when there is none.
func (o Overrides) PassiveClock() clock.PassiveClock {
	if o.Clock != nil {
		return o.Clock
	}
	return clock.RealClock{}
}
