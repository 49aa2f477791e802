// Command status-sidecar runs beside the app containers of a StatefulSingleton pod in Wrapper hold mode.
// It long-polls the singleton operator's grant endpoint (package internal/grant documents the protocol)
// with the pod's projected, pod-bound ServiceAccount token, and when the operator releases the pod it
// writes the start signal (/var/run/signal/start-signal) that the wrapped entrypoints wait for. Then it
// idles until the pod stops.
//
// It fails closed: an unreachable operator, a refused token or a malformed answer only means "not yet";
// it retries with back-off and never writes the signal without a grant.
//
// Environment: POD_NAME, POD_NAMESPACE, POD_UID (downward API), GRANT_URL, optionally GRANT_CA (PEM);
// GRANT_TOKEN_FILE and STATEFULSINGLETON_SIGNAL_FILE override the token and signal paths.
//
// The same binary is the entrypoint wrapper of the app containers (package internal/wrapper): the
// sidecar is the pod's first container and its postStart hook, `status-sidecar install-wrapper <path>`,
// copies the binary into the pod's wrapper volume. The kubelet starts a pod's containers one after the
// other and waits for each postStart hook, so the app containers start only once the wrapper is in
// place — without an init container, whose exit the kubelet notices only at its next relist (up to a
// second on every pod start). Started under the name singleton-wrapper, the binary runs as the wrapper.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/singleton-operator/internal/wrapper"
)

// request and response mirror grant.Request and grant.Response (kept here so the sidecar binary does
// not link the operator's packages).
type request struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

type response struct {
	Granted bool `json:"granted"`
}

type config struct {
	url        string
	tokenFile  string
	signalFile string
	req        request
	client     *http.Client
}

func main() {
	if filepath.Base(os.Args[0]) == filepath.Base(singletonv1.WrapperBinary) {
		wrapper.Main() // an app container's entrypoint
	}
	if len(os.Args) == 3 && os.Args[1] == "install-wrapper" {
		if err := wrapper.Install(os.Args[2]); err != nil {
			fmt.Fprintf(os.Stderr, "status-sidecar: installing the wrapper: %v\n", err)
			os.Exit(1)
		}
		return
	}
	log.SetFlags(log.LstdFlags | log.Lmicroseconds | log.LUTC)
	log.SetPrefix("status-sidecar: ")
	cfg, err := load()
	if err != nil {
		log.Fatalf("configuration: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, cfg); err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
	<-ctx.Done() // idle until the pod stops: a restarted sidecar would only ask again
}

func load() (config, error) {
	cfg := config{
		url:        os.Getenv("GRANT_URL"),
		tokenFile:  envOr("GRANT_TOKEN_FILE", singletonv1.GrantTokenDir+"/token"),
		signalFile: envOr("STATEFULSINGLETON_SIGNAL_FILE", singletonv1.StartSignalFile),
		req:        request{Namespace: os.Getenv("POD_NAMESPACE"), Name: os.Getenv("POD_NAME"), UID: os.Getenv("POD_UID")},
	}
	if cfg.url == "" || cfg.req.Namespace == "" || cfg.req.Name == "" || cfg.req.UID == "" {
		return cfg, errors.New("GRANT_URL, POD_NAMESPACE, POD_NAME and POD_UID must be set")
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca := os.Getenv("GRANT_CA"); ca != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(ca)) {
			return cfg, errors.New("GRANT_CA holds no PEM certificate")
		}
		tlsConfig.RootCAs = pool
	}
	cfg.client = grantClient(tlsConfig)
	return cfg, nil
}

// grantClient is the long poll's HTTP client. The server holds a request up to 30 s, so the whole
// request may take a little longer than that; connecting may not. A connect that does not complete in
// connectTimeout is a SYN sent to an operator pod that is gone (during an operator upgrade, its network
// namespace torn down before kube-proxy dropped it from the grant Service): dialing again picks an
// endpoint anew, where waiting out the request's timeout kept a held pod from its start for 45 s
// (measured on the real node by e2e/singleton's TestSingletonUpgradeUnderLoad).
func grantClient(tlsConfig *tls.Config) *http.Client {
	dialer := &net.Dialer{Timeout: connectTimeout, KeepAlive: 5 * time.Second}
	return &http.Client{Timeout: 45 * time.Second, Transport: &http.Transport{
		TLSClientConfig:     tlsConfig,
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dialer.DialContext,
		TLSHandshakeTimeout: connectTimeout,
	}}
}

// connectTimeout bounds the TCP connect and the TLS handshake of one request to the grant endpoint.
const connectTimeout = 2 * time.Second

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// run asks until the pod is granted and writes the start signal. A signal file already present (the
// sidecar restarted after the grant) ends it at once.
func run(ctx context.Context, cfg config) error {
	if _, err := os.Stat(cfg.signalFile); err == nil {
		log.Printf("start signal already present")
		return nil
	}
	backoff := newBackoff(100*time.Millisecond, 5*time.Second)
	for {
		granted, err := ask(ctx, cfg)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			log.Printf("no grant yet: %v", err)
			if err := backoff.wait(ctx); err != nil {
				return err
			}
		case granted:
			if err := writeSignal(cfg.signalFile); err != nil {
				return fmt.Errorf("writing the start signal: %w", err)
			}
			log.Printf("start granted; signal written to %s", cfg.signalFile)
			return nil
		default:
			backoff.reset() // a long poll ended without a grant: ask again at once
		}
	}
}

// ask sends one long-poll request. The token is read on every request because the kubelet rotates it.
func ask(ctx context.Context, cfg config) (bool, error) {
	token, err := os.ReadFile(cfg.tokenFile)
	if err != nil {
		return false, fmt.Errorf("reading the token: %w", err)
	}
	body, _ := json.Marshal(cfg.req) // a struct of strings always marshals
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.url, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := cfg.client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return false, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	var r response
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&r); err != nil {
		return false, fmt.Errorf("decoding the answer: %w", err)
	}
	return r.Granted, nil
}

// writeSignal creates the signal file through a rename, so the wrappers see it appear complete.
func writeSignal(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".start-signal-*")
	if err != nil {
		return err
	}
	// Readable by the app containers, whatever user they run as.
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if _, err := fmt.Fprintf(tmp, "granted %s\n", time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// backoff waits longer after each consecutive failure, up to max.
type backoff struct {
	min, max, next time.Duration
}

func newBackoff(minDelay, maxDelay time.Duration) *backoff {
	return &backoff{min: minDelay, max: maxDelay, next: minDelay}
}

func (b *backoff) reset() { b.next = b.min }

func (b *backoff) wait(ctx context.Context) error {
	t := time.NewTimer(b.next)
	defer t.Stop()
	b.next = min(2*b.next, b.max)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
