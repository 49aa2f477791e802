// Package imageconfig reads the ENTRYPOINT and CMD of a container image from its registry, so the pod
// webhook can hold a container without `command` in Wrapper mode (shared/podmutation turns them into the
// argv exactly as the kubelet would). It lives in the webhook server, not in shared/podmutation, so the
// mutation stays a pure function of the pod and of what this package resolved.
//
// A lookup has a strict budget per admission (Options.Budget). A lookup that misses it is not cancelled:
// it goes on in the background (deduplicated per image, with bounded concurrency) and fills the cache, so
// the next pod of that image finds its entrypoint at once. Results are cached in a bounded LRU:
//   - by digest for good (an image digest never changes its config): `image@sha256:…` is read once;
//   - by tag for Options.TagTTL (a tag may move), and under the digest it resolved to as well.
//
// Cache entries are per namespace: a config read with one namespace's pull secrets is never handed to a
// pod of another namespace, which might not be allowed to pull that image.
//
// Failed lookups (registry errors, denied credentials, unknown images) are not cached: the next pod asks
// the registry again, so a fixed pull secret or a recovered registry takes effect at once.
package imageconfig

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/lru"
)

// Defaults of Options, documented in docs/singleton.md ("Images without command").
const (
	// DefaultBudget is how long an admission waits for a registry. The pod webhook's timeoutSeconds is
	// 5 (config/webhook): 2 s leaves room for the API server's own round trip and the rest of the
	// mutation.
	DefaultBudget = 2 * time.Second
	// DefaultTagTTL is how long a config read through a tag is reused before the tag is read again.
	DefaultTagTTL = 5 * time.Minute
	// DefaultCacheSize bounds the number of cached configs (per namespace, image and platform).
	DefaultCacheSize = 1024
	// DefaultConcurrency bounds the registry lookups running at once (in the background or not).
	DefaultConcurrency = 4
	// DefaultLookupTimeout ends a background lookup that a registry never answers.
	DefaultLookupTimeout = 30 * time.Second
	// maxPending bounds the distinct lookups waiting for a slot: beyond it a new image is not looked up
	// (the pod falls back) rather than queueing without end behind a stuck registry.
	maxPending = 256
)

// Config is what an image config says about the process of a container.
type Config struct {
	// Entrypoint and Cmd are the image config's ENTRYPOINT and CMD, as recorded (a shell-form
	// ENTRYPOINT is recorded as ["/bin/sh", "-c", "…"] by the builder and kept so).
	Entrypoint []string
	Cmd        []string
	// Digest is the digest of the manifest (or index) the reference resolved to.
	Digest string
}

// Options tunes a Resolver; zero values take the defaults above.
type Options struct {
	Budget        time.Duration
	TagTTL        time.Duration
	CacheSize     int
	Concurrency   int
	LookupTimeout time.Duration
	// Transport is the registry transport (tests: a loopback registry); default remote.DefaultTransport.
	Transport http.RoundTripper
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Request is one container image to resolve.
type Request struct {
	// Namespace is the pod's namespace: the cache is per namespace (see the package comment).
	Namespace string
	// Image is the container's image reference as the pod gives it.
	Image string
	// Platform is the platform whose manifest to read in a multi-arch index (Platform()).
	Platform v1.Platform
	// Keychain authenticates to the registry; nil: anonymous.
	Keychain authn.Keychain
}

// ErrBudget is returned when the registry did not answer within the budget; the lookup goes on in the
// background.
var ErrBudget = errors.New("the registry did not answer within the webhook's budget; the lookup goes on in the background and the next pod of this image gets Wrapper mode")

// ErrBusy is returned when too many distinct lookups are already waiting for the registry.
var ErrBusy = errors.New("too many image lookups in flight; not looked up")

// Resolver resolves image configs with a cache; safe for concurrent use.
type Resolver struct {
	opts Options
	sem  chan struct{}

	mu       sync.Mutex
	cache    *lru.Cache // key → entry
	inflight map[string]*call
}

type entry struct {
	cfg     Config
	expires time.Time // zero: for good (a digest)
}

type call struct {
	done chan struct{}
	cfg  Config
	err  error
}

// New returns a Resolver.
func New(opts Options) *Resolver {
	if opts.Budget <= 0 {
		opts.Budget = DefaultBudget
	}
	if opts.TagTTL <= 0 {
		opts.TagTTL = DefaultTagTTL
	}
	if opts.CacheSize <= 0 {
		opts.CacheSize = DefaultCacheSize
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.LookupTimeout <= 0 {
		opts.LookupTimeout = DefaultLookupTimeout
	}
	if opts.Transport == nil {
		opts.Transport = remote.DefaultTransport
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Resolver{opts: opts, sem: make(chan struct{}, opts.Concurrency), cache: lru.New(opts.CacheSize), inflight: map[string]*call{}}
}

// Budget is the time Resolve waits for a registry.
func (r *Resolver) Budget() time.Duration { return r.opts.Budget }

// Resolve returns the config of req.Image for req.Platform: from the cache, or from the registry within
// the budget (ErrBudget past it; the lookup then continues in the background and fills the cache).
func (r *Resolver) Resolve(ctx context.Context, req Request) (Config, error) {
	ref, err := r.parse(req.Image)
	if err != nil {
		return Config{}, fmt.Errorf("image %q: %w", req.Image, err)
	}
	key := cacheKey(req.Namespace, ref.Name(), req.Platform)
	r.mu.Lock()
	if cfg, ok := r.cached(key); ok {
		r.mu.Unlock()
		return cfg, nil
	}
	c, ok := r.inflight[key]
	if !ok {
		if len(r.inflight) >= maxPending {
			r.mu.Unlock()
			return Config{}, ErrBusy
		}
		c = &call{done: make(chan struct{})}
		r.inflight[key] = c
		go r.lookup(key, ref, req, c)
	}
	r.mu.Unlock()

	timer := time.NewTimer(r.opts.Budget)
	defer timer.Stop()
	select {
	case <-c.done:
		return c.cfg, c.err
	case <-timer.C:
		return Config{}, ErrBudget
	case <-ctx.Done():
		return Config{}, ErrBudget
	}
}

// parse reads an image reference as the kubelet does: without a registry it is Docker Hub's, without a
// tag it is :latest. Registries on loopback are spoken to over plain HTTP (name.Registry.Scheme).
func (r *Resolver) parse(image string) (name.Reference, error) {
	return name.ParseReference(image)
}

// cached returns a live cache entry; r.mu is held.
func (r *Resolver) cached(key string) (Config, bool) {
	v, ok := r.cache.Get(key)
	if !ok {
		return Config{}, false
	}
	e := v.(entry)
	if !e.expires.IsZero() && !r.opts.Now().Before(e.expires) {
		r.cache.Remove(key)
		return Config{}, false
	}
	return e.cfg, true
}

// lookup reads the config from the registry, independent of the admission that started it, and stores
// it in the cache.
func (r *Resolver) lookup(key string, ref name.Reference, req Request, c *call) {
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.LookupTimeout)
	defer cancel()
	defer func() {
		r.mu.Lock()
		delete(r.inflight, key)
		r.mu.Unlock()
		close(c.done)
	}()
	select {
	case r.sem <- struct{}{}:
		defer func() { <-r.sem }()
	case <-ctx.Done():
		c.err = fmt.Errorf("waiting for a free lookup slot: %w", ctx.Err())
		return
	}
	c.cfg, c.err = r.fetch(ctx, ref, req)
	if c.err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, isDigest := ref.(name.Digest); isDigest {
		r.cache.Add(key, entry{cfg: c.cfg})
		return
	}
	r.cache.Add(key, entry{cfg: c.cfg, expires: r.opts.Now().Add(r.opts.TagTTL)})
	// The digest the tag points to now is good for ever.
	r.cache.Add(cacheKey(req.Namespace, ref.Context().Digest(c.cfg.Digest).Name(), req.Platform), entry{cfg: c.cfg})
}

func (r *Resolver) fetch(ctx context.Context, ref name.Reference, req Request) (Config, error) {
	keychain := req.Keychain
	if keychain == nil {
		keychain = authn.NewMultiKeychain() // resolves to anonymous
	}
	desc, err := remote.Get(ref,
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(keychain),
		remote.WithPlatform(req.Platform),
		remote.WithTransport(r.opts.Transport),
		// No retry on an error status: the admission that waits has a budget of seconds, and the next
		// pod asks again. A dropped connection is retried once.
		remote.WithRetryStatusCodes(),
		remote.WithRetryBackoff(remote.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Steps: 2}),
	)
	if err != nil {
		return Config{}, fmt.Errorf("reading the manifest of %s: %w", ref, err)
	}
	// For an index, Image picks the manifest of req.Platform (and fails when there is none).
	img, err := desc.Image()
	if err != nil {
		return Config{}, fmt.Errorf("reading the image of %s for %s: %w", ref, req.Platform.String(), err)
	}
	file, err := img.ConfigFile()
	if err != nil {
		return Config{}, fmt.Errorf("reading the image config of %s: %w", ref, err)
	}
	return Config{Entrypoint: file.Config.Entrypoint, Cmd: file.Config.Cmd, Digest: desc.Digest.String()}, nil
}

func cacheKey(namespace, ref string, p v1.Platform) string {
	return namespace + " " + ref + " " + p.String()
}

// Platform is the platform whose manifest a multi-arch image is read for: the node's when the pod
// names one and its labels are known (nodeLabels, may be nil), else the pod's nodeSelector for
// kubernetes.io/os and kubernetes.io/arch, each falling back to the webhook's own runtime.GOOS and
// runtime.GOARCH (a cluster of one platform runs the webhook on it).
func Platform(pod *corev1.Pod, nodeLabels func(name string) (map[string]string, bool)) v1.Platform {
	p := v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}
	labels := pod.Spec.NodeSelector
	if pod.Spec.NodeName != "" && nodeLabels != nil {
		if l, ok := nodeLabels(pod.Spec.NodeName); ok {
			labels = l
		}
	}
	if os := strings.TrimSpace(labels[corev1.LabelOSStable]); os != "" {
		p.OS = os
	}
	if arch := strings.TrimSpace(labels[corev1.LabelArchStable]); arch != "" {
		p.Architecture = arch
	}
	return p
}
