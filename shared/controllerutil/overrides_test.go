package controllerutil

import (
	"testing"
	"time"

	"k8s.io/utils/clock"
	fakeclock "k8s.io/utils/clock/testing"
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
	fake := fakeclock.NewFakePassiveClock(time.Unix(0, 0))
	with := Overrides{Client: fakeclient.NewFakeClient(), Clock: fake}
	if with.WriteClient(nil) == nil || with.PassiveClock() != fake {
		t.Error("the overrides replace the defaults")
	}
}
