package manager

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// Backoff of waitForKinds: the first retry comes quickly (a CRD applied in the same file as the
// Deployment is usually served within a second or two), later ones at most every maxServedBackoff.
const (
	minServedBackoff = 250 * time.Millisecond
	maxServedBackoff = 15 * time.Second
)

// resourceKinds returns the kinds of API objects the schemes register, e.g. StatefulSetLock of
// app.anukkrit.me/v1: the kinds that have a List kind next to them. The option kinds every group
// version also registers (ListOptions, WatchEvent, ...) have none and are left out, and so are the
// discovery kinds (APIGroup, APIGroupList) registered in the core group: only kinds of named groups,
// which a CRD or an aggregated API serves, are waited for.
func resourceKinds(schemes []func(*runtime.Scheme) error) ([]schema.GroupVersionKind, error) {
	s := runtime.NewScheme()
	for _, add := range schemes {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("registering API types: %w", err)
		}
	}
	known := s.AllKnownTypes()
	var kinds []schema.GroupVersionKind
	for gvk := range known {
		if gvk.Group == "" || strings.HasSuffix(gvk.Kind, "List") {
			continue
		}
		if _, ok := known[gvk.GroupVersion().WithKind(gvk.Kind+"List")]; ok {
			kinds = append(kinds, gvk)
		}
	}
	slices.SortFunc(kinds, func(a, b schema.GroupVersionKind) int { return strings.Compare(a.String(), b.String()) })
	return kinds, nil
}

// missingKinds returns the kinds the API server does not serve (yet).
func missingKinds(dc discovery.DiscoveryInterface, kinds []schema.GroupVersionKind) ([]schema.GroupVersionKind, error) {
	var missing []schema.GroupVersionKind
	served := map[schema.GroupVersion]map[string]bool{}
	for _, gvk := range kinds {
		gv := gvk.GroupVersion()
		if _, ok := served[gv]; !ok {
			list, err := dc.ServerResourcesForGroupVersion(gv.String())
			if err != nil && !apierrors.IsNotFound(err) {
				return nil, err
			}
			served[gv] = map[string]bool{}
			if list != nil {
				for _, r := range list.APIResources {
					served[gv][r.Kind] = true
				}
			}
		}
		if !served[gv][gvk.Kind] {
			missing = append(missing, gvk)
		}
	}
	return missing, nil
}

// waitForKinds returns once the API server serves every kind of the binary's own API types, so that
// its controllers and field indexes start on kinds that exist. Installing an operator applies its CRD
// and its Deployment together, and the Deployment's pod can start before the new CRD is served: the
// operator waits (with backoff, saying what it waits for) instead of failing with "no matches for kind"
// and being restarted. It waits until ctx ends; discovery errors are retried the same way.
func waitForKinds(ctx context.Context, log logr.Logger, dc discovery.DiscoveryInterface, kinds []schema.GroupVersionKind) error {
	backoff := minServedBackoff
	for {
		missing, err := missingKinds(dc, kinds)
		if err == nil && len(missing) == 0 {
			return nil
		}
		names := make([]string, 0, len(missing))
		for _, gvk := range missing {
			names = append(names, gvk.Kind+"."+gvk.GroupVersion().String())
		}
		if err != nil {
			log.Info("Waiting for the API server's discovery", "error", err.Error(), "retryIn", backoff.String())
		} else {
			log.Info("Waiting for the API server to serve the operator's kinds (is the CRD installed?)", "kinds", names, "retryIn", backoff.String())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxServedBackoff)
	}
}

// serveProbesWhileWaiting serves /healthz (200) and /readyz (503) on the probe address until the
// returned function is called, which frees the address for the manager's own probe server. An address
// that cannot be bound is logged and left alone: the manager reports it when it starts.
func serveProbesWhileWaiting(log logr.Logger, addr string) (stop func()) {
	if addr == "" || addr == "0" {
		return func() {}
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Info("Not serving probes while waiting for the API server", "address", addr, "error", err.Error())
		return func() {}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "waiting for the API server to serve the operator's kinds", http.StatusServiceUnavailable)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	return func() {
		_ = srv.Close()
		<-done
	}
}
