package main

import (
	"archive/tar"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sbomGenerator returns the cyclonedx-gomod that `make images` uses: $CYCLONEDX_GOMOD (the Makefile
// exports it), else the Makefile's pinned version installed through the Go module proxy into a
// temporary directory.
func sbomGenerator(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CYCLONEDX_GOMOD"); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	makefile, err := os.ReadFile("../../../Makefile")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^CYCLONEDX_GOMOD_VERSION\s*:=\s*(\S+)`).FindSubmatch(makefile)
	require.NotNil(t, m, "the Makefile pins CYCLONEDX_GOMOD_VERSION")
	dir := t.TempDir()
	install := exec.Command("go", "install", "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@"+string(m[1]))
	install.Env = append(os.Environ(), "GOBIN="+dir, "CGO_ENABLED=0", "GOWORK=off")
	out, err := install.CombinedOutput()
	require.NoError(t, err, string(out))
	return filepath.Join(dir, "cyclonedx-gomod")
}

// cdxBOM is the part of a CycloneDX BOM the test reads.
type cdxBOM struct {
	BOMFormat    string `json:"bomFormat"`
	SerialNumber string `json:"serialNumber"`
	Metadata     struct {
		Timestamp string       `json:"timestamp"`
		Component cdxComponent `json:"component"`
	} `json:"metadata"`
	Components []cdxComponent `json:"components"`
}

type cdxComponent struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	PURL    string `json:"purl"`
}

// imageFile returns the file at path in the one layer of the image tarball.
func imageFile(t *testing.T, tarballPath, version, path string) []byte {
	t.Helper()
	layers, err := readImage(t, tarballPath, version).Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1)
	rc, err := layers[0].Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("the image has no %s", path)
		}
		require.NoError(t, err)
		if h.Name == path {
			data, err := io.ReadAll(tr)
			require.NoError(t, err)
			return data
		}
	}
}

// TestImageCarriesAnSBOMOfEveryModule: with the generator `make images` uses, the image of a real
// binary (this command, built as `make build` builds) carries /sbom.cdx.json, a CycloneDX BOM that lists
// every module of the binary's build info with its version (the replacement's, where one applies) and
// names the main module; it has no timestamp or serial number, and two builds give the same tarball
// bytes, so the images stay reproducible.
func TestImageCarriesAnSBOMOfEveryModule(t *testing.T) {
	generator := sbomGenerator(t)
	dir := t.TempDir()
	binary := filepath.Join(dir, "images")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", binary, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))

	s := testSpec(binary)
	s.SBOM, err = generateSBOM(generator, binary, s.Version)
	require.NoError(t, err)
	path := filepath.Join(dir, "tiny.tar")
	_, err = ensure(s, path, false)
	require.NoError(t, err)

	raw := imageFile(t, path, s.Version, sbomPath)
	assert.Equal(t, s.SBOM, raw, "the image carries the generated SBOM as is")
	var bom cdxBOM
	require.NoError(t, json.Unmarshal(raw, &bom))
	assert.Equal(t, "CycloneDX", bom.BOMFormat)
	assert.Empty(t, bom.Metadata.Timestamp, "no timestamp: the same binary gives the same SBOM")
	assert.Empty(t, bom.SerialNumber, "no serial number: the same binary gives the same SBOM")

	info, err := buildinfo.ReadFile(binary)
	require.NoError(t, err)
	assert.Equal(t, info.Main.Path, bom.Metadata.Component.Name)
	assert.Equal(t, s.Version, bom.Metadata.Component.Version)
	listed := map[string]string{}
	for _, c := range bom.Components {
		listed[c.Name] = c.Version
	}
	require.NotEmpty(t, info.Deps)
	for _, dep := range info.Deps {
		mod := dep
		if dep.Replace != nil {
			mod = dep.Replace
		}
		if assert.Contains(t, listed, mod.Path, "the SBOM lists the module") {
			assert.Equal(t, mod.Version, listed[mod.Path], "the SBOM gives %s's version", mod.Path)
		}
	}
	assert.Len(t, bom.Components, len(info.Deps), "the SBOM lists the build info's modules and nothing else")
	t.Logf("SBOM of %s: %d modules, as its build info", info.Main.Path, len(bom.Components))

	cf, err := readImage(t, path, s.Version).ConfigFile()
	require.NoError(t, err)
	assert.Regexp(t, `^/sbom\.cdx\.json sha256:[0-9a-f]{64}$`, cf.Config.Labels[sbomLabel])

	// Reproducible: the SBOM generated again and the image built again are the same bytes.
	s2 := s
	s2.SBOM, err = generateSBOM(generator, binary, s.Version)
	require.NoError(t, err)
	assert.Equal(t, s.SBOM, s2.SBOM, "the SBOM is the same for the same binary")
	again := filepath.Join(t.TempDir(), "tiny.tar")
	_, err = ensure(s2, again, true)
	require.NoError(t, err)
	a, err := os.ReadFile(path)
	require.NoError(t, err)
	b, err := os.ReadFile(again)
	require.NoError(t, err)
	assert.Equal(t, a, b, "the two tarballs are the same bytes")
}

// A tarball built without the SBOM is stale once an SBOM is asked for (its label differs).
func TestUpToDateNeedsTheSameSBOM(t *testing.T) {
	binary := tinyBinary(t)
	path := filepath.Join(t.TempDir(), "tiny.tar")
	_, err := ensure(testSpec(binary), path, false)
	require.NoError(t, err)
	s := testSpec(binary)
	s.SBOM = []byte(`{"bomFormat":"CycloneDX"}`)
	msg, err := ensure(s, path, false)
	require.NoError(t, err)
	assert.Contains(t, msg, "built ")
	msg, err = ensure(s, path, false)
	require.NoError(t, err)
	assert.Contains(t, msg, "up to date")
	assert.Equal(t, s.SBOM, imageFile(t, path, s.Version, sbomPath))
}
