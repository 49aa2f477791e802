package controller

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// FuzzDesiredZones checks the split of the replicas over spec.az.zones for every spec the CRD admits
// (zones a set of up to 32 names): one zone per name, in order, with 1-based indexes; the shares sum to
// the desired replicas and differ by at most one, larger shares first; each zone's version hash is its
// own; without zones the single unnamed zone gets everything and the template hash; every StatefulSet
// name stays within a DNS label's 63 characters for a name the CRD admits (at most 40).
func FuzzDesiredZones(f *testing.F) {
	f.Add(true, int32(5), false, int32(0), "a,b,c", "")
	f.Add(true, int32(2), false, int32(0), "a,b,c", "topology.kubernetes.io/zone")
	f.Add(false, int32(0), true, int32(7), "z1,z2", "my/label")
	f.Add(false, int32(0), false, int32(0), "", "")
	f.Add(true, int32(0), false, int32(0), "only", "")
	f.Add(true, int32(10000), false, int32(0), strings.Repeat("z,", 31)+"z", "")
	f.Fuzz(func(t *testing.T, hasReplicas bool, replicas int32, hasMin bool, minimum int32, zones, nodeLabel string) {
		if replicas < 0 || minimum < 0 || minimum > 10000 {
			return // refused by the schema (scaling.min) or never scaled by the StatefulSet controller
		}
		ests := &extendedv1alpha1.ExtendedStatefulSet{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("n", 40)}}
		if hasReplicas {
			ests.Spec.Template.Spec.Replicas = ptr.To(replicas)
		}
		if hasMin {
			ests.Spec.Scaling = &extendedv1alpha1.Scaling{Min: ptr.To(minimum)}
		}
		var names []string
		if zones != "" {
			seen := map[string]bool{}
			for _, z := range strings.Split(zones, ",") {
				if z == "" || seen[z] {
					return // listType=set and MinLength=1
				}
				seen[z] = true
				names = append(names, z)
			}
			if len(names) > 32 {
				return // MaxItems=32
			}
			ests.Spec.AZ = &extendedv1alpha1.AvailabilityZones{Zones: names, NodeLabel: nodeLabel}
		}
		total := ests.Spec.DesiredReplicas()
		got := desiredZones(ests)

		if len(names) == 0 {
			if len(got) != 1 || got[0].zoned() || got[0].replicas != total || got[0].hash != templateHash(ests) {
				t.Fatalf("without zones: %+v, want one unnamed zone of %d replicas", got, total)
			}
			return
		}
		if len(got) != len(names) {
			t.Fatalf("%d zones for %d names", len(got), len(names))
		}
		var sum int32
		hashes := map[string]bool{}
		for i, z := range got {
			if z.name != names[i] || z.index != i+1 {
				t.Fatalf("zone %d is %q index %d", i, z.name, z.index)
			}
			if z.replicas < 0 || (i > 0 && z.replicas > got[i-1].replicas) || got[0].replicas-z.replicas > 1 {
				t.Fatalf("uneven split of %d: %+v", total, got)
			}
			if hashes[z.hash] {
				t.Fatalf("zones share the version hash %s", z.hash)
			}
			hashes[z.hash] = true
			if want := nodeLabel; want == "" && z.nodeLabel != extendedv1alpha1.DefaultZoneNodeLabel || want != "" && z.nodeLabel != want {
				t.Fatalf("node label %q for spec %q", z.nodeLabel, nodeLabel)
			}
			if name := statefulSetName(ests, z, 99999); len(name) > 63 {
				t.Fatalf("StatefulSet name %q is %d characters", name, len(name))
			}
			sum += z.replicas
		}
		if sum != total {
			t.Fatalf("zone shares sum to %d, want %d: %+v", sum, total, got)
		}
	})
}
