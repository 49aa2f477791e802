// Command e2edown ends a run of e2e suites under E2E_SHARED_CLUSTER=1 (`make test-e2e`): it stops
// the local cluster one of them started, after checking that stopping its real node left the host as
// it was (framework.DownShared). A cluster no suite started is left running.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/statefulops/statefulops/e2e/framework"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := framework.DownShared(ctx)
	stop()
	os.Exit(code)
}
