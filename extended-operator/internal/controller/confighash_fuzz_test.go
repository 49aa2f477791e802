package controller

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// configObjects is a client.Reader over one ConfigMap "cm" and one Secret "s" (either may be absent):
// the fuzz target needs thousands of hashes a second, which a fake client's serialisation would not give.
type configObjects struct {
	cm *corev1.ConfigMap
	s  *corev1.Secret
}

func (o configObjects) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	switch out := obj.(type) {
	case *corev1.ConfigMap:
		if o.cm != nil && key.Name == o.cm.Name {
			o.cm.DeepCopyInto(out)
			return nil
		}
		return apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, key.Name)
	case *corev1.Secret:
		if o.s != nil && key.Name == o.s.Name {
			o.s.DeepCopyInto(out)
			return nil
		}
		return apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, key.Name)
	}
	return fmt.Errorf("unexpected %T", obj)
}

func (configObjects) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return fmt.Errorf("not listed")
}

// parseConfig turns "c:k=v;b:k=v;s:k=v;-c;-s" into a ConfigMap's data and binaryData and a Secret's
// data; "-c" and "-s" make the object absent. Later duplicates of a key win, as in a map literal.
func parseConfig(in string) configObjects {
	o := configObjects{
		cm: &corev1.ConfigMap{Data: map[string]string{}, BinaryData: map[string][]byte{}},
		s:  &corev1.Secret{Data: map[string][]byte{}},
	}
	o.cm.Name, o.s.Name = "cm", "s"
	absentCM, absentS := false, false
	for _, item := range strings.Split(in, ";") {
		switch item {
		case "-c":
			absentCM = true
			continue
		case "-s":
			absentS = true
			continue
		}
		kind, kv, ok := strings.Cut(item, ":")
		if !ok {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		switch kind {
		case "c":
			o.cm.Data[k] = v
		case "b":
			o.cm.BinaryData[k] = []byte(v)
		case "s":
			o.s.Data[k] = []byte(v)
		}
	}
	if absentCM {
		o.cm = nil
	}
	if absentS {
		o.s = nil
	}
	return o
}

// sameConfig reports whether two configurations hold the same data (what must give the same hash).
func sameConfig(a, b configObjects) bool {
	if (a.cm == nil) != (b.cm == nil) || (a.s == nil) != (b.s == nil) {
		return false
	}
	if a.cm != nil && (!maps.Equal(a.cm.Data, b.cm.Data) || !maps.EqualFunc(a.cm.BinaryData, b.cm.BinaryData, bytesEqual)) {
		return false
	}
	return a.s == nil || maps.EqualFunc(a.s.Data, b.s.Data, bytesEqual)
}

func bytesEqual(x, y []byte) bool { return string(x) == string(y) }

// FuzzConfigHash checks the canonical encoding behind the config hash: two configurations give the same
// hash exactly when they hold the same data — key order never matters, and no shift of bytes between
// keys and values, between a ConfigMap's data and binaryData, or between present and absent objects
// makes two different configurations collide (each of which would skip or force a pod restart).
func FuzzConfigHash(f *testing.F) {
	f.Add("c:a=1;c:b=2", "c:b=2;c:a=1", "uid")
	f.Add("c:a=1", "b:a=1", "uid")
	f.Add("c:ab=", "c:a=b", "uid")
	f.Add("c:a=1;s:a=1", "s:a=1;c:a=1", "")
	f.Add("-c", "", "uid")
	f.Add("-c;-s", "-s;-c", "uid")
	f.Add("c:1:a=", "c:1=a", "u")
	f.Add("s:x=y;z", "s:x=y", "u")
	key := []byte("fuzz-key")
	f.Fuzz(func(t *testing.T, a, b, uid string) {
		ests := &extendedv1alpha1.ExtendedStatefulSet{}
		ests.Namespace, ests.UID = "ns", types.UID(strings.ToValidUTF8(uid, "?"))
		ests.Spec.Template.Spec.Template.Spec = corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", EnvFrom: []corev1.EnvFromSource{
				{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Optional: ptr.To(true)}},
			}}},
			Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}}},
		}
		ca, cb := parseConfig(a), parseConfig(b)
		ha, err := computeConfigHash(t.Context(), ca, key, ests)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := computeConfigHash(t.Context(), ca, key, ests)
		if again.hash != ha.hash {
			t.Fatal("the hash of the same data changed")
		}
		if (ca.s == nil) != (len(ha.missing) == 1) {
			t.Fatalf("missing %v with Secret present=%v (the optional ConfigMap never counts)", ha.missing, ca.s != nil)
		}
		hb, err := computeConfigHash(t.Context(), cb, key, ests)
		if err != nil {
			t.Fatal(err)
		}
		if same := sameConfig(ca, cb); (ha.hash == hb.hash) != same {
			t.Fatalf("%q and %q: same data %v, same hash %v", a, b, same, ha.hash == hb.hash)
		}
	})
}
