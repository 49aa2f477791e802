package controller

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// Zone spread (spec.zoneSpread). Each new identity is pinned, by a required node affinity, to one zone:
// the zone of the identity it replaces when that zone still has a Ready node, otherwise the zone with
// the fewest live pods. The zone is recorded in the pod label enge.me/zone. Zones are the values of
// topologyKey on Ready nodes. Not done yet: maxUnavailablePerZone during updates, and falling back to
// another zone when the chosen one has no capacity (a pod that stays Pending is replaced per
// pendingThresholdSeconds, into the least-populated zone).

// zonePlanner hands out zones to new pods in one reconcile.
type zonePlanner struct {
	key    string
	counts map[string]int
	lost   []string // zones of identities retired in this reconcile, to refill first
}

func (s *scope) newZonePlanner() *zonePlanner {
	zs := s.sc.Spec.ZoneSpread
	if zs == nil {
		return nil
	}
	key := zs.TopologyKey
	if key == "" {
		key = corev1.LabelTopologyZone
	}
	p := &zonePlanner{key: key, counts: map[string]int{}}
	for _, n := range s.allNodes {
		if zone := n.Labels[key]; zone != "" && opsutil.NodeReady(n) {
			p.counts[zone] += 0
		}
	}
	if len(p.counts) == 0 {
		return nil
	}
	for _, m := range s.pods {
		zone := s.zoneOf(m, key)
		if zone == "" {
			continue
		}
		if m.live && !m.retiredNow {
			if _, ok := p.counts[zone]; ok {
				p.counts[zone]++
			}
		} else if m.retiredNow {
			p.lost = append(p.lost, zone)
		}
	}
	return p
}

// zoneOf returns the zone of a pod: its label, else its node's.
func (s *scope) zoneOf(m *member, key string) string {
	if m.zone != "" {
		return m.zone
	}
	if m.pod == nil {
		return ""
	}
	if z := m.pod.Labels[clusterv1alpha1.ZoneLabel]; z != "" {
		return z
	}
	if n := s.nodes[m.pod.Spec.NodeName]; n != nil {
		return n.Labels[key]
	}
	return ""
}

// next returns the zone for the next new pod.
func (p *zonePlanner) next() string {
	for len(p.lost) > 0 {
		zone := p.lost[0]
		p.lost = p.lost[1:]
		if _, ok := p.counts[zone]; ok {
			p.counts[zone]++
			return zone
		}
	}
	zones := make([]string, 0, len(p.counts))
	for z := range p.counts {
		zones = append(zones, z)
	}
	slices.Sort(zones)
	best := zones[0]
	for _, z := range zones[1:] {
		if p.counts[z] < p.counts[best] {
			best = z
		}
	}
	p.counts[best]++
	return best
}

// pinToZone adds the zone label and a required node affinity for the zone to a pod, keeping the
// template's own affinity (the zone requirement is added to every node selector term).
func pinToZone(pod *corev1.Pod, key, zone string) {
	pod.Labels[clusterv1alpha1.ZoneLabel] = zone
	req := corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{zone}}
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := pod.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		terms = []corev1.NodeSelectorTerm{{}}
	}
	for i := range terms {
		terms[i].MatchExpressions = append(terms[i].MatchExpressions, req)
	}
	na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = terms
}
