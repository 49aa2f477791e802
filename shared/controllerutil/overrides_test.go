package controllerutil

import (
	"testing"
	"time"

	"k8s.io/utils/clock"
	fakeclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestOverridesDefaults(t *testing.T) {
	var none Overrides
	if none.WriteClient(nil) != nil {
		t.Error("without an override the default client is used")
	}
	if _, real := none.PassiveClock().(clock.RealClock); !real {
		t.Error("without an override the clock is the real one")
	}
	cached := fakeclient.NewFakeClient()
	if none.CacheReader(cached) != client.Reader(cached) {
		t.Error("without an override the cache is read as it is")
	}
	fake := fakeclock.NewFakePassiveClock(time.Unix(0, 0))
	lagging := fakeclient.NewFakeClient()
	with := Overrides{Client: fakeclient.NewFakeClient(), Clock: fake, Cache: func(client.Reader) client.Reader { return lagging }}
	if with.WriteClient(nil) == nil || with.PassiveClock() != fake || with.CacheReader(cached) != client.Reader(lagging) {
		t.Error("the overrides replace the defaults")
	}
}
