// Package registrytest serves a real OCI registry (go-containerregistry's pkg/registry) on loopback for
// the tests and benchmarks of image config lookups: optionally behind basic auth, with manifest
// requests that can be held (a slow registry) or failed with a status, and counted.
package registrytest

import (
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Registry is a loopback registry; Host is its host:port (spoken to over plain HTTP, as loopback).
type Registry struct {
	Host string
	// User and Password, when set, are required (basic auth) on every /v2/ request.
	User, Password string

	fail      atomic.Int32 // a status every manifest request gets; 0: none
	manifests atomic.Int64 // manifest requests served or failed
	mu        sync.Mutex
	hold      chan struct{} // manifest requests wait until it is closed; nil: none
}

// New serves a registry until the test ends; with a user, basic auth is required.
func New(tb testing.TB, user, password string) *Registry {
	tb.Helper()
	r := &Registry{User: user, Password: password}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.User != "" {
			u, p, ok := req.BasicAuth()
			if !ok || u != r.User || p != r.Password {
				w.Header().Set("WWW-Authenticate", `Basic realm="registrytest"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
				return
			}
		}
		if strings.Contains(req.URL.Path, "/manifests/") && req.Method != http.MethodPut {
			r.manifests.Add(1)
			r.mu.Lock()
			hold := r.hold
			r.mu.Unlock()
			if hold != nil {
				select {
				case <-hold:
				case <-req.Context().Done():
					return
				}
			}
			if status := r.fail.Load(); status != 0 {
				// Plain text, as a proxy in front of a broken registry answers.
				http.Error(w, http.StatusText(int(status)), int(status))
				return
			}
		}
		reg.ServeHTTP(w, req)
	}))
	tb.Cleanup(srv.Close)
	r.Host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// Hold makes manifest requests wait (a registry slower than any budget) until the returned function
// is called.
func (r *Registry) Hold() (release func()) {
	ch := make(chan struct{})
	r.mu.Lock()
	r.hold = ch
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			r.hold = nil
			r.mu.Unlock()
			close(ch)
		})
	}
}

// Fail answers every manifest request with status (0: serve again).
func (r *Registry) Fail(status int) { r.fail.Store(int32(status)) }

// ManifestRequests is the number of manifest reads so far (pushes read too: whether the manifest exists).
func (r *Registry) ManifestRequests() int64 { return r.manifests.Load() }

func (r *Registry) auth() remote.Option {
	if r.User == "" {
		return remote.WithAuth(authn.Anonymous)
	}
	return remote.WithAuth(&authn.Basic{Username: r.User, Password: r.Password})
}

// Image builds a small image (one random layer) with the given config and platform.
func Image(tb testing.TB, cfg v1.Config, platform v1.Platform) v1.Image {
	tb.Helper()
	img, err := random.Image(64, 1)
	if err != nil {
		tb.Fatal(err)
	}
	file, err := img.ConfigFile()
	if err != nil {
		tb.Fatal(err)
	}
	file = file.DeepCopy()
	file.Config = cfg
	file.OS, file.Architecture, file.Variant = platform.OS, platform.Architecture, platform.Variant
	img, err = mutate.ConfigFile(img, file)
	if err != nil {
		tb.Fatal(err)
	}
	return img
}

// Push writes img as repo:tag (repo without the host) and returns the reference by digest.
func (r *Registry) Push(tb testing.TB, repoTag string, img v1.Image) string {
	tb.Helper()
	return r.push(tb, repoTag, img, func(ref name.Reference) error { return remote.Write(ref, img, r.auth()) })
}

// push writes obj as repo:tag with write and returns the reference by obj's digest.
func (r *Registry) push(tb testing.TB, repoTag string, obj interface{ Digest() (v1.Hash, error) }, write func(name.Reference) error) string {
	tb.Helper()
	ref, err := name.ParseReference(r.Host + "/" + repoTag)
	if err != nil {
		tb.Fatal(err)
	}
	if err := write(ref); err != nil {
		tb.Fatal(err)
	}
	digest, err := obj.Digest()
	if err != nil {
		tb.Fatal(err)
	}
	return ref.Context().Digest(digest.String()).String()
}

// Manifest is an image of a multi-arch index and its platform.
type Manifest struct {
	Platform v1.Platform
	Image    v1.Image
}

// PushIndex writes a multi-arch index of images as repo:tag and returns the reference by the index's
// digest.
func (r *Registry) PushIndex(tb testing.TB, repoTag string, images ...Manifest) string {
	tb.Helper()
	idx := v1.ImageIndex(empty.Index)
	for _, m := range images {
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: m.Image, Descriptor: v1.Descriptor{Platform: &m.Platform}})
	}
	return r.push(tb, repoTag, idx, func(ref name.Reference) error { return remote.WriteIndex(ref, idx, r.auth()) })
}

// LinuxAMD64 is the platform of the images Serve pushes.
var LinuxAMD64 = v1.Platform{OS: "linux", Architecture: "amd64"}

// Serve serves a registry (New) holding one linux/amd64 image with cfg as repoTag, and returns it with
// the image's reference by tag.
func Serve(tb testing.TB, user, password, repoTag string, cfg v1.Config) (*Registry, string) {
	tb.Helper()
	r := New(tb, user, password)
	r.Push(tb, repoTag, Image(tb, cfg, LinuxAMD64))
	return r, r.Host + "/" + repoTag
}

// PullSecret is a Secret of type kubernetes.io/dockerconfigjson holding password for user at r, as a
// pod's imagePullSecrets names one.
func (r *Registry) PullSecret(namespace, name, user, password string) *corev1.Secret {
	cfg, _ := json.Marshal(map[string]any{"auths": map[string]any{r.Host: map[string]string{"username": user, "password": password}}})
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: cfg},
	}
}
