package controller

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// reference is one ConfigMap or Secret named by a pod template.
type reference struct {
	kind     string // "ConfigMap" or "Secret"
	name     string
	optional bool
}

// references returns every ConfigMap and Secret the pod spec references through env, envFrom, volumes
// and projected volumes, sorted and deduplicated (a reference is optional only if every use is).
func references(spec *corev1.PodSpec) []reference {
	seen := map[string]*reference{}
	add := func(kind, name string, optional *bool) {
		if name == "" {
			return
		}
		opt := optional != nil && *optional
		key := kind + "/" + name
		if r, ok := seen[key]; ok {
			r.optional = r.optional && opt
			return
		}
		seen[key] = &reference{kind: kind, name: name, optional: opt}
	}
	containers := slices.Concat(spec.InitContainers, spec.Containers)
	for _, c := range containers {
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				add("ConfigMap", r.Name, r.Optional)
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				add("Secret", r.Name, r.Optional)
			}
		}
		for _, e := range c.EnvFrom {
			if r := e.ConfigMapRef; r != nil {
				add("ConfigMap", r.Name, r.Optional)
			}
			if r := e.SecretRef; r != nil {
				add("Secret", r.Name, r.Optional)
			}
		}
	}
	for _, v := range spec.Volumes {
		if r := v.ConfigMap; r != nil {
			add("ConfigMap", r.Name, r.Optional)
		}
		if r := v.Secret; r != nil {
			add("Secret", r.SecretName, r.Optional)
		}
		if p := v.Projected; p != nil {
			for _, s := range p.Sources {
				if r := s.ConfigMap; r != nil {
					add("ConfigMap", r.Name, r.Optional)
				}
				if r := s.Secret; r != nil {
					add("Secret", r.Name, r.Optional)
				}
			}
		}
	}
	out := make([]reference, 0, len(seen))
	for _, r := range seen {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b reference) int { return strings.Compare(a.kind+"/"+a.name, b.kind+"/"+b.name) })
	return out
}

// referencedNames returns the names of the referenced objects of one kind, for the field indexes.
func referencedNames(ests *extendedv1alpha1.ExtendedStatefulSet, kind string) []string {
	var names []string
	for _, r := range references(&ests.Spec.Template.Spec.Template.Spec) {
		if r.kind == kind {
			names = append(names, r.name)
		}
	}
	return names
}

// configHash is the keyed hash of the referenced data, the non-optional references that do not exist,
// and the spec.reloadKeys entries that name no reference.
type configHash struct {
	hash    string
	missing []string // "ConfigMap/name"
	unused  []string // "ConfigMap/name"
}

// computeConfigHash reads every referenced ConfigMap and Secret and hashes their data (data and binaryData;
// metadata never counts) with HMAC-SHA256 under the operator's key (see loadOrCreateHashKey), the
// ExtendedStatefulSet's UID mixed in. Without the key the annotation is useless for testing guesses of
// a Secret's value, and the same data gives different hashes in different objects. An optional
// reference that does not exist hashes as absent, so creating it later rolls the pods.
func computeConfigHash(ctx context.Context, c client.Reader, key []byte, ests *extendedv1alpha1.ExtendedStatefulSet) (configHash, error) {
	mac := hmac.New(sha256.New, key)
	var out configHash
	// Every field is length-prefixed so that no two different inputs give the same byte stream.
	write := func(s string) { fmt.Fprintf(mac, "%d:%s;", len(s), s) }
	write(string(ests.UID))
	writeMap := func(data map[string][]byte) {
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		write(fmt.Sprint(len(keys)))
		for _, k := range keys {
			write(k)
			write(string(data[k]))
		}
	}
	selected := map[string][]string{} // "Kind/name" -> the keys that count (spec.reloadKeys)
	for _, rk := range ests.Spec.ReloadKeys {
		selected[rk.Kind+"/"+rk.Name] = rk.Keys
	}
	for _, ref := range references(&ests.Spec.Template.Spec.Template.Spec) {
		write(ref.kind)
		write(ref.name)
		keys, narrowed := selected[ref.kind+"/"+ref.name]
		delete(selected, ref.kind+"/"+ref.name)
		key := client.ObjectKey{Namespace: ests.Namespace, Name: ref.name}
		var data map[string][]byte
		var err error
		switch ref.kind {
		case "ConfigMap":
			cm := &corev1.ConfigMap{}
			if err = c.Get(ctx, key, cm); err == nil {
				data = make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
				for k, v := range cm.Data {
					data["d/"+k] = []byte(v)
				}
				for k, v := range cm.BinaryData {
					data["b/"+k] = v
				}
			}
		case "Secret":
			s := &corev1.Secret{}
			if err = c.Get(ctx, key, s); err == nil {
				data = s.Data
			}
		}
		switch {
		case apierrors.IsNotFound(err):
			write("absent")
			if !ref.optional {
				out.missing = append(out.missing, ref.kind+"/"+ref.name)
			}
		case err != nil:
			return configHash{}, fmt.Errorf("reading %s %s: %w", ref.kind, ref.name, err)
		case narrowed:
			// A distinct marker, so that narrowing to every key still reads as a different input.
			write("present, keys selected")
			writeMap(selectKeys(data, keys))
		default:
			write("present")
			writeMap(data)
		}
	}
	out.unused = slices.Sorted(maps.Keys(selected))
	out.hash = hex.EncodeToString(mac.Sum(nil))
	return out, nil
}

// selectKeys returns the entries of data whose key is one of keys; a ConfigMap's keys carry the "d/"
// (data) or "b/" (binaryData) prefix computeConfigHash gives them, and either counts.
func selectKeys(data map[string][]byte, keys []string) map[string][]byte {
	out := map[string][]byte{}
	for k, v := range data {
		bare := k // a Secret's key, or a ConfigMap's with its prefix cut below (keys have no "/")
		if b, ok := strings.CutPrefix(k, "d/"); ok {
			bare = b
		} else if b, ok := strings.CutPrefix(k, "b/"); ok {
			bare = b
		}
		if slices.Contains(keys, bare) {
			out[k] = v
		}
	}
	return out
}
