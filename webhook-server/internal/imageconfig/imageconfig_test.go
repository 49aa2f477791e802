package imageconfig_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	k8schain "github.com/google/go-containerregistry/pkg/authn/kubernetes"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/statefulops/statefulops/webhook-server/internal/imageconfig"
	"github.com/statefulops/statefulops/webhook-server/internal/imageconfig/registrytest"
)

var linuxAMD64 = registrytest.LinuxAMD64

// clock is a settable clock for the tag TTL.
type clock struct{ now atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Unix(0, c.now.Load()) }
func (c *clock) Advance(d time.Duration) { c.now.Add(int64(d)) }

func newClock() *clock {
	c := &clock{}
	c.now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func resolve(t *testing.T, r *imageconfig.Resolver, image string) (imageconfig.Config, error) {
	t.Helper()
	return r.Resolve(t.Context(), imageconfig.Request{Namespace: "ns", Image: image, Platform: linuxAMD64})
}

// Images with ENTRYPOINT and CMD, with either, with neither: the config gives them as recorded (a
// shell-form ENTRYPOINT as the builder recorded it), by tag and by digest.
func TestResolveReadsEntrypointAndCmd(t *testing.T) {
	reg := registrytest.New(t, "", "")
	r := imageconfig.New(imageconfig.Options{})
	for name, cfg := range map[string]v1.Config{
		"both":       {Entrypoint: []string{"docker-entrypoint.sh"}, Cmd: []string{"postgres"}},
		"entrypoint": {Entrypoint: []string{"/app", "--serve"}},
		"cmd":        {Cmd: []string{"redis-server"}},
		"shell-form": {Entrypoint: []string{"/bin/sh", "-c", "exec app --port=$PORT"}},
		"neither":    {},
	} {
		t.Run(name, func(t *testing.T) {
			byDigest := reg.Push(t, "app/"+name+":1", registrytest.Image(t, cfg, linuxAMD64))
			for _, image := range []string{reg.Host + "/app/" + name + ":1", byDigest} {
				got, err := resolve(t, r, image)
				require.NoError(t, err, image)
				assert.Equal(t, cfg.Entrypoint, got.Entrypoint, image)
				assert.Equal(t, cfg.Cmd, got.Cmd, image)
				assert.NotEmpty(t, got.Digest)
			}
		})
	}
}

// A multi-arch index: the manifest of the requested platform, each with its own entrypoint.
func TestResolvePicksThePlatformOfAnIndex(t *testing.T) {
	reg := registrytest.New(t, "", "")
	arm64 := v1.Platform{OS: "linux", Architecture: "arm64"}
	byDigest := reg.PushIndex(t, "multi:1",
		registrytest.Manifest{Platform: linuxAMD64, Image: registrytest.Image(t, v1.Config{Entrypoint: []string{"/amd64"}}, linuxAMD64)},
		registrytest.Manifest{Platform: arm64, Image: registrytest.Image(t, v1.Config{Entrypoint: []string{"/arm64"}}, arm64)})
	r := imageconfig.New(imageconfig.Options{})
	for _, image := range []string{reg.Host + "/multi:1", byDigest} {
		for _, p := range []v1.Platform{linuxAMD64, arm64} {
			got, err := r.Resolve(t.Context(), imageconfig.Request{Namespace: "ns", Image: image, Platform: p})
			require.NoError(t, err)
			assert.Equal(t, []string{"/" + p.Architecture}, got.Entrypoint, "%s for %s", image, p.Architecture)
		}
		_, err := r.Resolve(t.Context(), imageconfig.Request{Namespace: "ns", Image: image, Platform: v1.Platform{OS: "linux", Architecture: "s390x"}})
		require.Error(t, err, "no manifest for the platform")
	}
}

// The platform: the node's when known, else the nodeSelector's, else the webhook's own.
func TestPlatform(t *testing.T) {
	pod := &corev1.Pod{}
	own := imageconfig.Platform(pod, nil)
	assert.NotEmpty(t, own.OS)
	assert.NotEmpty(t, own.Architecture)
	pod.Spec.NodeSelector = map[string]string{corev1.LabelArchStable: "arm64"}
	assert.Equal(t, v1.Platform{OS: own.OS, Architecture: "arm64"}, imageconfig.Platform(pod, nil))
	nodes := func(name string) (map[string]string, bool) {
		if name != "n1" {
			return nil, false
		}
		return map[string]string{corev1.LabelOSStable: "windows", corev1.LabelArchStable: "amd64"}, true
	}
	pod.Spec.NodeName = "n1"
	assert.Equal(t, v1.Platform{OS: "windows", Architecture: "amd64"}, imageconfig.Platform(pod, nodes))
	pod.Spec.NodeName = "unknown"
	assert.Equal(t, v1.Platform{OS: own.OS, Architecture: "arm64"}, imageconfig.Platform(pod, nodes), "an unknown node: the nodeSelector")
}

// A digest is read once for good; a tag is read again after the TTL (and sees where it moved), and the
// digest it resolved to is cached for good as well. The cache is per namespace.
func TestResolveCachesDigestsForGoodAndTagsForTheTTL(t *testing.T) {
	reg := registrytest.New(t, "", "")
	clk := newClock()
	r := imageconfig.New(imageconfig.Options{TagTTL: time.Minute, Now: clk.Now})
	first := reg.Push(t, "app:stable", registrytest.Image(t, v1.Config{Entrypoint: []string{"/v1"}}, linuxAMD64))
	tag := reg.Host + "/app:stable"

	got, err := resolve(t, r, tag)
	require.NoError(t, err)
	assert.Equal(t, []string{"/v1"}, got.Entrypoint)
	reads := reg.ManifestRequests()
	_, err = resolve(t, r, first)
	require.NoError(t, err)
	assert.Equal(t, reads, reg.ManifestRequests(), "the tag's digest was cached with it")

	reg.Push(t, "app:stable", registrytest.Image(t, v1.Config{Entrypoint: []string{"/v2"}}, linuxAMD64))
	reads = reg.ManifestRequests() // the push's own
	clk.Advance(59 * time.Second)
	got, err = resolve(t, r, tag)
	require.NoError(t, err)
	assert.Equal(t, []string{"/v1"}, got.Entrypoint, "within the TTL the tag is not read again")
	assert.Equal(t, reads, reg.ManifestRequests())

	clk.Advance(2 * time.Second)
	got, err = resolve(t, r, tag)
	require.NoError(t, err)
	assert.Equal(t, []string{"/v2"}, got.Entrypoint, "past the TTL the tag is read again")
	assert.Greater(t, reg.ManifestRequests(), reads)

	reads = reg.ManifestRequests()
	clk.Advance(1000 * time.Hour)
	got, err = resolve(t, r, first)
	require.NoError(t, err)
	assert.Equal(t, []string{"/v1"}, got.Entrypoint)
	assert.Equal(t, reads, reg.ManifestRequests(), "a digest is cached for good")

	_, err = r.Resolve(t.Context(), imageconfig.Request{Namespace: "other", Image: first, Platform: linuxAMD64})
	require.NoError(t, err)
	assert.Greater(t, reg.ManifestRequests(), reads, "another namespace reads the registry with its own credentials")
}

// The cache is bounded: the least recently used entry goes.
func TestResolveCacheIsBounded(t *testing.T) {
	reg := registrytest.New(t, "", "")
	r := imageconfig.New(imageconfig.Options{CacheSize: 2})
	var refs []string
	for _, ep := range []string{"/a", "/b", "/c"} {
		refs = append(refs, reg.Push(t, "app"+ep+":1", registrytest.Image(t, v1.Config{Entrypoint: []string{ep}}, linuxAMD64)))
	}
	for _, ref := range refs {
		_, err := resolve(t, r, ref)
		require.NoError(t, err)
	}
	reads := reg.ManifestRequests()
	_, err := resolve(t, r, refs[2])
	require.NoError(t, err)
	assert.Equal(t, reads, reg.ManifestRequests(), "the newest is cached")
	_, err = resolve(t, r, refs[0])
	require.NoError(t, err)
	assert.Greater(t, reg.ManifestRequests(), reads, "the oldest was evicted")
}

func pullSecret(t *testing.T, reg *registrytest.Registry, user, password string) authn.Keychain {
	t.Helper()
	kc, err := k8schain.NewFromPullSecrets(t.Context(), []corev1.Secret{*reg.PullSecret("ns", "pull", user, password)})
	require.NoError(t, err)
	return kc
}

// A registry behind basic auth: read with the pod's pull secret; without it or with a wrong one the
// lookup fails at once with the registry's refusal (no wait for the budget).
func TestResolveAuthenticatesWithPullSecrets(t *testing.T) {
	reg, image := registrytest.Serve(t, "puller", "s3cret", "private:1", v1.Config{Cmd: []string{"/private"}})
	r := imageconfig.New(imageconfig.Options{Budget: 10 * time.Second})

	start := time.Now()
	_, err := resolve(t, r, image)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "UNAUTHORIZED")
	assert.Less(t, time.Since(start), 5*time.Second, "a refusal is not a timeout")

	_, err = r.Resolve(t.Context(), imageconfig.Request{Namespace: "ns", Image: image, Platform: linuxAMD64, Keychain: pullSecret(t, reg, "puller", "wrong")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "UNAUTHORIZED")

	got, err := r.Resolve(t.Context(), imageconfig.Request{Namespace: "ns", Image: image, Platform: linuxAMD64, Keychain: pullSecret(t, reg, "puller", "s3cret")})
	require.NoError(t, err, "an earlier failure is not cached")
	assert.Equal(t, []string{"/private"}, got.Cmd)
}

// A failing registry: the error says so, is not cached, and the next lookup succeeds once it recovers.
func TestResolveReportsAFailingRegistry(t *testing.T) {
	reg, image := registrytest.Serve(t, "", "", "app:1", v1.Config{Entrypoint: []string{"/app"}})
	r := imageconfig.New(imageconfig.Options{})
	reg.Fail(http.StatusInternalServerError)
	_, err := resolve(t, r, image)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "500")
	_, err = resolve(t, r, reg.Host+"/missing:1")
	require.Error(t, err)
	reg.Fail(0)
	_, err = resolve(t, r, reg.Host+"/missing:1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "UNKNOWN")
	got, err := resolve(t, r, image)
	require.NoError(t, err)
	assert.Equal(t, []string{"/app"}, got.Entrypoint)
}

// A registry slower than the budget: the admissions waiting for it give up at the budget, the one
// lookup (deduplicated across them) goes on and fills the cache, and the next admission gets the config
// without asking the registry again.
func TestResolveGoesOnInTheBackgroundPastTheBudget(t *testing.T) {
	reg, image := registrytest.Serve(t, "", "", "slow:1", v1.Config{Entrypoint: []string{"/slow"}})
	r := imageconfig.New(imageconfig.Options{Budget: 200 * time.Millisecond})
	release := reg.Hold()
	defer release()
	before := reg.ManifestRequests()

	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Go(func() {
			start := time.Now()
			_, errs[i] = resolve(t, r, image)
			assert.Less(t, time.Since(start), 2*time.Second, "the budget bounds the wait")
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.ErrorIs(t, err, imageconfig.ErrBudget)
	}
	assert.Equal(t, before+1, reg.ManifestRequests(), "one lookup for the five admissions")

	release()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		// 1 ms: only a cached config can be returned in time.
		got, err := r.Resolve(ctx, imageconfig.Request{Namespace: "ns", Image: image, Platform: linuxAMD64})
		require.NoError(c, err)
		assert.Equal(c, []string{"/slow"}, got.Entrypoint)
	}, 10*time.Second, 20*time.Millisecond)
}

// An admission's own deadline ends its wait as the budget does.
func TestResolveHonoursTheAdmissionsDeadline(t *testing.T) {
	reg, image := registrytest.Serve(t, "", "", "slow:1", v1.Config{Entrypoint: []string{"/slow"}})
	r := imageconfig.New(imageconfig.Options{Budget: time.Minute})
	release := reg.Hold()
	defer release()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := r.Resolve(ctx, imageconfig.Request{Namespace: "ns", Image: image, Platform: linuxAMD64})
	require.ErrorIs(t, err, imageconfig.ErrBudget)
}

func TestResolveRefusesAnInvalidReference(t *testing.T) {
	_, err := resolve(t, imageconfig.New(imageconfig.Options{}), "UPPER/case::x")
	require.Error(t, err)
}
