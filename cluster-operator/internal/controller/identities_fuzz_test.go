package controller

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
)

// maxOrdinal is the largest ordinal ordinalOf parses (18 digits).
const maxOrdinal = 999999999999999999

// FuzzAllocate checks identity allocation (Ordinal format) against arbitrary traces: only canonical
// <cluster>-<n> names parse, the names handed out are distinct, above the recorded mark and above every
// trace's ordinal (no identity is ever reused), consecutive, and the new mark is just above them.
func FuzzAllocate(f *testing.F) {
	f.Add("db", "db-1,db-3,db-x,db-01,other-9", int64(4), "db-11", "db-20", uint8(3))
	f.Add("db", "db-999999999999999999,db-1234567890123456789", int64(0), "", "", uint8(2))
	f.Add("a-b", "a-b-1,a-b-c-2,a-2", int64(0), "a-b-7", "", uint8(1))
	f.Add("db", "", int64(0), "", "", uint8(0))
	f.Fuzz(func(t *testing.T, cluster, traces string, mark int64, ledger, retained string, k uint8) {
		if mark < 0 || mark > maxOrdinal+1 {
			return // status.nextIdentity is written by the operator from allocate's results only
		}
		sc := &clusterv1alpha1.StatefulCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster}}
		sc.Status.NextIdentity = mark
		sc.Status.Identities = []clusterv1alpha1.IdentityRecord{{Name: ledger}}
		sc.Status.RetiredClaims = []clusterv1alpha1.RetiredClaim{{Identity: retained}}
		names := strings.Split(traces, ",")

		floor := mark
		for _, name := range append(slices.Clone(names), ledger, retained) {
			n, ok := ordinalOf(cluster, name)
			if !ok {
				continue
			}
			if name != identityName(sc, n) {
				t.Fatalf("ordinalOf(%q, %q) = %d, but that identity is named %q", cluster, name, n, identityName(sc, n))
			}
			floor = max(floor, n+1)
		}
		if floor+int64(k) > maxOrdinal+1 {
			// allocate would hand out a 19-digit ordinal that ordinalOf does not parse back, so the identity
			// would leave no trace highWater sees. Unreachable in practice (10^18 identities, or a trace
			// made on purpose); reported to the owner (fuzz-requests.md) rather than fixed here.
			return
		}
		got, next := allocate(sc, int(k), map[string]bool{}, names)
		if len(got) != int(k) {
			t.Fatalf("%d names for %d", len(got), k)
		}
		for i, name := range got {
			n, ok := ordinalOf(cluster, name)
			if !ok || n != floor+int64(i) {
				t.Fatalf("name %d is %q (ordinal %d, %v), want ordinal %d", i, name, n, ok, floor+int64(i))
			}
			if slices.Contains(names, name) || name == ledger || name == retained {
				t.Fatalf("identity %q reused", name)
			}
		}
		if next != floor+int64(k) {
			t.Fatalf("new mark %d, want %d", next, floor+int64(k))
		}
	})
}

// FuzzOrdinalOf checks that an identity name and its ordinal round-trip for every ordinal the operator
// can reach.
func FuzzOrdinalOf(f *testing.F) {
	f.Add("db", int64(0))
	f.Add("db-1", int64(999999999999999999))
	f.Add("", int64(7))
	f.Fuzz(func(t *testing.T, cluster string, n int64) {
		if n < 0 || n > maxOrdinal {
			return // ordinals are non-negative and at most 18 digits (ordinalOf's bound)
		}
		sc := &clusterv1alpha1.StatefulCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster}}
		if got, ok := ordinalOf(cluster, identityName(sc, n)); !ok || got != n {
			t.Fatalf("ordinalOf(identityName(%q, %d)) = %d, %v", cluster, n, got, ok)
		}
		if got := claimName(sc, "data", identityName(sc, n)); got != cluster+"-data-"+strconv.FormatInt(n, 10) {
			t.Fatalf("claim name %q", got)
		}
	})
}

// percentRule is the CRD's CEL rule for a percentage of maxUnavailable and maxSurge.
var percentRule = regexp.MustCompile(`^(100|[1-9]?[0-9])%$`)

// fuzzIntOrPercent turns fuzz input into a maxUnavailable or maxSurge value: nil, an integer or a string.
func fuzzIntOrPercent(kind uint8, n int32, s string) *intstr.IntOrString {
	switch kind % 3 {
	case 1:
		return ptr.To(intstr.FromInt32(n))
	case 2:
		return ptr.To(intstr.FromString(s))
	}
	return nil
}

// celAllows restates the CRD's rules for one value: a non-negative integer or a percentage 0%–100%.
func celAllows(v *intstr.IntOrString) bool {
	if v == nil {
		return true
	}
	if v.Type == intstr.Int {
		return v.IntVal >= 0
	}
	return percentRule.MatchString(v.StrVal)
}

// isZero is the CRD's "== 0 || == '0%'".
func isZero(v *intstr.IntOrString) bool {
	return v != nil && ((v.Type == intstr.Int && v.IntVal == 0) || (v.Type == intstr.String && v.StrVal == "0%"))
}

// FuzzUpdateBounds checks the rolling-update bounds for every spec the CRD admits: both bounds are
// non-negative, never both 0 (the update could not progress), a percentage never exceeds the replicas
// (rounded up), an integer is taken as given, and the partition as written.
func FuzzUpdateBounds(f *testing.F) {
	f.Add(int32(10), uint8(2), int32(0), "25%", uint8(2), int32(0), "10%", int32(4), true)
	f.Add(int32(0), uint8(2), int32(0), "0%", uint8(2), int32(0), "10%", int32(0), true)
	f.Add(int32(3), uint8(1), int32(0), "", uint8(1), int32(2), "", int32(0), true)
	f.Add(int32(1), uint8(2), int32(0), "100%", uint8(0), int32(0), "", int32(9), true)
	f.Add(int32(5), uint8(0), int32(0), "", uint8(0), int32(0), "", int32(0), false)
	f.Fuzz(func(t *testing.T, replicas int32, uKind uint8, uInt int32, uStr string, sKind uint8, sInt int32, sStr string, partition int32, rolling bool) {
		mu, ms := fuzzIntOrPercent(uKind, uInt, uStr), fuzzIntOrPercent(sKind, sInt, sStr)
		if replicas < 0 || partition < 0 || !celAllows(mu) || !celAllows(ms) || (isZero(mu) && isZero(ms)) {
			return // refused by the CRD's schema and CEL rules
		}
		sc := &clusterv1alpha1.StatefulCluster{}
		sc.Spec.Replicas = ptr.To(replicas)
		if rolling {
			sc.Spec.UpdateStrategy.RollingUpdate = &clusterv1alpha1.RollingUpdateStatefulClusterStrategy{
				MaxUnavailable: mu, MaxSurge: ms, Partition: ptr.To(partition)}
		}
		u, s, p := updateBounds(sc)
		if u < 0 || s < 0 || (u == 0 && s == 0) {
			t.Fatalf("bounds maxUnavailable %d maxSurge %d (replicas %d, %v, %v)", u, s, replicas, mu, ms)
		}
		if !rolling {
			if u != 1 || s != 0 || p != 0 {
				t.Fatalf("defaults %d %d %d, want 1 0 0", u, s, p)
			}
			return
		}
		if p != int(partition) {
			t.Fatalf("partition %d, want %d", p, partition)
		}
		for _, c := range []struct {
			v   *intstr.IntOrString
			got int
		}{{mu, u}, {ms, s}} {
			switch {
			case c.v == nil:
			case c.v.Type == intstr.Int:
				if c.got != int(c.v.IntVal) && !(c.got == 1 && c.v.IntVal == 0) {
					t.Fatalf("integer %d resolved to %d", c.v.IntVal, c.got)
				}
			default:
				pct, _ := strconv.Atoi(strings.TrimSuffix(c.v.StrVal, "%"))
				want := (pct*int(replicas) + 99) / 100
				if c.got != want && !(c.got == 1 && want == 0) {
					t.Fatalf("%s of %d resolved to %d, want %d", c.v.StrVal, replicas, c.got, want)
				}
			}
		}
	})
}

// FuzzZonePlanner checks zone spread: each new pod goes first to the zones of identities lost in this
// reconcile (when the zone still has Ready nodes), then always to a least-populated zone; the counts
// only grow by the pods handed out, so the per-zone totals sum to the pods placed.
func FuzzZonePlanner(f *testing.F) {
	f.Add([]byte{3, 0, 0}, []byte{1, 7}, uint8(5))
	f.Add([]byte{0, 5, 2, 9}, []byte{}, uint8(20))
	f.Add([]byte{1}, []byte{0, 0, 3}, uint8(2))
	f.Fuzz(func(t *testing.T, counts, lost []byte, k uint8) {
		if len(counts) == 0 || len(counts) > 16 {
			return // the planner exists only with at least one zone that has Ready nodes
		}
		p := &zonePlanner{counts: map[string]int{}}
		total := 0
		for i, c := range counts {
			p.counts["z"+strconv.Itoa(i)] = int(c)
			total += int(c)
		}
		for _, l := range lost {
			p.lost = append(p.lost, "z"+strconv.Itoa(int(l)%20)) // some are zones without Ready nodes
		}
		pending := slices.Clone(p.lost)
		for range k {
			before := map[string]int{}
			for z, c := range p.counts {
				before[z] = c
			}
			zone := p.next()
			if _, ok := before[zone]; !ok {
				t.Fatalf("zone %q has no Ready node", zone)
			}
			refill := ""
			for len(pending) > 0 {
				z := pending[0]
				pending = pending[1:]
				if _, ok := before[z]; ok {
					refill = z
					break
				}
			}
			if refill != "" && zone != refill {
				t.Fatalf("zone %q chosen, the lost identity's zone %q comes first", zone, refill)
			}
			if refill == "" {
				for z, c := range before {
					if c < before[zone] {
						t.Fatalf("zone %q (%d pods) chosen over %q (%d)", zone, before[zone], z, c)
					}
				}
			}
			total++
			sum := 0
			for _, c := range p.counts {
				sum += c
			}
			if sum != total {
				t.Fatalf("zone counts sum to %d after placing %d pods", sum, total)
			}
		}
	})
}
