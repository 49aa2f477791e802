package realnode

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// startContainerd starts containerd with the node's config and waits until its socket answers.
func startContainerd(ctx context.Context, l layout) error {
	bin, err := lookPath("containerd")
	if err != nil {
		return err
	}
	if _, err := startDaemon(l, "containerd", bin, "--config", l.containerdConfig()); err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if _, ok := l.runningPID("containerd"); !ok {
			return false, fmt.Errorf("containerd exited")
		}
		_, err := ctr(l, "version")
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for containerd: %w; log:\n%s", err, tailFile(l.logFile("containerd"), 3000))
	}
	return nil
}

// ctr runs containerd's CLI on the node's containerd, in the kubelet's namespace k8s.io.
func ctr(l layout, args ...string) (string, error) {
	return run("ctr", append([]string{"--address", l.containerdSocket(), "--namespace", "k8s.io"}, args...)...)
}

// importImages imports every *.tar of dir into the kubelet's containerd namespace, unpacked for the
// overlayfs snapshotter, and returns the tarballs' names. The output goes to logs/images.log.
func importImages(ctx context.Context, l layout, dir string) ([]string, error) {
	tars, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil {
		return nil, err
	}
	sort.Strings(tars)
	log, err := os.OpenFile(l.logFile("images"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	var names []string
	for _, tar := range tars {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out, err := ctr(l, "images", "import", "--snapshotter", "overlayfs", tar)
		fmt.Fprintf(log, "### import %s\n%s", tar, out)
		if err != nil {
			return nil, fmt.Errorf("import %s: %w", tar, err)
		}
		names = append(names, strings.TrimSuffix(filepath.Base(tar), ".tar"))
	}
	return names, nil
}

// newLocalHTTPClient is a plain HTTP client for the daemons' local health endpoints.
func newLocalHTTPClient() *http.Client {
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		Proxy:       nil,
		DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
	}}
}

// httpGet returns the status of a GET of url.
func httpGet(ctx context.Context, client *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Status, nil
}
