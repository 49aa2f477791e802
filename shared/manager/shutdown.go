package manager

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// A webhook server's replica that stops as soon as SIGTERM arrives refuses admissions for a moment:
// kube-proxy still sends new connections to it until the endpoint removal reaches it, and the API
// server's pooled keep-alive connections to it are cut under requests (a pod creation then fails with
// "failed calling webhook ... context deadline exceeded", and a fail-closed webhook refuses it). So,
// with --shutdown-delay, a stopping webhook server drains first: /readyz fails at once, it keeps
// answering every request, each answer asking its client to close the connection (Connection:
// close), so the API server's next requests open connections to the replicas that stay; only after
// the delay does the manager stop.

// drain is the state of a stopping binary: draining from SIGTERM until the manager is told to stop.
type drain struct {
	draining atomic.Bool
}

// managerContext returns the context the manager runs under: with a delay, it ends delay after ctx
// (SIGTERM) ends, draining meanwhile; without one, ctx itself.
func (d *drain) managerContext(ctx context.Context, delay time.Duration, log logr.Logger) context.Context {
	if delay <= 0 {
		return ctx
	}
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		<-ctx.Done()
		d.draining.Store(true)
		log.Info("Stopping: draining the webhook server before the manager stops (/readyz fails, answers close their connections)", "shutdownDelay", delay.String())
		time.Sleep(delay)
		cancel()
	}()
	return out
}

// readyCheck fails while draining, so the replica leaves its Service's ready endpoints.
func (d *drain) readyCheck(*http.Request) error {
	if d.draining.Load() {
		return errors.New("shutting down")
	}
	return nil
}

// drainingServer is a webhook server whose handlers answer with Connection: close while draining.
type drainingServer struct {
	webhook.Server
	drain *drain
}

// Register registers hook at path, wrapped so that a draining server closes each connection after
// its answer.
func (s drainingServer) Register(path string, hook http.Handler) {
	s.Server.Register(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.drain.draining.Load() {
			w.Header().Set("Connection", "close")
		}
		hook.ServeHTTP(w, r)
	}))
}
