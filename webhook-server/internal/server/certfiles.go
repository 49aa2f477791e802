package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// addCertFileSync writes the serving certificate of the rotator's Secret into dir (an emptyDir) whenever
// the Secret changes. A Secret volume would do the same, but the kubelet refreshes those only on its pod
// sync (a minute or more), and every replica would wait that long for the certificate another replica
// generated; with the files written here a replica is ready seconds after the Secret is. The webhook
// server's certificate watcher reloads the files on change.
func addCertFileSync(mgr ctrl.Manager, key client.ObjectKey, dir string) error {
	log := logf.Log.WithName("cert-files")
	return followSecret(mgr, key, func(secret *corev1.Secret) {
		if len(secret.Data[corev1.TLSCertKey]) == 0 || len(secret.Data[corev1.TLSPrivateKeyKey]) == 0 {
			return
		}
		if err := writeCertFiles(dir, secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey]); err != nil {
			log.Error(err, "Writing the serving certificate", "dir", dir)
		}
	})
}

// followSecret calls f with the Secret key whenever it is created or changes, through a watch of that
// one Secret (the webhook server's RBAC on Secrets is a Role in its own namespace), on every replica.
func followSecret(mgr ctrl.Manager, key client.ObjectKey, f func(*corev1.Secret)) error {
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
	write := func(obj any) {
		if secret, ok := obj.(*corev1.Secret); ok {
			f(secret)
		}
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    write,
		UpdateFunc: func(_, obj any) { write(obj) },
	}); err != nil {
		return err
	}
	return mgr.Add(&unelected{c})
}

// writeCertFiles replaces tls.key, then tls.crt, each through a rename so a reader never sees half a file.
func writeCertFiles(dir string, cert, key []byte) error {
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
