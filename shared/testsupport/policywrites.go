package testsupport

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PolicyWrite is one write of a permissions test, made with the client it is given (an operator's
// impersonated ServiceAccount, or another user), typically with client.DryRunAll.
type PolicyWrite struct {
	Name  string
	Write func(c client.Client) error
}

// RequirePolicyWrites checks an operator's admission policy: every write of allowed passes as the
// operator (as); every write of refused, which its RBAC allows, is refused as the operator by a
// ValidatingAdmissionPolicy, while the same write by other (a user the policy must not bind) is not
// refused by one. It logs each refusal and the count of attempts and of those allowed (0 when it
// returns).
func RequirePolicyWrites(t *testing.T, user string, as, other client.Client, allowed, refused []PolicyWrite) {
	t.Helper()
	for _, w := range allowed {
		require.NoError(t, w.Write(as), "the operator's own write %q", w.Name)
	}
	let := 0
	for _, w := range refused {
		err := w.Write(as)
		if err == nil {
			let++
			t.Errorf("as the operator, %q was allowed", w.Name)
			continue
		}
		t.Logf("refused %q: %v", w.Name, err)
		require.Containsf(t, err.Error(), "ValidatingAdmissionPolicy", "%q was refused by something else: %v", w.Name, err)
		// The objects a write patches or deletes may not suit the other user's write (an admin's
		// objects, a dry run): only a refusal by a policy counts.
		if oerr := w.Write(other); oerr != nil && strings.Contains(oerr.Error(), "ValidatingAdmissionPolicy") {
			t.Errorf("the policy refused another user's %q: %v", w.Name, oerr)
		}
	}
	t.Logf("escalation attempts as %s: %d, allowed: %d", user, len(refused), let)
}
