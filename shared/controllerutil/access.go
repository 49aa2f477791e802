package controllerutil

import (
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Access is how a controller reaches the cluster; the operators' Reconcilers embed it, and each says in
// its own doc comment what it writes and what it reads where.
type Access struct {
	// Client writes (tests replace it to inject API errors).
	Client client.Client
	// Cache reads from the manager's cache, as the controller's CacheOptions scoped it.
	Cache client.Reader
	// APIReader reads from the API server, where a decision must not rest on a lagging cache.
	APIReader client.Reader
	// Recorder records events.k8s.io Events.
	Recorder events.EventRecorder
	// Clock is the controller's clock (a fake one in tests).
	Clock clock.PassiveClock
}

// NewAccess returns the manager's clients and an Event recorder reporting as name, with what o overrides.
func NewAccess(mgr manager.Manager, name string, o Overrides) Access {
	return Access{
		Client:    o.WriteClient(mgr.GetClient()),
		Cache:     o.CacheReader(mgr.GetClient()),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder(name),
		Clock:     o.PassiveClock(),
	}
}
