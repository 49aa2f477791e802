// Package version reports the version of a statefulops binary.
package version

import "runtime/debug"

// Version is set at build time with -ldflags "-X github.com/statefulops/statefulops/shared/version.Version=vX.Y.Z".
// When it is not set, the module version recorded by the Go toolchain is used (e.g. after `go install ...@vX.Y.Z`).
var Version = ""

// Get returns the binary's version, or "devel" for a build that carries none.
func Get() string {
	if Version != "" {
		return Version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "devel"
}
