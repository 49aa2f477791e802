package controller

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
)

// An identity is a pod name, <cluster>-<suffix>; its claims are <cluster>-<claim template>-<suffix>.
// With the Ordinal format the suffix is n, strictly increasing over the object's life: the high-water
// mark status.nextIdentity is written (under a resourceVersion precondition) before any pod of a new
// identity is created, and is re-derived from every trace an identity leaves (pods, claims, the
// ledger, retained claims) in case that write is lost, so no name is ever handed out twice.

// ordinalOf returns n when name is <cluster>-<n> (n without leading zeros).
func ordinalOf(cluster, name string) (int64, bool) {
	suffix, ok := strings.CutPrefix(name, cluster+"-")
	if !ok || suffix == "" || len(suffix) > 18 || (len(suffix) > 1 && suffix[0] == '0') {
		return 0, false
	}
	for _, c := range suffix {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(suffix, 10, 64)
	return n, err == nil
}

// identityName returns the pod name of ordinal n.
func identityName(sc *clusterv1alpha1.StatefulCluster, n int64) string {
	return sc.Name + "-" + strconv.FormatInt(n, 10)
}

// randomIdentity returns <cluster>-<8 hex digits> (identityFormat Random, the public seed code's names).
func randomIdentity(sc *clusterv1alpha1.StatefulCluster) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return sc.Name + "-" + hex.EncodeToString(b[:])
}

// claimName returns the name of the claim made from template `claim` for an identity.
func claimName(sc *clusterv1alpha1.StatefulCluster, claim, identity string) string {
	suffix := strings.TrimPrefix(identity, sc.Name+"-")
	return sc.Name + "-" + claim + "-" + suffix
}

// claimNames returns the names of every claim of an identity.
func claimNames(sc *clusterv1alpha1.StatefulCluster, identity string) []string {
	names := make([]string, 0, len(sc.Spec.VolumeClaimTemplates))
	for _, t := range sc.Spec.VolumeClaimTemplates {
		names = append(names, claimName(sc, t.Metadata.Name, identity))
	}
	return names
}

// highWater derives the next free ordinal: above the recorded mark and above every identity that left
// a trace (a pod, even terminating; a claim; a ledger entry; a retained claim).
func highWater(sc *clusterv1alpha1.StatefulCluster, names []string) int64 {
	next := sc.Status.NextIdentity
	see := func(name string) {
		if n, ok := ordinalOf(sc.Name, name); ok && n >= next {
			next = n + 1
		}
	}
	for _, name := range names {
		see(name)
	}
	for _, rec := range sc.Status.Identities {
		see(rec.Name)
	}
	for _, c := range sc.Status.RetiredClaims {
		see(c.Identity)
	}
	return next
}

// allocate returns k new identity names and the new high-water mark. known holds every name already
// seen, so that a random name is never handed out twice either.
func allocate(sc *clusterv1alpha1.StatefulCluster, k int, known map[string]bool, traces []string) ([]string, int64) {
	next := highWater(sc, traces)
	names := make([]string, 0, k)
	if sc.Spec.IdentityFormat == clusterv1alpha1.RandomIdentityFormat {
		for len(names) < k {
			name := randomIdentity(sc)
			if !known[name] {
				known[name] = true
				names = append(names, name)
			}
		}
		return names, next
	}
	for i := range k {
		names = append(names, identityName(sc, next+int64(i)))
	}
	return names, next + int64(k)
}
