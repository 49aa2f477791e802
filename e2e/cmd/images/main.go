// Command images packages static binaries as container image tarballs, without Docker or a registry:
//
//	images -out DIR -version v0.1.0 [-repo statefulops] [-source URL] [-licenses SPDX] [-created TIME] [-force] \
//	    [-sbom-generator PATH] NAME=BINARY [NAME=BINARY...]
//
// For each NAME it writes DIR/NAME.tar, the image tagged REPO/NAME:VERSION in `docker save` layout
// (manifest.json + config + one gzipped layer), which both `docker load` and
// `ctr -n k8s.io images import` accept. The image is scratch-like, one layer holding:
//
//	/NAME        the binary, mode 0755
//	/etc/passwd  root and nonroot (65532), /etc/group likewise
//	/home/nonroot, owned by 65532
//	/tmp         mode 1777
//	/sbom.cdx.json  with -sbom-generator: the binary's CycloneDX SBOM (JSON), every module compiled
//	             into it with its version, from the binary's build info (cyclonedx-gomod bin)
//
// and its config: Entrypoint ["/NAME"], User 65532:65532, WorkingDir /, Env PATH, os linux, the
// architecture of the binary (its GOARCH), and the OCI labels org.opencontainers.image.{title, version,
// source, description, licenses}, and with an SBOM the label dev.statefulops.image.sbom, its path and
// SHA-256 digest (which also tells a stale tarball from a fresh one). Every timestamp is the -created time (default: $SOURCE_DATE_EPOCH, else
// the Unix epoch), so the same inputs give the same bytes and the same digests.
//
// The SBOM is made without a timestamp or serial number (-notimestamp -noserial), so it too is the same
// for the same binary.
//
// The binary must be a static Linux ELF executable (CGO_ENABLED=0): the image has no libc. A tarball
// that is newer than its binary and already holds the same tag and labels is kept ("up to date");
// -force rebuilds it.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The non-root user of every image, as in distroless's "nonroot" images.
const (
	nonrootID = 65532
	user      = "65532:65532"
	sbomPath  = "sbom.cdx.json"
	sbomLabel = "dev.statefulops.image.sbom"
	envPath   = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	passwd    = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group     = "root:x:0:\nnonroot:x:65532:\n"
)

// descriptions of the project's images (label org.opencontainers.image.description).
var descriptions = map[string]string{
	"singleton-operator": "statefulops operator for StatefulSingleton: no two pods of a singleton workload run their main process at once",
	"cluster-operator":   "statefulops operator for StatefulCluster: a StatefulSet-like set whose pod identities are never reused",
	"lease-operator":     "statefulops operator for StatefulSetLock: exactly one writer among a StatefulSet's ready pods",
	"rollout-operator":   "statefulops operator for PhasedRollout: StatefulSet updates one pod at a time, gated by Prometheus checks",
	"extended-operator":  "statefulops operator for ExtendedStatefulSet: scaling limits, config restarts, versioned StatefulSets, zones",
	"webhook-server":     "statefulops admission webhook server",
	"testapp":            "statefulops e2e test app: records its start, SIGTERM and stop",
	"pause":              "statefulops pod sandbox (pause) program",
}

// imageName is what a NAME may be: one path component of a Docker repository name.
var imageName = regexp.MustCompile(`^[a-z0-9]+(?:[._-][a-z0-9]+)*$`)

// spec is what one image is made of.
type spec struct {
	Name     string // image name, also the binary's path in the image
	Binary   string // path of the binary on this machine
	Repo     string
	Version  string
	Source   string
	Licenses string
	Created  time.Time
	// SBOM is the binary's CycloneDX SBOM, put in the image at /sbom.cdx.json; nil puts none.
	SBOM []byte
}

func (s spec) tag() (name.Tag, error) { return name.NewTag(s.Repo + "/" + s.Name + ":" + s.Version) }

func (s spec) labels() map[string]string {
	description := descriptions[s.Name]
	if description == "" {
		description = "statefulops " + s.Name
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       s.Name,
		"org.opencontainers.image.version":     s.Version,
		"org.opencontainers.image.source":      s.Source,
		"org.opencontainers.image.description": description,
		"org.opencontainers.image.licenses":    s.Licenses,
	}
	if s.SBOM != nil {
		labels[sbomLabel] = fmt.Sprintf("/%s sha256:%x", sbomPath, sha256.Sum256(s.SBOM))
	}
	return labels
}

// generateSBOM runs cyclonedx-gomod's bin mode on the binary: the modules and versions of its build info,
// the main module named with version. No timestamp and no serial number, so the same binary gives the
// same bytes.
func generateSBOM(generator, binary, version string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(generator, "bin", "-json", "-noserial", "-notimestamp", "-version", version, binary)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s bin %s: %w: %s", generator, binary, err, stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

func main() {
	out := flag.String("out", "", "directory of the image tarballs (required)")
	version := flag.String("version", "", "image tag and org.opencontainers.image.version (required)")
	repo := flag.String("repo", "statefulops", "repository prefix of the image names")
	source := flag.String("source", "https://github.com/statefulops/statefulops", "org.opencontainers.image.source")
	licenses := flag.String("licenses", "Apache-2.0", "org.opencontainers.image.licenses (an SPDX expression)")
	created := flag.String("created", "", "creation time of the images, RFC 3339 (default: $SOURCE_DATE_EPOCH, else the Unix epoch)")
	force := flag.Bool("force", false, "rebuild even the tarballs that are up to date")
	sbomGenerator := flag.String("sbom-generator", "", "cyclonedx-gomod binary: put each binary's CycloneDX SBOM in its image at /"+sbomPath+" (empty: no SBOM)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: images -out DIR -version VERSION [flags] NAME=BINARY [NAME=BINARY...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *out == "" || *version == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	createdAt, err := createdTime(*created, os.Getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		fail(err)
	}
	var specs []spec
	for _, arg := range flag.Args() {
		n, bin, ok := strings.Cut(arg, "=")
		if !ok || !imageName.MatchString(n) || bin == "" {
			fail(fmt.Errorf("%q is not NAME=BINARY with a lower-case image NAME", arg))
		}
		s := spec{Name: n, Binary: bin, Repo: *repo, Version: *version, Source: *source,
			Licenses: *licenses, Created: createdAt}
		if *sbomGenerator != "" {
			if s.SBOM, err = generateSBOM(*sbomGenerator, bin, *version); err != nil {
				fail(err)
			}
		}
		specs = append(specs, s)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	for _, s := range specs {
		msg, err := ensure(s, filepath.Join(*out, s.Name+".tar"), *force)
		if err != nil {
			fail(fmt.Errorf("%s: %w", s.Name, err))
		}
		fmt.Println("images:", msg)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "images:", err)
	os.Exit(1)
}

// createdTime is the -created flag, else SOURCE_DATE_EPOCH, else the Unix epoch.
func createdTime(flagValue, sourceDateEpoch string) (time.Time, error) {
	switch {
	case flagValue != "":
		t, err := time.Parse(time.RFC3339, flagValue)
		if err != nil {
			return time.Time{}, fmt.Errorf("-created: %w", err)
		}
		return t.UTC().Truncate(time.Second), nil // tar headers hold whole seconds
	case sourceDateEpoch != "":
		sec, err := strconv.ParseInt(sourceDateEpoch, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH: %w", err)
		}
		return time.Unix(sec, 0).UTC(), nil
	}
	return time.Unix(0, 0).UTC(), nil
}

// ensure writes the image of s to the tarball at path unless the tarball there is up to date, and says
// what it did.
func ensure(s spec, path string, force bool) (string, error) {
	tag, err := s.tag()
	if err != nil {
		return "", err
	}
	if !force && upToDate(s, tag, path) {
		return fmt.Sprintf("%s is up to date (%s is newer than %s)", tag, path, s.Binary), nil
	}
	img, err := build(s)
	if err != nil {
		return "", err
	}
	if err := writeTarball(path, tag, img); err != nil {
		return "", err
	}
	id, err := img.ConfigName()
	if err != nil {
		return "", err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("built %s → %s (%.1f MiB, %s, image id %s)", tag, path, float64(fi.Size())/(1<<20),
		cf.Platform(), id), nil
}

// upToDate reports whether the tarball at path is newer than the binary and holds tag with the labels
// of s.
func upToDate(s spec, tag name.Tag, path string) bool {
	tarInfo, err := os.Stat(path)
	if err != nil {
		return false
	}
	binInfo, err := os.Stat(s.Binary)
	if err != nil || !tarInfo.ModTime().After(binInfo.ModTime()) {
		return false
	}
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		return false
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return false
	}
	return maps.Equal(cf.Config.Labels, s.labels()) && slices.Equal(cf.Config.Entrypoint, []string{"/" + s.Name}) &&
		cf.Created.Equal(s.Created)
}

// build makes the image of s.
func build(s spec) (v1.Image, error) {
	platform, err := binaryPlatform(s.Binary)
	if err != nil {
		return nil, err
	}
	bin, err := os.ReadFile(s.Binary)
	if err != nil {
		return nil, err
	}
	layerTar, err := rootfs(s.Name, bin, s.SBOM, s.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithCompressionLevel(gzip.DefaultCompression), tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: layer, History: v1.History{
		Created:   v1.Time{Time: s.Created},
		CreatedBy: "statefulops e2e/cmd/images",
		Comment:   layerComment(s),
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: s.Created}
	cf.OS, cf.Architecture, cf.Variant = platform.OS, platform.Architecture, platform.Variant
	cf.Config = v1.Config{
		Entrypoint: []string{"/" + s.Name},
		User:       user,
		WorkingDir: "/",
		Env:        []string{envPath},
		Labels:     s.labels(),
	}
	return mutate.ConfigFile(img, cf)
}

// layerComment lists the files of the image's one layer (its history entry).
func layerComment(s spec) string {
	c := "/" + s.Name + ", /etc/passwd, /etc/group, /home/nonroot, /tmp"
	if s.SBOM != nil {
		c += ", /" + sbomPath
	}
	return c
}

// rootfs is the uncompressed layer: the binary at /name plus the few files a non-root process expects,
// and the binary's SBOM when there is one.
func rootfs(name string, bin, sbom []byte, mtime time.Time) ([]byte, error) {
	type entry struct {
		hdr  tar.Header
		data []byte
	}
	dir := func(path string, mode int64, owner int) entry {
		return entry{tar.Header{Typeflag: tar.TypeDir, Name: path, Mode: mode, Uid: owner, Gid: owner}, nil}
	}
	file := func(path string, mode int64, data []byte) entry {
		return entry{tar.Header{Typeflag: tar.TypeReg, Name: path, Mode: mode, Size: int64(len(data))}, data}
	}
	entries := []entry{
		dir("etc/", 0o755, 0),
		file("etc/group", 0o644, []byte(group)),
		file("etc/passwd", 0o644, []byte(passwd)),
		dir("home/", 0o755, 0),
		dir("home/nonroot/", 0o700, nonrootID),
		dir("tmp/", 0o1777, 0),
		file(name, 0o755, bin),
	}
	if sbom != nil {
		entries = append(entries, file(sbomPath, 0o644, sbom))
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &e.hdr
		h.ModTime = mtime
		h.Uname, h.Gname = "root", "root"
		if h.Uid == nonrootID {
			h.Uname, h.Gname = "nonroot", "nonroot"
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// binaryPlatform checks that the file is a static Linux ELF executable and returns its platform: the
// GOARCH recorded in a Go binary, else the ELF machine.
func binaryPlatform(path string) (v1.Platform, error) {
	f, err := elf.Open(path)
	if err != nil {
		return v1.Platform{}, fmt.Errorf("%s is not an ELF executable: %w", path, err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return v1.Platform{}, fmt.Errorf("%s is not an executable (ELF type %s)", path, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return v1.Platform{}, fmt.Errorf("%s is dynamically linked, but the image has no libc: build it with CGO_ENABLED=0", path)
		}
	}
	p := v1.Platform{OS: "linux"}
	if info, err := buildinfo.ReadFile(path); err == nil {
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		if goos := settings["GOOS"]; goos != "" && goos != "linux" {
			return v1.Platform{}, fmt.Errorf("%s is built for GOOS=%s, not linux", path, goos)
		}
		p.Architecture = settings["GOARCH"]
		if p.Architecture == "arm" && settings["GOARM"] != "" {
			goarm, _, _ := strings.Cut(settings["GOARM"], ",") // e.g. "7" or "6,softfloat"
			p.Variant = "v" + goarm
		}
	}
	if p.Architecture == "" {
		arch, ok := map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64", elf.EM_386: "386",
			elf.EM_ARM: "arm", elf.EM_PPC64: "ppc64le", elf.EM_S390: "s390x", elf.EM_RISCV: "riscv64"}[f.Machine]
		if !ok {
			return v1.Platform{}, fmt.Errorf("%s: unknown ELF machine %s", path, f.Machine)
		}
		p.Architecture = arch
	}
	return p, nil
}

// writeTarball writes the image to path atomically (a temporary file renamed into place).
func writeTarball(path string, tag name.Tag, img v1.Image) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := tarball.Write(tag, img, tmp); err != nil {
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return errors.Join(err, os.Remove(tmp.Name()))
	}
	return nil
}
