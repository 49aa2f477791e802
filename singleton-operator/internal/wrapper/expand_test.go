package wrapper

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestExpandFollowsTheKubeletRules(t *testing.T) {
	env := map[string]string{"A": "1", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for in, want := range map[string]string{
		"$(A)":       "1",
		"x$(A)y":     "x1y",
		"$(EMPTY)":   "",
		"$$(A)":      "$(A)",
		"$$$(A)":     "$1",
		"$(MISSING)": "$(MISSING)",
		"$(A":        "$(A",
		"$(A$$":      "$(A$",
		"$()":        "$()",
		"$A":         "$A",
		"$":          "$",
		"a b,c\"d'":  "a b,c\"d'",
		"$(A)$(A)$$": "11$",
	} {
		assert.Equal(t, want, Expand(in, lookup), "expand(%q)", in)
	}
}
