//go:build e2e

package framework

import (
	"io"
	"log"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/require"

	"github.com/statefulops/statefulops/e2e/realnode"
)

// ServeTestAppRegistry serves an image registry (go-containerregistry's pkg/registry) for the rest of
// the test on the real node's gateway address, which the host's containerd and the pods both reach,
// pushes the e2e test app's image into it (from the tarball `make images` built) and lets the real
// node pull from it over plain HTTP. It returns the image's reference there: a pod that names it is
// pulled for real by the kubelet, and the webhook-server reads its config (ENTRYPOINT) from there.
func ServeTestAppRegistry(t *testing.T) string {
	t.Helper()
	listener, err := net.Listen("tcp", net.JoinHostPort(realnode.GatewayIP, "0"))
	require.NoError(t, err, "listen on the real node's gateway address")
	server := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(func() { _ = server.Close() })
	host := listener.Addr().String()

	ref, err := name.ParseReference(host + "/" + strings.TrimPrefix(testAppImage(), "docker.io/"))
	require.NoError(t, err)
	// Pushed as is, the image would have the imported one's config (so its ID) under another manifest
	// digest, and containerd 1.6's CRI image store, which keys images by ID, then stops finding the
	// imported name: pods that run it with imagePullPolicy Never failed with ErrImageNeverPull after a
	// pod had pulled this one. A label of its own gives it its own ID; the layers are shared.
	pushTestApp(t, ref, "ServeTestAppRegistry")
	require.NoError(t, realnode.TrustRegistry(RealNode.StateDir, host))
	return ref.String()
}

// PushTestAppVariant pushes the test app's image once more into the registry of ref (a reference
// ServeTestAppRegistry returned), under tag and with a config of its own (so another digest): an image
// no one has read yet, e.g. for an admission with a cold image cache. It returns the new reference.
func PushTestAppVariant(t *testing.T, ref, tag string) string {
	t.Helper()
	base, err := name.ParseReference(ref)
	require.NoError(t, err)
	variant := base.Context().Tag(tag)
	pushTestApp(t, variant, "PushTestAppVariant "+tag)
	return variant.String()
}

// pushTestApp pushes the image `make images` built for the test app to ref, with the config label
// dev.statefulops.e2e/served-by=by.
func pushTestApp(t *testing.T, ref name.Reference, by string) {
	t.Helper()
	img, err := tarball.ImageFromPath(filepath.Join(RealNode.Cluster.ImagesDir(), "testapp.tar"), nil)
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	cf = cf.DeepCopy()
	if cf.Config.Labels == nil {
		cf.Config.Labels = map[string]string{}
	}
	cf.Config.Labels["dev.statefulops.e2e/served-by"] = by
	img, err = mutate.ConfigFile(img, cf)
	require.NoError(t, err)
	require.NoError(t, remote.Write(ref, img, remote.WithContext(t.Context())), "push %s", ref)
}
