package controller

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

// Holder identifies a writer: the pod's name (the Lease's holderIdentity) and its UID (the Lease's
// writer-uid annotation). The zero Holder means no writer.
type Holder struct {
	// Name is the pod's name.
	Name string
	// UID is the pod's UID; empty when unknown (a Lease written without it).
	UID types.UID
}

// PodView is what the election needs to know about one pod of the StatefulSet.
type PodView struct {
	// Name and UID identify the pod.
	Name string
	UID  types.UID
	// Ordinal is the pod's StatefulSet ordinal; -1 if its name carries none (never elected).
	Ordinal int
	// Ready is the pod's Ready condition.
	Ready bool
	// Terminating is whether the pod has a deletionTimestamp.
	Terminating bool
	// NodeReady is whether the pod's node exists and is Ready.
	NodeReady bool
	// NotReadySince is when the operator first saw the pod not Ready; zero when it is Ready.
	NotReadySince time.Time
}

// eligible reports whether the pod may become the writer.
func (p PodView) eligible() bool {
	return p.Ordinal >= 0 && p.Ready && !p.Terminating && p.NodeReady
}

// ElectionInput is everything one election decision depends on.
type ElectionInput struct {
	// Holder is the current writer as the Lease records it.
	Holder Holder
	// Pods are the StatefulSet's pods, in any order.
	Pods []PodView
	// FailoverDelay is how long a not-Ready writer keeps the role before it is replaced.
	FailoverDelay time.Duration
	// SwitchoverTo names a pod the writer role should move to, if it is eligible.
	SwitchoverTo string
	// Now is the operator's clock.
	Now time.Time
}

// Decision is the outcome of an election.
type Decision struct {
	// Writer is the pod that must be the writer from now on; zero for none.
	Writer Holder
	// Reason says why the writer changes (a leasev1.FailoverReason* value); empty when it does not.
	Reason string
	// RetryAfter, when positive, is when to decide again: the writer is not Ready but keeps the role
	// until failoverDelaySeconds have passed.
	RetryAfter time.Duration
}

// Decide elects the writer. A usable holder keeps the role (stickiness: neither the Lease's age nor
// an operator restart moves it), unless a planned switchover names another eligible pod. An unusable
// holder (gone, recreated under its name, terminating, on a NotReady node, or not Ready for longer
// than the failover delay) is replaced by the eligible pod with the lowest ordinal, or by nobody.
func Decide(in ElectionInput) Decision {
	if in.Holder.Name != "" {
		unusable, wait := holderState(in)
		if unusable == "" {
			if target, ok := findPod(in.Pods, in.SwitchoverTo); ok && target.Name != in.Holder.Name && target.eligible() {
				return Decision{Writer: Holder{Name: target.Name, UID: target.UID}, Reason: leasev1.FailoverReasonSwitchover}
			}
			return Decision{Writer: in.Holder, RetryAfter: wait}
		}
		next, ok := lowestEligible(in.Pods)
		if !ok {
			return Decision{Reason: unusable}
		}
		return Decision{Writer: Holder{Name: next.Name, UID: next.UID}, Reason: unusable}
	}
	next, ok := lowestEligible(in.Pods)
	if !ok {
		return Decision{}
	}
	return Decision{Writer: Holder{Name: next.Name, UID: next.UID}, Reason: leasev1.FailoverReasonInitialElection}
}

// holderState says why the holder can no longer serve (a failover reason), or "" if it can; wait is
// the rest of the failover delay of a holder that is not Ready.
func holderState(in ElectionInput) (unusable string, wait time.Duration) {
	pod, ok := findPod(in.Pods, in.Holder.Name)
	switch {
	case !ok, in.Holder.UID != "" && pod.UID != in.Holder.UID:
		return leasev1.FailoverReasonWriterGone, 0
	case pod.Terminating:
		return leasev1.FailoverReasonWriterTerminating, 0
	case !pod.NodeReady:
		return leasev1.FailoverReasonNodeNotReady, 0
	case !pod.Ready:
		if in.FailoverDelay > 0 && !pod.NotReadySince.IsZero() {
			if left := pod.NotReadySince.Add(in.FailoverDelay).Sub(in.Now); left > 0 {
				return "", left
			}
		}
		return leasev1.FailoverReasonWriterNotReady, 0
	}
	return "", 0
}

func findPod(pods []PodView, name string) (PodView, bool) {
	if name == "" {
		return PodView{}, false
	}
	i := slices.IndexFunc(pods, func(p PodView) bool { return p.Name == name })
	if i < 0 {
		return PodView{}, false
	}
	return pods[i], true
}

// lowestEligible returns the eligible pod with the lowest ordinal.
func lowestEligible(pods []PodView) (PodView, bool) {
	var best PodView
	found := false
	for _, p := range pods {
		if p.eligible() && (!found || p.Ordinal < best.Ordinal) {
			best, found = p, true
		}
	}
	return best, found
}

// Ordinal returns the StatefulSet ordinal of a pod named "<statefulSet>-<ordinal>", or -1.
func Ordinal(statefulSet, pod string) int {
	suffix, ok := strings.CutPrefix(pod, statefulSet+"-")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(suffix)
	if err != nil || n < 0 || strconv.Itoa(n) != suffix {
		return -1
	}
	return n
}
