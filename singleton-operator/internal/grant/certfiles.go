package grant

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

// certFileSync copies the serving certificate of the rotator's Secret into dir (an emptyDir) whenever the
// Secret changes, and closes Written after the first complete copy.
//
// Why not a Secret volume: the kubelet refreshes Secret volumes only on its periodic pod sync, so on a
// fresh install the operator waited about 80 s for the certificate its own rotator had just written —
// and every status-sidecar stayed held that long. Read through the API (a watch on that one Secret), the
// certificate is served about a second after the rotator created it. Fail closed stays: no certificate,
// no endpoint, no grant.
type certFileSync struct {
	dir     string
	once    sync.Once
	Written chan struct{}
}

// addCertFileSync follows the Secret key with a watch restricted to that one Secret (the operator's RBAC
// on Secrets is a Role in its own namespace) and writes tls.crt and tls.key into dir. The watch runs on
// every replica, leader or not, like the grant endpoint.
func addCertFileSync(mgr ctrl.Manager, key client.ObjectKey, dir string) (*certFileSync, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme:            mgr.GetScheme(),
		Mapper:            mgr.GetRESTMapper(),
		DefaultNamespaces: map[string]cache.Config{key.Namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Field: fields.OneTermEqualSelector("metadata.name", key.Name)},
		},
	})
	if err != nil {
		return nil, err
	}
	informer, err := c.GetInformer(context.Background(), &corev1.Secret{})
	if err != nil {
		return nil, err
	}
	s := &certFileSync{dir: dir, Written: make(chan struct{})}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    s.write,
		UpdateFunc: func(_, obj any) { s.write(obj) },
	}); err != nil {
		return nil, err
	}
	return s, mgr.Add(&unelected{c})
}

func (s *certFileSync) write(obj any) {
	secret, ok := obj.(*corev1.Secret)
	if !ok || len(secret.Data[corev1.TLSCertKey]) == 0 || len(secret.Data[corev1.TLSPrivateKeyKey]) == 0 {
		return // the rotator has not filled it yet
	}
	if err := writeCertFiles(s.dir, secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey]); err != nil {
		logf.Log.WithName("grant").Error(err, "Writing the grant endpoint's certificate", "dir", s.dir)
		return
	}
	s.once.Do(func() { close(s.Written) })
}

// writeCertFiles replaces tls.key, then tls.crt, each through a rename so a reader never sees half a file.
func writeCertFiles(dir string, cert, key []byte) error {
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
