// Package certfiles follows a TLS Secret through the API and keeps its certificate and key as files.
//
// Why not a Secret volume: the kubelet refreshes Secret volumes only on its periodic pod sync (a minute
// or more), so a process whose certificate a rotator has just written would wait that long. Read
// through a watch of that one Secret, the files are written about a second after the Secret is.
package certfiles

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// FollowSecret calls f with the Secret key whenever it is created or changes, through a watch of that
// one Secret (a Role in its namespace is all the RBAC it needs), on every replica, leader or not.
func FollowSecret(mgr ctrl.Manager, key client.ObjectKey, f func(*corev1.Secret)) error {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme:            mgr.GetScheme(),
		Mapper:            mgr.GetRESTMapper(),
		DefaultNamespaces: map[string]cache.Config{key.Namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Field: fields.OneTermEqualSelector("metadata.name", key.Name)},
		},
	})
	if err != nil {
		return err
	}
	informer, err := c.GetInformer(context.Background(), &corev1.Secret{})
	if err != nil {
		return err
	}
	call := func(obj any) {
		if secret, ok := obj.(*corev1.Secret); ok {
			f(secret)
		}
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    call,
		UpdateFunc: func(_, obj any) { call(obj) },
	}); err != nil {
		return err
	}
	return mgr.Add(&unelected{c})
}

// Sync writes tls.crt and tls.key of the Secret key into dir whenever the Secret changes; the returned
// channel closes after the first complete copy. A Secret the rotator has not filled yet is skipped, so
// a caller that waits on the channel stays fail-closed.
func Sync(mgr ctrl.Manager, key client.ObjectKey, dir string) (<-chan struct{}, error) {
	written := make(chan struct{})
	var once sync.Once
	log := logf.Log.WithName("cert-files")
	err := FollowSecret(mgr, key, func(secret *corev1.Secret) {
		cert, tlsKey := secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey]
		if len(cert) == 0 || len(tlsKey) == 0 {
			return
		}
		if err := Write(dir, cert, tlsKey); err != nil {
			log.Error(err, "Writing the serving certificate", "dir", dir)
			return
		}
		once.Do(func() { close(written) })
	})
	return written, err
}

// Write replaces tls.key, then tls.crt, each through a rename so a reader never sees half a file.
func Write(dir string, cert, key []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{corev1.TLSPrivateKeyKey, key}, {corev1.TLSCertKey, cert}} {
		tmp := filepath.Join(dir, "."+f.name+".tmp")
		if err := os.WriteFile(tmp, f.data, 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, f.name)); err != nil {
			return fmt.Errorf("installing %s: %w", f.name, err)
		}
	}
	return nil
}

// unelected runs a cache on every replica, leader or not.
type unelected struct{ cache.Cache }

func (unelected) NeedLeaderElection() bool { return false }
