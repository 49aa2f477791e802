//go:build e2e

package extended

import (
	"testing"

	"github.com/statefulops/statefulops/e2e/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
