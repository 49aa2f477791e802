package status

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"
)

// Style is how the text view is drawn: a tree with colour for a person at a terminal, indented
// plain text (no escape sequences, one fact per line) for a pipe.
type Style struct {
	Tree  bool
	Color bool
}

const (
	ansiReset  = "\x1b[0m"
	ansiBold   = "\x1b[1m"
	ansiDim    = "\x1b[2m"
	ansiRed    = "\x1b[31m"
	ansiGreen  = "\x1b[32m"
	ansiYellow = "\x1b[33m"
	ansiCyan   = "\x1b[36m"
)

func (s Style) paint(code, text string) string {
	if !s.Color || text == "" {
		return text
	}
	return code + text + ansiReset
}

func (s Style) healthColor(status string) string {
	switch status {
	case "Current":
		return ansiGreen
	case "InProgress", "Terminating":
		return ansiYellow
	case "Failed":
		return ansiRed
	}
	return ansiDim
}

// sep joins the facts of one line: a middle dot on a terminal, a comma in plain text.
func (s Style) sep() string {
	if s.Tree {
		return " · "
	}
	return ", "
}

func (s Style) arrow() string {
	if s.Tree {
		return " → "
	}
	return " -> "
}

// node is one line of the view and the lines under it.
type node struct {
	text string
	kids []*node
}

func (n *node) add(text string, kids ...*node) *node {
	c := &node{text: text, kids: kids}
	n.kids = append(n.kids, c)
	return c
}

// RenderText writes the text view of a summary; now is what ages are counted from.
func RenderText(w io.Writer, sum Summary, st Style, now time.Time, emptyMsg string) error {
	var b strings.Builder
	if len(sum.Objects) == 0 {
		b.WriteString(emptyMsg + "\n")
	}
	for i, o := range sum.Objects {
		if i > 0 {
			b.WriteString("\n")
		}
		root := objectNode(o, st, now)
		b.WriteString(root.text + "\n")
		writeKids(&b, root.kids, "", st)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeKids(b *strings.Builder, kids []*node, prefix string, st Style) {
	for i, k := range kids {
		last := i == len(kids)-1
		branch, cont := "  ", "  "
		if st.Tree {
			branch, cont = "├─ ", "│  "
			if last {
				branch, cont = "└─ ", "   "
			}
		}
		b.WriteString(prefix + st.paint(ansiDim, branch) + k.text + "\n")
		writeKids(b, k.kids, prefix+st.paint(ansiDim, cont), st)
	}
}

func age(now time.Time, t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return "?"
	}
	d := now.Sub(t.Time)
	if d < 0 {
		d = 0
	}
	return duration.HumanDuration(d)
}

func yesNo(ok bool, yes, no string) string {
	if ok {
		return yes
	}
	return no
}

// count writes n and the noun, in the plural unless n is 1.
func count(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "none"
	}
	return strings.Join(list, ", ")
}

func objectNode(o Object, st Style, now time.Time) *node {
	h := o.Health
	head := fmt.Sprintf("%s %s  %s  age %s",
		st.paint(ansiCyan, o.Kind), st.paint(ansiBold, o.Namespace+"/"+o.Name),
		st.paint(st.healthColor(h.Status), h.Status), age(now, &o.Created))
	root := &node{text: head}
	root.add(healthLine(h, st))
	switch {
	case o.Singleton != nil:
		singletonNodes(root, o.Singleton, st, now)
	case o.Lock != nil:
		lockNodes(root, o.Lock, st, now)
	case o.Rollout != nil:
		rolloutNodes(root, o.Rollout, st, now)
	case o.Cluster != nil:
		clusterNodes(root, o.Cluster, st, now)
	case o.Extended != nil:
		extendedNodes(root, o.Extended, st)
	}
	return root
}

// healthLine says what the object waits for: the Stalled or Reconciling condition when True, else
// the Ready condition; kstatus's own message when the object has none of them.
func healthLine(h Health, st Style) string {
	if h.Condition == "" {
		// kstatus reads an object without conditions as Current; say that the operator has not
		// reported on it, so a missing or stopped operator does not pass for health.
		return "status: " + h.Message + " (no Ready condition: the operator has not reported on it yet)"
	}
	label := "ready"
	switch {
	case h.Condition == "Stalled":
		label = "stalled"
	case h.Condition == "Reconciling" || h.ConditionStatus != "True":
		label = "waiting"
	}
	text := fmt.Sprintf("%s: %s=%s %s", label, h.Condition, h.ConditionStatus, h.Reason)
	if h.ConditionMessage != "" {
		text += ": " + h.ConditionMessage
	}
	switch label {
	case "stalled":
		return st.paint(ansiRed, text)
	case "waiting":
		return st.paint(ansiYellow, text)
	}
	return text
}

func singletonNodes(root *node, v *Singleton, st Style, now time.Time) {
	phase := v.Phase
	if phase == "" {
		phase = "unknown"
	}
	root.add(strings.Join([]string{"phase " + phase, "hold mode " + v.HoldMode, fmt.Sprintf("epoch %d", v.Epoch)}, st.sep()))
	active := "active: none"
	if v.ActivePod != "" {
		active = "active: " + v.ActivePod
		if v.ActivePodNode != "" {
			active += " on " + v.ActivePodNode
		}
	}
	root.add(active)
	pods := root.add("pods:")
	if len(v.Pods) == 0 {
		pods.text = "pods: none selected"
	}
	for _, p := range v.Pods {
		facts := []string{p.Name, roleText(p.Role, st)}
		if p.HoldMode != "" {
			facts = append(facts, "hold "+p.HoldMode)
		}
		if p.Node != "" {
			facts = append(facts, "on "+p.Node)
		}
		facts = append(facts, yesNo(p.Ready, "ready", "not ready"))
		pods.add(strings.Join(facts, st.sep()))
	}
	if h := v.Handover; h != nil {
		root.add(st.paint(ansiYellow, fmt.Sprintf("handover: waiting for %s to stop%sterminating for %s of its %ds grace period",
			h.WaitingFor, st.sep(), age(now, &h.TerminatingSince), h.GracePeriodSeconds)))
	}
	last := "last handover: none yet"
	if v.LastHandoverGap != nil {
		last = "last handover: gap " + v.LastHandoverGap.Duration.String()
		if v.LastTransition != nil {
			last += st.sep() + "started " + age(now, v.LastTransition) + " ago"
		}
	} else if v.LastTransition != nil {
		last = "last handover: started " + age(now, v.LastTransition) + " ago"
	}
	root.add(last)
}

func roleText(role string, st Style) string {
	switch role {
	case "active":
		return st.paint(ansiGreen, role)
	case "held", "terminating":
		return st.paint(ansiYellow, role)
	case "released", "unmanaged":
		return st.paint(ansiRed, role)
	}
	return role
}

func lockNodes(root *node, v *Lock, st Style, now time.Time) {
	root.add(strings.Join([]string{"statefulset " + v.StatefulSet, "lease " + v.Lease, fmt.Sprintf("epoch %d", v.Epoch)}, st.sep()))
	writer := "writer: none"
	if v.Writer != "" {
		writer = "writer: " + st.paint(ansiGreen, v.Writer)
	}
	root.add(writer)
	root.add("readers: " + orNone(v.Readers))
	if len(v.Unlabelled) > 0 {
		root.add(st.paint(ansiYellow, "without a role: "+strings.Join(v.Unlabelled, ", ")))
	}
	last := "last failover: none yet"
	if f := v.LastFailover; f != nil {
		last = "last failover: " + f.Reason
		if f.Time != nil {
			last += st.sep() + age(now, f.Time) + " ago"
		}
	}
	root.add(last)
}

func rolloutNodes(root *node, v *Rollout, st Style, now time.Time) {
	phase := v.Phase
	if phase == "" {
		phase = "unknown"
	}
	facts := []string{"phase " + phase, "target " + v.Target}
	if v.Partition != nil {
		p := fmt.Sprintf("partition %d", *v.Partition)
		if v.Replicas != nil {
			p += fmt.Sprintf(" of %d replicas", *v.Replicas)
		}
		facts = append(facts, p)
	}
	if v.Paused {
		facts = append(facts, "paused")
	}
	if v.DryRun {
		facts = append(facts, "dry run")
	}
	root.add(strings.Join(facts, st.sep()))
	if v.CurrentRevision != "" || v.UpdateRevision != "" {
		if v.CurrentRevision == v.UpdateRevision {
			root.add("revision " + v.UpdateRevision)
		} else {
			root.add("revisions: " + v.CurrentRevision + st.arrow() + v.UpdateRevision)
		}
	}
	if len(v.Targets) > 0 {
		t := root.add("targets:")
		for _, x := range v.Targets {
			line := []string{x.Name, x.State, fmt.Sprintf("%d/%d updated", x.Updated, x.Replicas), fmt.Sprintf("%d ready", x.Ready)}
			if x.Partition != nil {
				line = append(line, fmt.Sprintf("partition %d", *x.Partition))
			}
			t.add(strings.Join(line, st.sep()))
		}
	}
	if s := v.Step; s != nil {
		line := []string{"step: " + yesNo(s.State != "", s.State, "starting")}
		if s.Pod != "" {
			line = append(line, "pod "+s.Pod)
		}
		step := root.add(strings.Join(line, st.sep()))
		if b := s.Batch; b != nil {
			text := fmt.Sprintf("batch of step %d: %d of %d pods released%spartition %d%s%d",
				b.Step, b.Released, b.Pods, st.sep(), b.FromPartition, st.arrow(), b.ToPartition)
			if b.PausedUntil != nil {
				text += st.sep() + "paused until " + b.PausedUntil.UTC().Format(time.RFC3339)
			}
			step.add(text)
		}
	}
	if len(v.Checks) > 0 {
		checks := root.add("checks:")
		for _, c := range v.Checks {
			res := c.LastResult
			if res == "" {
				res = "not run yet"
			}
			switch c.LastResult {
			case "Pass":
				res = st.paint(ansiGreen, res)
			case "Fail", "Error":
				res = st.paint(ansiRed, res)
			case "Inconclusive":
				res = st.paint(ansiYellow, res)
			}
			line := []string{c.Name + ": " + res}
			passes := fmt.Sprintf("%d passes in a row", c.ConsecutivePass)
			if c.SuccessThreshold > 0 {
				passes = fmt.Sprintf("%d/%d passes in a row", c.ConsecutivePass, c.SuccessThreshold)
			}
			line = append(line, passes, count(int64(c.Runs), "run")+fmt.Sprintf(", %d failed", c.Failed))
			if c.LastCheckTime != nil {
				line = append(line, age(now, c.LastCheckTime)+" ago")
			}
			n := checks.add(strings.Join(line, st.sep()))
			if c.LastValue != "" {
				n.add("last value: " + c.LastValue)
			}
		}
	} else if v.LastQueryResult != "" {
		root.add("last query: " + v.LastQueryResult)
	}
	if v.LastError != "" {
		root.add(st.paint(ansiRed, "last error: "+v.LastError))
	}
}

func clusterNodes(root *node, v *Cluster, st Style, now time.Time) {
	root.add(strings.Join([]string{fmt.Sprintf("replicas %d", v.Replicas), fmt.Sprintf("%d live", v.Live),
		fmt.Sprintf("%d ready", v.Ready), fmt.Sprintf("next identity %d", v.NextIdentity)}, st.sep()))
	if v.CurrentRevision != "" || v.UpdateRevision != "" {
		if v.CurrentRevision == v.UpdateRevision {
			root.add("revision " + v.UpdateRevision)
		} else {
			root.add("revisions: " + v.CurrentRevision + st.arrow() + v.UpdateRevision)
		}
	}
	ids := root.add("identities:")
	if len(v.Identities) == 0 {
		ids.text = "identities: none"
	}
	for _, id := range v.Identities {
		line := []string{id.Name}
		if id.Node != "" {
			line = append(line, "on "+id.Node)
		}
		line = append(line, yesNo(id.Ready, "ready", st.paint(ansiYellow, "not ready")))
		if id.Terminating {
			line = append(line, st.paint(ansiYellow, "terminating"))
		}
		if len(id.Claims) > 0 {
			line = append(line, "claims "+strings.Join(id.Claims, ", "))
		}
		ids.add(strings.Join(line, st.sep()))
	}
	if len(v.Retired) > 0 {
		ret := root.add("retired:")
		for _, r := range v.Retired {
			line := []string{r.Name, r.Reason, age(now, r.RetiredAt) + " ago"}
			if len(r.Claims) > 0 {
				line = append(line, "claims "+strings.Join(r.Claims, ", "))
			}
			n := ret.add(strings.Join(line, st.sep()))
			if r.Message != "" {
				n.add(r.Message)
			}
		}
	}
	if len(v.RetainedClaims) > 0 {
		rc := root.add("retained claims (never mounted again; delete them when done):")
		for _, c := range v.RetainedClaims {
			line := []string{c.Name}
			if c.Identity != "" {
				line = append(line, "of "+c.Identity)
			}
			line = append(line, "retired "+age(now, c.RetiredAt)+" ago")
			rc.add(strings.Join(line, st.sep()))
		}
	}
}

func extendedNodes(root *node, v *Extended, st Style) {
	ver := fmt.Sprintf("version %d", v.CurrentVersion)
	if v.UpdateVersion != v.CurrentVersion {
		ver = fmt.Sprintf("upgrading version %d%s%d", v.CurrentVersion, st.arrow(), v.UpdateVersion)
	}
	root.add(strings.Join([]string{ver, count(int64(v.Replicas), "replica"), fmt.Sprintf("%d ready", v.Ready),
		fmt.Sprintf("%d updated", v.Updated)}, st.sep()))
	vs := root.add("versions:")
	if len(v.Versions) == 0 {
		vs.text = "versions: none yet"
	}
	for _, x := range v.Versions {
		line := []string{fmt.Sprintf("v%d", x.Version), yesNo(x.Running, "running", "not running")}
		if x.Phase != "" {
			line = append(line, "phase "+x.Phase)
		}
		if x.Stale {
			line = append(line, st.paint(ansiRed, "stale"))
		}
		line = append(line, count(int64(x.Pods), "pod")+fmt.Sprintf(", %d ready", x.Ready))
		vs.add(strings.Join(line, st.sep()))
	}
	if len(v.Zones) > 0 {
		zs := root.add("zones:")
		for _, z := range v.Zones {
			zver := fmt.Sprintf("version %d", z.CurrentVersion)
			if z.UpdateVersion != z.CurrentVersion {
				zver = fmt.Sprintf("version %d%s%d", z.CurrentVersion, st.arrow(), z.UpdateVersion)
			}
			nodes := count(int64(z.ReadyNodes), "ready node")
			if z.ReadyNodes == 0 {
				nodes = st.paint(ansiRed, nodes)
			}
			zs.add(strings.Join([]string{fmt.Sprintf("%s (#%d)", z.Name, z.Index), fmt.Sprintf("%d/%d ready", z.Ready, z.Replicas), zver, nodes}, st.sep()))
		}
	}
	c := v.Canaries
	can := root.add(strings.Join([]string{fmt.Sprintf("canaries: %d per upgrade", c.Count), fmt.Sprintf("%d of %d retries used", c.Retries, c.RetryCount)}, st.sep()))
	for _, p := range c.Pods {
		can.add(p)
	}
	if len(v.UpgradeJobs) > 0 {
		js := root.add("upgrade jobs:")
		for _, j := range v.UpgradeJobs {
			js.add(strings.Join([]string{j.Name, j.Type, fmt.Sprintf("version %d", j.Version), j.State}, st.sep()))
		}
	}
}

// RenderJSON writes the summary as indented JSON.
func RenderJSON(w io.Writer, sum Summary) error {
	b, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// RenderYAML writes the summary as YAML (the JSON field names).
func RenderYAML(w io.Writer, sum Summary) error {
	b, err := yaml.Marshal(sum)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
