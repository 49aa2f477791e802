// Command singleton-wrapper is the StatefulSingleton entrypoint wrapper as a binary of its own (package
// internal/wrapper documents it). In a pod the status-sidecar binary plays this part (it installs itself
// under this name), so app pods need no image of ours besides the sidecar's; this binary and its image
// serve pods admitted before that, and the process tests.
package main

import "github.com/statefulops/statefulops/singleton-operator/internal/wrapper"

func main() { wrapper.Main() }
