package controller

import (
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// fuzzPods builds up to 8 pods of StatefulSet "db" from data, 3 bytes a pod: the ordinal (a few land
// on -1, a name without one), the flags Ready, Terminating, NodeReady and UID-changed, and for how long
// the pod has been not Ready. Names are unique, as in a namespace.
func fuzzPods(data []byte, now time.Time) []PodView {
	var pods []PodView
	seen := map[string]bool{}
	for i := 0; i+3 <= len(data) && len(pods) < 8; i += 3 {
		ordinal := int(data[i]%12) - 1
		name := "db-" + strconv.Itoa(ordinal)
		if ordinal < 0 {
			name = "db-x" + strconv.Itoa(i)
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		flags := data[i+1]
		p := PodView{Name: name, UID: types.UID("u-" + name), Ordinal: ordinal,
			Ready: flags&1 != 0, Terminating: flags&2 != 0, NodeReady: flags&4 == 0}
		if flags&8 != 0 {
			p.UID += "-recreated"
		}
		if !p.Ready && flags&16 == 0 {
			p.NotReadySince = now.Add(-time.Duration(data[i+2]) * time.Second)
		}
		pods = append(pods, p)
	}
	return pods
}

// FuzzDecide checks the election on arbitrary pod sets, holders, switchover targets and failover
// delays: the writer is the holder or an eligible pod (never one without an ordinal, terminating, not
// Ready or on a NotReady node); a usable holder keeps the role unless a switchover names another eligible
// pod; a replaced holder goes to the eligible pod with the lowest ordinal; the decision is stable (deciding
// again with the new writer as holder changes nothing); a wait is only given to a not-Ready holder and
// never exceeds the failover delay.
func FuzzDecide(f *testing.F) {
	f.Add([]byte{1, 1, 0, 2, 1, 0, 3, 1, 0}, uint8(0), false, uint8(255), uint16(10))
	f.Add([]byte{1, 0, 5, 2, 1, 0, 3, 1, 0}, uint8(0), false, uint8(255), uint16(10))
	f.Add([]byte{1, 0, 50, 2, 1, 0}, uint8(0), false, uint8(1), uint16(10))
	f.Add([]byte{1, 9, 0, 2, 1, 0}, uint8(0), false, uint8(255), uint16(0))
	f.Add([]byte{1, 3, 0, 2, 5, 0, 0, 1, 0}, uint8(0), true, uint8(2), uint16(30))
	f.Add([]byte{}, uint8(0), false, uint8(0), uint16(0))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, data []byte, holderIdx uint8, staleUID bool, switchIdx uint8, delaySeconds uint16) {
		pods := fuzzPods(data, now)
		in := ElectionInput{Pods: pods, FailoverDelay: time.Duration(delaySeconds) * time.Second, Now: now}
		if int(holderIdx) < len(pods) {
			in.Holder = Holder{Name: pods[holderIdx].Name, UID: "u-" + types.UID(pods[holderIdx].Name)}
		} else if holderIdx%2 == 0 {
			in.Holder = Holder{Name: "db-gone", UID: "u-gone"}
		}
		if staleUID {
			in.Holder.UID = "" // a Lease written without the UID annotation
		}
		if int(switchIdx) < len(pods) {
			in.SwitchoverTo = pods[switchIdx].Name
		}
		d := Decide(in)

		byName := map[string]PodView{}
		for _, p := range pods {
			byName[p.Name] = p
		}
		lowest := -1
		for _, p := range pods {
			if p.eligible() && (lowest < 0 || p.Ordinal < lowest) {
				lowest = p.Ordinal
			}
		}
		holder, holderPresent := byName[in.Holder.Name]
		holderUsable := in.Holder.Name != "" && holderPresent && (in.Holder.UID == "" || holder.UID == in.Holder.UID) &&
			!holder.Terminating && holder.NodeReady
		switch {
		case d.Writer == Holder{}:
			if lowest >= 0 {
				t.Fatalf("no writer although %d pods include an eligible one (ordinal %d): %+v", len(pods), lowest, in)
			}
		case d.Writer == in.Holder && d.Reason == "":
			if !holderUsable {
				t.Fatalf("the unusable holder %+v kept the role: %+v", in.Holder, in)
			}
		default:
			p, ok := byName[d.Writer.Name]
			if !ok || !p.eligible() || p.UID != d.Writer.UID {
				t.Fatalf("writer %+v is not an eligible pod: %+v", d.Writer, in)
			}
			if d.Reason == "" {
				t.Fatalf("the writer changed to %s without a reason", d.Writer.Name)
			}
			if p.Name != in.SwitchoverTo && p.Ordinal != lowest {
				t.Fatalf("writer %s (ordinal %d) is not the lowest eligible ordinal %d", p.Name, p.Ordinal, lowest)
			}
		}
		if holderUsable && holder.Ready && d.Writer != in.Holder {
			if target, ok := byName[in.SwitchoverTo]; !ok || !target.eligible() || d.Writer.Name != target.Name {
				t.Fatalf("a Ready holder lost the role to %+v without a switchover to it: %+v", d.Writer, in)
			}
		}
		if d.RetryAfter < 0 || d.RetryAfter > in.FailoverDelay {
			t.Fatalf("retry after %v with a failover delay of %v", d.RetryAfter, in.FailoverDelay)
		}
		if d.RetryAfter > 0 && (d.Writer != in.Holder || holder.Ready) {
			t.Fatalf("a wait of %v for writer %+v (holder %+v Ready %v)", d.RetryAfter, d.Writer, in.Holder, holder.Ready)
		}
		if d.Writer != (Holder{}) {
			again := in
			again.Holder, again.SwitchoverTo = d.Writer, ""
			if d2 := Decide(again); d2.Reason != "" && d.Writer != in.Holder {
				t.Fatalf("unstable: %+v elected, then replaced by %+v (%s)", d.Writer, d2.Writer, d2.Reason)
			}
		}
	})
}

// FuzzOrdinal checks the parsing of a pod's StatefulSet ordinal: a parsed name is exactly
// <statefulSet>-<ordinal> in canonical decimal, and every such name parses back.
func FuzzOrdinal(f *testing.F) {
	for _, s := range [][2]string{{"db", "db-0"}, {"db", "db-10"}, {"db", "db-01"}, {"db", "db--1"}, {"db", "db-+1"},
		{"db", "db-"}, {"db-1", "db-1-2"}, {"db", "dbx-1"}, {"", "-3"}, {"db", "db-99999999999999999999"}} {
		f.Add(s[0], s[1], uint32(7))
	}
	f.Fuzz(func(t *testing.T, sts, pod string, n uint32) {
		if got := Ordinal(sts, pod); got >= 0 && pod != sts+"-"+strconv.Itoa(got) {
			t.Fatalf("Ordinal(%q, %q) = %d, but the canonical name is %q", sts, pod, got, sts+"-"+strconv.Itoa(got))
		} else if got < -1 {
			t.Fatalf("Ordinal(%q, %q) = %d", sts, pod, got)
		}
		if got := Ordinal(sts, sts+"-"+strconv.FormatUint(uint64(n), 10)); got != int(n) {
			t.Fatalf("Ordinal of %s-%d = %d", sts, n, got)
		}
	})
}
