package crdvalidation

import (
	"fmt"
	"sort"
	"strings"
)

// interesting are the values a mutation writes: the edges of the CRDs' rules (empty, zero, negative,
// int32 and label-length limits, unknown enum values, bad label syntax, URLs without a host, PromQL
// that does not parse, durations) and plain valid values.
var interesting = []any{
	"", "a", "db", "app", "Bogus", "In", "NotIn", "Exists", "DoesNotExist", "in",
	"my db", "db-", "-db", "a/b/c", "db!", strings.Repeat("v", 63), strings.Repeat("v", 64), strings.Repeat("n", 253),
	"http://", "http://:9090", "::not a url::", "ftp://prometheus:9090", "http://prometheus:9090", "https://[::1]:9090/x",
	"https://prom:99999", "http://user@:9090", "HTTP://prom", "prometheus:9090", "http://prom?x=1",
	"up == 0", "invalid_promql{", "sum(rate(x[5m])) >", "rate(x[5m]", `up{pod="{{pod}}"}`, "up{{", "1s", "10ms", "5m", "soon", "-1s",
	"Always", "Never", "OnDelete", "RollingUpdate", "Parallel", "OrderedReady", "Retain", "Delete", "Wrapper", "SchedulingGate",
	"50%", "101%", "lots",
	int64(0), int64(1), int64(2), int64(3), int64(-1), int64(63), int64(64), int64(3600), int64(3601), int64(1 << 31), int64(-1 << 31), int64(1 << 40),
	true, false, nil,
	map[string]any{}, []any{}, map[string]any{"app": "db"},
	[]any{map[string]any{"key": "app", "operator": "In", "values": []any{"db"}}},
	[]any{map[string]any{"key": "app", "operator": "Bogus", "values": []any{"db"}}},
}

// newKeys are the keys a mutation adds to a map: label keys valid and not, and field names the kinds use.
var newKeys = []string{"app", "tier", "x", "-app", "a/b/c", "example.com/role", strings.Repeat("k", 64), "matchExpressions", "matchLabels", "replicas", "selector", "labels"}

// maxSteps bounds a program: each step walks the whole object, and a few dozen changes already lead far
// from any seed.
const maxSteps = 32

// maxNodes bounds the size of a mutated object (the largest documented example has about 150 nodes).
const maxNodes = 1000

// Mutate changes obj in place as ops says, three bytes a step: which node of the object (every map,
// list and value, in a stable order), what to do (replace, delete, add a key, duplicate or empty a
// list, copy another node here) and with what (an index into the interesting values). It is the
// shared mutation engine of the fuzz targets: any byte string is a valid program, so the fuzzer's
// mutations of ops explore objects near the seed, valid and not, and the validator sorts them.
// It returns the steps taken, for a failing input's message.
func Mutate(obj map[string]any, ops []byte) []string {
	var steps []string
	for n := 0; len(ops) >= 3 && n < maxSteps; n++ {
		sel, act, val := int(ops[0]), ops[1]%6, int(ops[2])
		ops = ops[3:]
		nodes := walk(nil, obj)
		// Copies and duplicates can double the object each step: past the size of any real manifest the
		// program stops (the validator and the operator's checks would only spend time).
		if len(nodes) == 0 || len(nodes) > maxNodes {
			break
		}
		n := nodes[sel%len(nodes)]
		switch act {
		case 0: // replace
			v := clone(interesting[val%len(interesting)])
			if n.set(v) {
				steps = append(steps, fmt.Sprintf("%s = %v", n.path, v))
			}
		case 1: // delete
			if n.del() {
				steps = append(steps, "delete "+n.path)
			}
		case 2: // add a key to a map
			if m, ok := n.value.(map[string]any); ok {
				k := newKeys[val%len(newKeys)]
				v := clone(interesting[(val/len(newKeys))%len(interesting)])
				m[k] = v
				steps = append(steps, fmt.Sprintf("%s.%s = %v", n.path, k, v))
			}
		case 3: // duplicate the last element of a list
			if l, ok := n.value.([]any); ok && len(l) > 0 {
				n.set(append(l, clone(l[len(l)-1])))
				steps = append(steps, "duplicate last of "+n.path)
			}
		case 4: // empty a list or map
			switch n.value.(type) {
			case []any:
				n.set([]any{})
				steps = append(steps, "empty "+n.path)
			case map[string]any:
				n.set(map[string]any{})
				steps = append(steps, "empty "+n.path)
			}
		case 5: // copy another node's value here (e.g. a template label into a selector)
			other := nodes[val%len(nodes)]
			if n.set(clone(other.value)) {
				steps = append(steps, fmt.Sprintf("%s = copy of %s", n.path, other.path))
			}
		}
	}
	return steps
}

// node is one place in the object: its value and how to replace or remove it in its parent.
type node struct {
	path  string
	value any
	set   func(any) bool
	del   func() bool
}

// walk lists every node under v (v itself excluded when it is the root), maps' keys sorted.
func walk(prefix []string, v any) []node {
	var out []node
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			path := append(append([]string{}, prefix...), k)
			// apiVersion and kind only decide which decoder applies: changing them tests nothing.
			if len(prefix) == 0 && (k == "apiVersion" || k == "kind") {
				continue
			}
			out = append(out, node{
				path:  strings.Join(path, "."),
				value: t[k],
				set:   func(nv any) bool { t[k] = nv; return true },
				del:   func() bool { delete(t, k); return true },
			})
			out = append(out, walk(path, t[k])...)
		}
	case []any:
		for i := range t {
			path := append(append([]string{}, prefix...), fmt.Sprintf("[%d]", i))
			out = append(out, node{
				path:  strings.Join(path, "."),
				value: t[i],
				set:   func(nv any) bool { t[i] = nv; return true },
				del:   func() bool { t[i] = nil; return true },
			})
			out = append(out, walk(path, t[i])...)
		}
	}
	return out
}

// clone deep-copies a JSON-like value, so that no two nodes share a map or list.
func clone(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = clone(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = clone(e)
		}
		return out
	}
	return v
}
