//go:build tools

// Package etcd pins the etcd server that the Makefile builds with
// `go build go.etcd.io/etcd/server/v3` from this module.
package etcd

import _ "go.etcd.io/etcd/server/v3"
