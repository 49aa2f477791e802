// Package permdoc renders docs/permissions.md: every identity the manifests of deploy/ create (each
// operator's ServiceAccount, the webhook-server's, and the roles shipped unbound such as the metrics
// readers), every RBAC rule it is granted and every ValidatingAdmissionPolicy that limits it, each with
// the reason for it. The rules and policies come from deploy/*.yaml (what is actually installed); the
// reasons come from where each rule is declared: the comment above its `+kubebuilder:rbac` marker in
// the operator's Go code, else docs/permissions-reasons.yaml (rules of config/ YAML, which has no
// comments once kustomize renders it). TestPermissionsDoc keeps the page in step with both.
package permdoc

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// Operators are the manifests of deploy/, in the order the page lists them.
var Operators = []string{"singleton-operator", "cluster-operator", "lease-operator", "rollout-operator", "extended-operator"}

// sourceDirs are the module directories whose `+kubebuilder:rbac` markers render into each manifest:
// the webhook-server ships in the singleton-operator's manifest.
var sourceDirs = map[string][]string{
	"singleton-operator": {"singleton-operator", "webhook-server"},
}

// ReasonsFile holds the reasons of the rules no marker declares, keyed "<role>" (every rule of the
// role) or "<role> <apiGroup>/<resource>"; "{op}" in a key stands for the operator's name.
const ReasonsFile = "docs/permissions-reasons.yaml"

// Page is the path of the rendered page, relative to the repository root.
const Page = "docs/permissions.md"

// NoReason marks a rule nobody explained; Missing lists them and the test fails on any.
const NoReason = "**no reason given**"

type manifest struct {
	op                  string
	serviceAccounts     []corev1.ServiceAccount
	roles               []rbacv1.Role
	clusterRoles        []rbacv1.ClusterRole
	roleBindings        []rbacv1.RoleBinding
	clusterRoleBindings []rbacv1.ClusterRoleBinding
	policies            []admissionv1.ValidatingAdmissionPolicy
	policyBindings      []admissionv1.ValidatingAdmissionPolicyBinding
}

// marker is one `+kubebuilder:rbac` marker and the comment that explains it.
type marker struct {
	groups, resources, verbs []string
	namespaced               bool
	dir, reason, where       string
}

// Doc is the rendered page and the rules that have no reason.
type Doc struct {
	Markdown string
	Missing  []string
}

// Render reads deploy/, the operators' sources and the reasons file under root and renders the page.
func Render(root string) (Doc, error) { return render(root, Operators) }

func render(root string, operators []string) (Doc, error) {
	reasons := map[string]string{}
	if b, err := os.ReadFile(filepath.Join(root, ReasonsFile)); err != nil {
		return Doc{}, err
	} else if err := yaml.UnmarshalStrict(b, &reasons); err != nil {
		return Doc{}, fmt.Errorf("%s: %w", ReasonsFile, err)
	}
	var out bytes.Buffer
	var missing []string
	out.WriteString(header)
	for _, op := range operators {
		m, err := loadManifest(root, op)
		if err != nil {
			return Doc{}, err
		}
		dirs := sourceDirs[op]
		if dirs == nil {
			dirs = []string{op}
		}
		markers, err := loadMarkers(root, dirs)
		if err != nil {
			return Doc{}, err
		}
		r := renderer{op: op, m: m, markers: markers, reasons: reasons, out: &out}
		r.render()
		missing = append(missing, r.missing...)
	}
	return Doc{Markdown: out.String(), Missing: missing}, nil
}

const header = `# Permissions

<!-- Generated from deploy/*.yaml, the comments above the operators' +kubebuilder:rbac markers and
docs/permissions-reasons.yaml; do not edit. Regenerate: cd e2e && go test ./permdoc -update -->

Every identity the manifests of ` + "`deploy/`" + ` create, every RBAC rule it is granted and every
ValidatingAdmissionPolicy that narrows it, each with the reason for it. The page is generated from the
manifests, so it lists what is installed, not what was intended; ` + "`e2e/permdoc`" + `'s test fails when the two
drift, and when a rule has no reason. The policies apply only to the operator's own ServiceAccount and
fail closed for it (failurePolicy Fail); no other user or controller is affected by them.

What a compromised operator still cannot do is proven on a live cluster by
` + "`e2e/platform`" + ` TestOperatorIdentitiesCannotEscalate: it impersonates each identity below and tries
every known escalation path (RoleBindings to other subjects or roles, Secrets and Leases of
kube-system, other admission webhooks and policies, Pod Security labels, pods/exec, privileged pods,
ClusterRoles, escalate/impersonate, nodes/proxy, the API server's /metrics), with server-side dry-run.

`

type renderer struct {
	op      string
	m       manifest
	markers []marker
	reasons map[string]string
	out     *bytes.Buffer
	missing []string
}

func (r *renderer) render() {
	fmt.Fprintf(r.out, "## %s (deploy/%s.yaml)\n\n", r.op, r.op)
	bound := map[string]bool{}
	for _, sa := range r.m.serviceAccounts {
		user := "system:serviceaccount:" + sa.Namespace + ":" + sa.Name
		fmt.Fprintf(r.out, "### ServiceAccount %s\n\n`%s`\n\n", sa.Name, user)
		r.rulesHeader()
		for _, b := range r.m.clusterRoleBindings {
			if hasSubject(b.Subjects, sa) {
				bound["ClusterRole/"+b.RoleRef.Name] = true
				r.roleRules(b.RoleRef.Kind, b.RoleRef.Name, "cluster-wide", "binding "+b.Name)
			}
		}
		for _, b := range r.m.roleBindings {
			if hasSubject(b.Subjects, sa) {
				bound[b.RoleRef.Kind+"/"+b.RoleRef.Name] = true
				r.roleRules(b.RoleRef.Kind, b.RoleRef.Name, "namespace "+b.Namespace, "binding "+b.Name)
			}
		}
		r.out.WriteString("\n")
		r.policies(user)
	}
	var unbound []string
	for _, cr := range r.m.clusterRoles {
		if !bound["ClusterRole/"+cr.Name] {
			unbound = append(unbound, cr.Name)
		}
	}
	for _, role := range r.m.roles {
		if !bound["Role/"+role.Name] {
			unbound = append(unbound, role.Name)
		}
	}
	if len(unbound) > 0 {
		fmt.Fprintf(r.out, "### Roles shipped unbound\n\nBound by whoever needs them (the metrics readers: the user binds them to a scraper), or by the operator itself within the limits above.\n\n")
		r.rulesHeader()
		for _, name := range unbound {
			if r.clusterRole(name) != nil {
				r.roleRules("ClusterRole", name, "where bound", "unbound")
			} else {
				r.roleRules("Role", name, "where bound", "unbound")
			}
		}
		r.out.WriteString("\n")
	}
	r.policies("")
}

func (r *renderer) rulesHeader() {
	r.out.WriteString("| role | scope | API group | resources | names | verbs | why |\n|---|---|---|---|---|---|---|\n")
}

func (r *renderer) clusterRole(name string) *rbacv1.ClusterRole {
	for i := range r.m.clusterRoles {
		if r.m.clusterRoles[i].Name == name {
			return &r.m.clusterRoles[i]
		}
	}
	return nil
}

func (r *renderer) roleRules(kind, name, scope, _ string) {
	var rules []rbacv1.PolicyRule
	namespaced := kind == "Role"
	if namespaced {
		for _, role := range r.m.roles {
			if role.Name == name {
				rules = role.Rules
				scope = "namespace " + role.Namespace
			}
		}
	} else if cr := r.clusterRole(name); cr != nil {
		rules = cr.Rules
	} else {
		fmt.Fprintf(r.out, "| %s %s | %s | | | | | not shipped in this manifest |\n", kind, name, scope)
		return
	}
	for _, rule := range rules {
		if len(rule.NonResourceURLs) > 0 {
			why := r.reason(name, "nonResourceURLs", rule, namespaced)
			fmt.Fprintf(r.out, "| %s | %s | (non-resource) | %s | | %s | %s |\n", name, scope,
				code(rule.NonResourceURLs), code(rule.Verbs), why)
			continue
		}
		for _, group := range rule.APIGroups {
			for _, res := range rule.Resources {
				one := rule
				one.APIGroups, one.Resources = []string{group}, []string{res}
				why := r.reason(name, group+"/"+res, one, namespaced)
				g := group
				if g == "" {
					g = "core"
				}
				fmt.Fprintf(r.out, "| %s | %s | %s | %s | %s | %s | %s |\n", name, scope, g, code([]string{res}),
					code(rule.ResourceNames), code(rule.Verbs), why)
			}
		}
	}
}

// reason finds why a rule exists. The roles controller-gen renders from the markers (<op>-manager-role,
// <op>-webhook-server-role: the webhook-server's markers) take the comments of the markers declaring the
// rule, plus the reasons file's "<role> <group>/<resource>" entry when one of those markers has no
// comment; the roles of config/ YAML take the reasons file's entry for the rule or the whole role.
func (r *renderer) reason(role, key string, rule rbacv1.PolicyRule, namespaced bool) string {
	var whys []string
	generic := strings.Replace(role, r.op, "{op}", 1)
	fromFile := func(keys ...string) {
		for _, k := range keys {
			if why, ok := r.reasons[k]; ok {
				whys = append(whys, why)
				return
			}
		}
	}
	dir, generated := r.op, strings.HasSuffix(role, "manager-role")
	if strings.HasSuffix(role, "webhook-server-role") {
		dir, generated = "webhook-server", true
	}
	if generated && len(rule.APIGroups) == 1 {
		unexplained := false
		for _, mk := range r.markers {
			if mk.dir != dir || mk.namespaced != namespaced || !slices.Contains(mk.groups, rule.APIGroups[0]) ||
				!slices.Contains(mk.resources, rule.Resources[0]) || !overlaps(mk.verbs, rule.Verbs) {
				continue
			}
			if mk.reason == "" {
				unexplained = true
			} else if !slices.Contains(whys, mk.reason) {
				whys = append(whys, mk.reason)
			}
		}
		if unexplained || len(whys) == 0 {
			fromFile(role+" "+key, generic+" "+key)
		}
	} else {
		fromFile(role+" "+key, generic+" "+key, role, generic)
	}
	if len(whys) == 0 {
		r.missing = append(r.missing, fmt.Sprintf("deploy/%s.yaml: %s %s", r.op, role, key))
		return NoReason
	}
	return cell(strings.Join(whys, " "))
}

func (r *renderer) policies(user string) {
	var rows []string
	for _, p := range r.m.policies {
		js, _ := yaml.Marshal(p)
		mine := user != "" && bytes.Contains(js, []byte(user))
		if user == "" {
			// The policies that name none of the manifest's ServiceAccounts.
			mine = true
			for _, sa := range r.m.serviceAccounts {
				if bytes.Contains(js, []byte("system:serviceaccount:"+sa.Namespace+":"+sa.Name)) {
					mine = false
				}
			}
		}
		if !mine {
			continue
		}
		var match []string
		if p.Spec.MatchConstraints != nil {
			for _, rr := range p.Spec.MatchConstraints.ResourceRules {
				var ops []string
				for _, o := range rr.Operations {
					ops = append(ops, string(o))
				}
				match = append(match, fmt.Sprintf("%s %s", strings.Join(ops, ","), strings.Join(rr.Resources, ",")))
			}
		}
		var checks []string
		for _, v := range p.Spec.Validations {
			msg := v.Message
			if msg == "" {
				msg = "`" + v.Expression + "`"
			}
			checks = append(checks, msg)
		}
		why := r.reasons["policy "+p.Name]
		if why == "" {
			why = strings.Join(checks, " ")
		}
		if why == "" {
			r.missing = append(r.missing, fmt.Sprintf("deploy/%s.yaml: policy %s", r.op, p.Name))
			why = NoReason
		}
		fp := "Fail"
		if p.Spec.FailurePolicy != nil {
			fp = string(*p.Spec.FailurePolicy)
		}
		var bindings []string
		for _, b := range r.m.policyBindings {
			if b.Spec.PolicyName == p.Name {
				var acts []string
				for _, a := range b.Spec.ValidationActions {
					acts = append(acts, string(a))
				}
				bindings = append(bindings, b.Name+" ("+strings.Join(acts, ",")+")")
			}
		}
		if len(bindings) == 0 {
			bindings = []string{"**not bound**"}
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s | %s |", p.Name, cell(strings.Join(match, "; ")), fp,
			cell(strings.Join(bindings, ", ")), cell(why)))
	}
	if len(rows) == 0 {
		return
	}
	if user == "" {
		r.out.WriteString("### Other admission policies\n\n")
	} else {
		r.out.WriteString("Admission policies (ValidatingAdmissionPolicy) on this identity's requests:\n\n")
	}
	r.out.WriteString("| policy | matches | failure policy | binding (actions) | what it refuses, and why |\n|---|---|---|---|---|\n")
	r.out.WriteString(strings.Join(rows, "\n") + "\n\n")
}

func hasSubject(subjects []rbacv1.Subject, sa corev1.ServiceAccount) bool {
	for _, s := range subjects {
		if s.Kind == "ServiceAccount" && s.Name == sa.Name && s.Namespace == sa.Namespace {
			return true
		}
	}
	return false
}

func overlaps(a, b []string) bool {
	for _, x := range a {
		if x == "*" || slices.Contains(b, x) {
			return true
		}
	}
	return false
}

func code(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return "`" + strings.Join(s, "`, `") + "`"
}

// cell keeps text inside one Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

func loadManifest(root, op string) (manifest, error) {
	m := manifest{op: op}
	b, err := os.ReadFile(filepath.Join(root, "deploy", op+".yaml"))
	if err != nil {
		return m, err
	}
	lists := map[string]any{
		"ServiceAccount": &m.serviceAccounts, "Role": &m.roles, "ClusterRole": &m.clusterRoles,
		"RoleBinding": &m.roleBindings, "ClusterRoleBinding": &m.clusterRoleBindings,
		"ValidatingAdmissionPolicy": &m.policies, "ValidatingAdmissionPolicyBinding": &m.policyBindings,
	}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return m, fmt.Errorf("deploy/%s.yaml: %w", op, err)
		}
		list, ok := lists[meta.Kind]
		if !ok {
			continue
		}
		// Append a zero element to the kind's list and decode into it.
		l := reflect.ValueOf(list).Elem()
		l.Set(reflect.Append(l, reflect.Zero(l.Type().Elem())))
		dst := l.Index(l.Len() - 1).Addr().Interface()
		if err := yaml.Unmarshal([]byte(doc), dst); err != nil {
			return m, fmt.Errorf("deploy/%s.yaml %s: %w", op, meta.Kind, err)
		}
	}
	sort.SliceStable(m.serviceAccounts, func(i, j int) bool { return m.serviceAccounts[i].Name < m.serviceAccounts[j].Name })
	return m, nil
}

// loadMarkers reads the `+kubebuilder:rbac` markers of the Go files under dirs (tests excluded) and,
// for each, the comment that explains it: the nearest plain comment lines above it in the same comment
// block (a comment above a run of markers explains each of them).
func loadMarkers(root string, dirs []string) ([]marker, error) {
	var out []marker
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			rel, _ := filepath.Rel(root, path)
			var comment []string
			sc := bufio.NewScanner(f)
			for n := 1; sc.Scan(); n++ {
				line := strings.TrimSpace(sc.Text())
				text, isComment := strings.CutPrefix(line, "//")
				text = strings.TrimSpace(text)
				switch {
				case !isComment:
					comment = nil
				case strings.HasPrefix(text, "+kubebuilder:rbac:"):
					mk := parseMarker(strings.TrimPrefix(text, "+kubebuilder:rbac:"))
					mk.dir, mk.reason, mk.where = dir, strings.Join(comment, " "), fmt.Sprintf("%s:%d", rel, n)
					out = append(out, mk)
				case strings.HasPrefix(text, "+"):
					// Another marker: it neither explains nor interrupts.
				case text == "":
					// A paragraph break inside the comment keeps the explanation going.
				default:
					if len(out) > 0 && out[len(out)-1].where == fmt.Sprintf("%s:%d", rel, n-1) {
						comment = nil // the marker run ended: this comment starts a new explanation
					}
					comment = append(comment, text)
				}
			}
			return sc.Err()
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func parseMarker(s string) marker {
	var mk marker
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		vals := strings.Split(strings.Trim(v, `"`), ";")
		for i := range vals {
			vals[i] = strings.Trim(vals[i], `"`)
		}
		switch k {
		case "groups":
			mk.groups = vals
		case "resources":
			mk.resources = vals
		case "verbs":
			mk.verbs = vals
		case "namespace":
			mk.namespaced = true
		}
	}
	return mk
}
