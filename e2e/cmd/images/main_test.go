package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tinyBinary builds a tiny static Go program and returns its path.
func tinyBinary(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() { println(\"tiny\") }\n"), 0o644))
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", "tiny", "main.go")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))
	return filepath.Join(dir, "tiny")
}

func testSpec(binary string) spec {
	return spec{Name: "tiny", Binary: binary, Repo: "statefulops", Version: "v0.1.0",
		Source: "https://github.com/statefulops/statefulops", Licenses: "Apache-2.0", Created: time.Unix(0, 0).UTC()}
}

// readImage reads the image tagged statefulops/tiny:<version> back from a tarball.
func readImage(t *testing.T, path, version string) v1.Image {
	t.Helper()
	tag, err := name.NewTag("statefulops/tiny:" + version)
	require.NoError(t, err)
	img, err := tarball.ImageFromPath(path, &tag)
	require.NoError(t, err)
	require.NoError(t, validate.Image(img), "digests, diff IDs and sizes agree")
	return img
}

// TestImage: the tarball holds the tagged image with its config, labels and the files of the one layer.
func TestImage(t *testing.T) {
	binary := tinyBinary(t)
	path := filepath.Join(t.TempDir(), "tiny.tar")
	msg, err := ensure(testSpec(binary), path, false)
	require.NoError(t, err)
	assert.Contains(t, msg, "built statefulops/tiny:v0.1.0 → "+path)

	manifest, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
	require.NoError(t, err)
	require.Len(t, manifest, 1)
	assert.Equal(t, []string{"statefulops/tiny:v0.1.0"}, manifest[0].RepoTags, "docker load and ctr import take this tag")

	img := readImage(t, path, "v0.1.0")
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, "linux", cf.OS)
	assert.Equal(t, runtime.GOARCH, cf.Architecture, "the binary's GOARCH")
	assert.True(t, cf.Created.Equal(time.Unix(0, 0)))
	assert.Equal(t, []string{"/tiny"}, cf.Config.Entrypoint)
	assert.Empty(t, cf.Config.Cmd)
	assert.Equal(t, "65532:65532", cf.Config.User)
	assert.Equal(t, "/", cf.Config.WorkingDir)
	assert.Equal(t, []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, cf.Config.Env)
	assert.Equal(t, map[string]string{
		"org.opencontainers.image.title":       "tiny",
		"org.opencontainers.image.version":     "v0.1.0",
		"org.opencontainers.image.source":      "https://github.com/statefulops/statefulops",
		"org.opencontainers.image.description": "statefulops tiny",
		"org.opencontainers.image.licenses":    "Apache-2.0",
	}, cf.Config.Labels)

	layers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1)
	rc, err := layers[0].Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	type file struct {
		mode     int64
		uid, gid int
		data     string
	}
	files := map[string]file{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		assert.True(t, h.ModTime.Equal(time.Unix(0, 0)), h.Name)
		files[h.Name] = file{h.Mode, h.Uid, h.Gid, string(data)}
	}
	bin, err := os.ReadFile(binary)
	require.NoError(t, err)
	assert.Equal(t, map[string]file{
		"tiny":          {0o755, 0, 0, string(bin)},
		"etc/":          {0o755, 0, 0, ""},
		"etc/passwd":    {0o644, 0, 0, "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"},
		"etc/group":     {0o644, 0, 0, "root:x:0:\nnonroot:x:65532:\n"},
		"home/":         {0o755, 0, 0, ""},
		"home/nonroot/": {0o700, 65532, 65532, ""},
		"tmp/":          {0o1777, 0, 0, ""},
	}, files)

	other, err := name.NewTag("statefulops/tiny:v9")
	require.NoError(t, err)
	_, err = tarball.ImageFromPath(path, &other)
	assert.Error(t, err, "only the one tag is in the tarball")
}

// TestReproducible: the same inputs give the same bytes, hence the same digests, whenever and wherever
// they are built.
func TestReproducible(t *testing.T) {
	binary := tinyBinary(t)
	first, second := filepath.Join(t.TempDir(), "tiny.tar"), filepath.Join(t.TempDir(), "tiny.tar")
	_, err := ensure(testSpec(binary), first, false)
	require.NoError(t, err)
	later := time.Now().Add(time.Minute)
	require.NoError(t, os.Chtimes(binary, later, later))
	_, err = ensure(testSpec(binary), second, true)
	require.NoError(t, err)

	a, err := os.ReadFile(first)
	require.NoError(t, err)
	b, err := os.ReadFile(second)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(a, b), "the two tarballs differ")
	digestA, err := readImage(t, first, "v0.1.0").Digest()
	require.NoError(t, err)
	digestB, err := readImage(t, second, "v0.1.0").Digest()
	require.NoError(t, err)
	assert.Equal(t, digestA, digestB)

	// Another creation time is another image.
	s := testSpec(binary)
	s.Created = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	_, err = ensure(s, second, true)
	require.NoError(t, err)
	digestC, err := readImage(t, second, "v0.1.0").Digest()
	require.NoError(t, err)
	assert.NotEqual(t, digestA, digestC)
}

// TestUpToDate: a tarball newer than its binary with the same tag and labels is kept; a newer binary,
// another version or -force rebuild it.
func TestUpToDate(t *testing.T) {
	binary := tinyBinary(t)
	path := filepath.Join(t.TempDir(), "tiny.tar")
	s := testSpec(binary)
	msg, err := ensure(s, path, false)
	require.NoError(t, err)
	assert.Contains(t, msg, "built ")
	old := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(binary, old, old))
	stamp := func() time.Time {
		fi, err := os.Stat(path)
		require.NoError(t, err)
		return fi.ModTime()
	}
	written := stamp()

	msg, err = ensure(s, path, false)
	require.NoError(t, err)
	assert.Equal(t, "statefulops/tiny:v0.1.0 is up to date ("+path+" is newer than "+binary+")", msg)
	assert.Equal(t, written, stamp())

	msg, err = ensure(s, path, true)
	require.NoError(t, err)
	assert.Contains(t, msg, "built ", "-force")

	s.Version = "v0.2.0"
	msg, err = ensure(s, path, false)
	require.NoError(t, err)
	assert.Contains(t, msg, "built statefulops/tiny:v0.2.0", "another version")
	readImage(t, path, "v0.2.0")

	newer := time.Now().Add(time.Hour)
	require.NoError(t, os.Chtimes(binary, newer, newer))
	msg, err = ensure(s, path, false)
	require.NoError(t, err)
	assert.Contains(t, msg, "built ", "a newer binary")
}

// TestRejects: only static Linux executables make images.
func TestRejects(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "script")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o755))
	_, err := ensure(testSpec(script), filepath.Join(dir, "a.tar"), false)
	assert.ErrorContains(t, err, "not an ELF executable")

	// Every Linux distribution's /bin/true is dynamically linked (Go's tests need no C compiler).
	_, err = ensure(testSpec("/bin/true"), filepath.Join(dir, "b.tar"), false)
	assert.ErrorContains(t, err, "dynamically linked")
	assert.NoFileExists(t, filepath.Join(dir, "b.tar"))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file is left behind")
}

func TestCreatedTime(t *testing.T) {
	for _, c := range []struct {
		flag, epoch string
		want        time.Time
	}{
		{"", "", time.Unix(0, 0)},
		{"", "1767225600", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"2026-02-03T04:05:06+01:00", "1767225600", time.Date(2026, 2, 3, 3, 5, 6, 0, time.UTC)},
	} {
		got, err := createdTime(c.flag, c.epoch)
		require.NoError(t, err)
		assert.True(t, c.want.Equal(got), "%v: got %v", c, got)
	}
	_, err := createdTime("", "yesterday")
	assert.Error(t, err)
}

// The config is the image's JSON as every runtime reads it; check the field names once.
func TestConfigJSON(t *testing.T) {
	img, err := build(testSpec(tinyBinary(t)))
	require.NoError(t, err)
	raw, err := img.RawConfigFile()
	require.NoError(t, err)
	var cfg map[string]any
	require.NoError(t, json.Unmarshal(raw, &cfg))
	assert.Equal(t, "1970-01-01T00:00:00Z", cfg["created"])
	assert.Equal(t, "65532:65532", cfg["config"].(map[string]any)["User"])
	assert.Equal(t, []any{"/tiny"}, cfg["config"].(map[string]any)["Entrypoint"])
}
