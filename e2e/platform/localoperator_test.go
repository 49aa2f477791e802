//go:build e2e

package platform

// The operator tests run their operator as a local process they can start, stop and SIGKILL at any
// instant, under the ServiceAccount (and so the RBAC) of its manifest. The manifest is installed with
// `kubectl apply -f deploy/<operator>.yaml` first, and the Deployment it creates is parked (scaled to
// 0) while the test runs: it would otherwise compete for the operator's leader election.
