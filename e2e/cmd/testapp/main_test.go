package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// binary is the test app, built once by TestMain: the tests drive it as a real process.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "testapp-test")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "testapp")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	code := 1
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the test app:", err)
	} else {
		code = m.Run()
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// app is one running test app.
type app struct {
	cmd   *exec.Cmd
	lines chan string // its stdout, line by line
}

// start runs the test app with args and the extra environment variables env (the POD_*, NODE_NAME and
// TESTAPP_* variables of the test process are removed first), and waits for its start record.
func start(t *testing.T, env []string, args ...string) (*app, record) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "POD_") && !strings.HasPrefix(kv, "NODE_NAME=") && !strings.HasPrefix(kv, "TESTAPP_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	a := &app{cmd: cmd, lines: make(chan string, 100)}
	go func() {
		defer close(a.lines)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			a.lines <- s.Text()
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	rec := a.next(t)
	require.Equal(t, "start", rec.Event)
	return a, rec
}

// next returns the app's next record on stdout.
func (a *app) next(t *testing.T) record {
	t.Helper()
	select {
	case line, ok := <-a.lines:
		require.True(t, ok, "the test app closed its stdout")
		var rec record
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		return rec
	case <-time.After(10 * time.Second):
		t.Fatal("no record from the test app within 10s")
		return record{}
	}
}

// wait waits for the app to exit and returns its exit code.
func (a *app) wait(t *testing.T) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	select {
	case <-done:
		return a.cmd.ProcessState.ExitCode()
	case <-time.After(10 * time.Second):
		t.Fatal("the test app did not exit within 10s")
		return -1
	}
}

// readRecords reads a record file.
func readRecords(t *testing.T, path string) []record {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var recs []record
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var rec record
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		recs = append(recs, rec)
	}
	return recs
}

func parseTime(t *testing.T, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return ts
}

// TestSigterm: the app records its start, then on SIGTERM the signal, takes --shutdown-seconds and
// records its stop with the --exit-code it then exits with; the record file holds what stdout shows.
func TestSigterm(t *testing.T) {
	dir := t.TempDir()
	env := []string{"POD_NAME=web-0", "POD_NAMESPACE=shop", "POD_UID=3f1c-uid", "NODE_NAME=node-a"}
	args := []string{"--record-dir", dir, "--shutdown-seconds", "1", "--exit-code", "3", "--listen", ""}
	before := time.Now()
	a, started := start(t, env, args...)

	assert.Equal(t, append([]string{binary}, args...), started.Argv)
	assert.Equal(t, a.cmd.Process.Pid, started.PID)
	assert.Equal(t, pod{Name: "web-0", Namespace: "shop", UID: "3f1c-uid", Node: "node-a"}, started.Pod)
	assert.Equal(t, "devel", started.Version)
	assert.Empty(t, started.Listen)
	assert.Equal(t, 1, started.Seq)
	assert.Zero(t, started.MonoNS)
	startTime := parseTime(t, started.Time)
	assert.WithinDuration(t, before, startTime, 5*time.Second)

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	sigterm := a.next(t)
	stop := a.next(t)
	assert.Equal(t, 3, a.wait(t))

	assert.Equal(t, "sigterm", sigterm.Event)
	require.NotNil(t, sigterm.ShutdownSeconds)
	assert.InDelta(t, 1.0, *sigterm.ShutdownSeconds, 0)
	assert.Equal(t, "stop", stop.Event)
	require.NotNil(t, stop.ExitCode)
	assert.Equal(t, 3, *stop.ExitCode)
	assert.Equal(t, "signal", stop.Reason)
	assert.Equal(t, []int{1, 2, 3}, []int{started.Seq, sigterm.Seq, stop.Seq})
	assert.Less(t, started.MonoNS, sigterm.MonoNS)
	assert.GreaterOrEqual(t, stop.MonoNS-sigterm.MonoNS, int64(time.Second), "shutdown took --shutdown-seconds")
	assert.GreaterOrEqual(t, parseTime(t, stop.Time).Sub(parseTime(t, sigterm.Time)), time.Second)
	for _, rec := range []record{sigterm, stop} {
		assert.Equal(t, started.Instance, rec.Instance)
		assert.Equal(t, started.Pod, rec.Pod)
	}

	assert.Equal(t, []record{started, sigterm, stop}, readRecords(t, filepath.Join(dir, "3f1c-uid.jsonl")))
}

// TestEnvironment: every setting can come from TESTAPP_* variables, a flag wins over its variable, and
// without the downward API the hostname names the pod and the record file.
func TestEnvironment(t *testing.T) {
	dir := t.TempDir()
	env := []string{"TESTAPP_RECORD_DIR=" + dir, "TESTAPP_SHUTDOWN_SECONDS=0.3", "TESTAPP_EXIT_CODE=4", "TESTAPP_LISTEN="}
	a, started := start(t, env, "--exit-code", "5")
	hostname, err := os.Hostname()
	require.NoError(t, err)
	assert.Equal(t, pod{Name: hostname}, started.Pod)
	assert.Equal(t, hostname, started.Hostname)

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	sigterm, stop := a.next(t), a.next(t)
	assert.Equal(t, 5, a.wait(t), "the flag wins over TESTAPP_EXIT_CODE")
	assert.InDelta(t, 0.3, *sigterm.ShutdownSeconds, 1e-9)
	assert.GreaterOrEqual(t, stop.MonoNS-sigterm.MonoNS, int64(300*time.Millisecond))
	assert.Len(t, readRecords(t, filepath.Join(dir, hostname+".jsonl")), 3)

	t.Run("invalid", func(t *testing.T) {
		for _, env := range [][]string{{"TESTAPP_EXIT_CODE=x"}, {"TESTAPP_EXIT_CODE=256"}, {"TESTAPP_SHUTDOWN_SECONDS=-1"}} {
			cmd := exec.Command(binary, "--listen", "")
			cmd.Env = append(os.Environ(), env...)
			out, err := cmd.CombinedOutput()
			require.Error(t, err, env)
			assert.Equal(t, 2, cmd.ProcessState.ExitCode(), "%v: %s", env, out)
		}
	})
}

// TestRunSeconds: the app ends by itself with --exit-code; its runs in one pod append to one file.
func TestRunSeconds(t *testing.T) {
	dir := t.TempDir()
	env := []string{"POD_UID=uid-2"}
	var instances []string
	for range 2 {
		a, started := start(t, env, "--record-dir", dir, "--run-seconds", "0.3", "--exit-code", "7", "--listen", "")
		stop := a.next(t)
		assert.Equal(t, 7, a.wait(t))
		assert.Equal(t, "stop", stop.Event)
		assert.Equal(t, "run-seconds", stop.Reason)
		assert.Equal(t, 7, *stop.ExitCode)
		assert.GreaterOrEqual(t, stop.MonoNS, int64(300*time.Millisecond))
		instances = append(instances, started.Instance)
	}
	assert.NotEqual(t, instances[0], instances[1])
	var got []string
	for _, rec := range readRecords(t, filepath.Join(dir, "uid-2.jsonl")) {
		got = append(got, rec.Instance+" "+rec.Event)
	}
	assert.Equal(t, []string{instances[0] + " start", instances[0] + " stop", instances[1] + " start", instances[1] + " stop"}, got)
}

// TestCrashAtStart: with TESTAPP_CRASH_AT_START the app records its start and stops at once with that
// exit code, without binding its HTTP address (a pod running it is never Ready).
func TestCrashAtStart(t *testing.T) {
	dir := t.TempDir()
	a, _ := start(t, []string{"POD_UID=uid-3", "TESTAPP_CRASH_AT_START=3"}, "--record-dir", dir, "--listen", "127.0.0.1:0")
	stop := a.next(t)
	assert.Equal(t, 3, a.wait(t))
	assert.Equal(t, "stop", stop.Event)
	assert.Equal(t, "crash-at-start", stop.Reason)
	assert.Equal(t, 3, *stop.ExitCode)
	var got []string
	for _, rec := range readRecords(t, filepath.Join(dir, "uid-3.jsonl")) {
		assert.Empty(t, rec.Listen, "no address bound")
		got = append(got, rec.Event)
	}
	assert.Equal(t, []string{"start", "stop"}, got)
}

// TestCrashFile: with --crash-file the app crashes at start only while that file exists.
func TestCrashFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "uid-4.crash")
	a, _ := start(t, nil, "--crash-at-start", "3", "--crash-file", file, "--run-seconds", "0.1", "--listen", "")
	assert.Equal(t, "run-seconds", a.next(t).Reason, "no file: it runs")
	assert.Equal(t, 0, a.wait(t))
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	a, _ = start(t, nil, "--crash-at-start", "3", "--crash-file", file, "--run-seconds", "0.1", "--listen", "")
	assert.Equal(t, "crash-at-start", a.next(t).Reason, "the file: it crashes")
	assert.Equal(t, 3, a.wait(t))
}

// TestEndpoints: health, readiness (the not-ready file, the shutdown), metrics (the value file) and
// the identity page.
func TestEndpoints(t *testing.T) {
	dir := t.TempDir()
	notReady, valueFile := filepath.Join(dir, "not-ready"), filepath.Join(dir, "value")
	a, started := start(t, []string{"POD_NAME=web-1"}, "--listen", "127.0.0.1:0", "--shutdown-seconds", "1",
		"--not-ready-file", notReady, "--value-file", valueFile)
	require.NotEmpty(t, started.Listen)
	url := "http://" + started.Listen
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(url + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}

	code, _ := get("/healthz")
	assert.Equal(t, http.StatusOK, code)
	code, _ = get("/readyz")
	assert.Equal(t, http.StatusOK, code)
	require.NoError(t, os.WriteFile(notReady, nil, 0o644))
	code, _ = get("/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	require.NoError(t, os.Remove(notReady))
	code, _ = get("/readyz")
	assert.Equal(t, http.StatusOK, code)

	code, body := get("/metrics")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "\ntestapp_up 1\n")
	assert.Contains(t, body, "\ntestapp_value 0\n")
	assert.Contains(t, body, fmt.Sprintf("\ntestapp_start_time_seconds %d.", parseTime(t, started.Time).Unix()))
	assert.Contains(t, body, "# TYPE testapp_value gauge\n")
	require.NoError(t, os.WriteFile(valueFile, []byte("42.5\n"), 0o644))
	_, body = get("/metrics")
	assert.Contains(t, body, "\ntestapp_value 42.5\n")
	require.NoError(t, os.WriteFile(valueFile, []byte("not a number"), 0o644))
	code, _ = get("/metrics")
	assert.Equal(t, http.StatusInternalServerError, code)

	code, body = get("/")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `"name":"web-1"`)
	code, _ = get("/nothing")
	assert.Equal(t, http.StatusNotFound, code)

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, "sigterm", a.next(t).Event)
	code, _ = get("/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code, "not ready while shutting down")
	code, _ = get("/healthz")
	assert.Equal(t, http.StatusOK, code, "alive while shutting down")
	assert.Equal(t, "stop", a.next(t).Event)
	assert.Equal(t, 0, a.wait(t))
}

// TestListenError: a port that cannot be bound is a start and a stop with exit code 1.
func TestListenError(t *testing.T) {
	a, started := start(t, nil, "--listen", "127.0.0.1:99999")
	assert.Empty(t, started.Listen)
	stop := a.next(t)
	assert.Equal(t, 1, *stop.ExitCode)
	assert.Contains(t, stop.Reason, "99999")
	assert.Equal(t, 1, a.wait(t))
}

// TestVersion: --version prints the version and records nothing (kubectl exec uses it in a pod whose
// environment names a record dir).
func TestVersion(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "records")
	cmd := exec.Command(binary, "--version")
	cmd.Env = append(os.Environ(), "TESTAPP_RECORD_DIR="+dir)
	out, err := cmd.Output()
	require.NoError(t, err)
	assert.Equal(t, "testapp devel\n", string(out))
	assert.NoDirExists(t, dir)
}

// TestResolve: `testapp resolve` prints each name's addresses, NXDOMAIN for a name the DNS says does
// not exist, and fails on a name no server answered for, recording nothing.
func TestResolve(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "records")
	cmd := exec.Command(binary, "resolve", "localhost")
	cmd.Env = append(os.Environ(), "TESTAPP_RECORD_DIR="+dir)
	out, err := cmd.Output()
	require.NoError(t, err)
	assert.Contains(t, strings.Fields(string(out))[1:], "127.0.0.1", "localhost is in /etc/hosts")
	assert.NoDirExists(t, dir)

	var stdout, stderr strings.Builder
	nxdomain := resolverOf(t, nxdomainServer(t))
	code := resolve(t.Context(), nxdomain, []string{"member-0.members.default.svc.cluster.local."}, &stdout, &stderr)
	assert.Equal(t, 0, code, stderr.String())
	assert.Equal(t, "member-0.members.default.svc.cluster.local. NXDOMAIN\n", stdout.String())

	stdout.Reset()
	unreachable := &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no DNS server here")
	}}
	code = resolve(t.Context(), unreachable, []string{"member-0.members.default.svc.cluster.local."}, &stdout, &stderr)
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout.String(), "no answer is not NXDOMAIN")
	assert.Contains(t, stderr.String(), "no DNS server here")

	assert.Equal(t, 2, resolve(t.Context(), unreachable, nil, &stdout, &stderr), "no names")
}

// resolverOf is a Go resolver that sends every query to the UDP server at addr.
func resolverOf(t *testing.T, addr string) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "udp", addr)
	}}
}

// nxdomainServer serves DNS on a local UDP port for the rest of the test, answering every query with
// an authoritative NXDOMAIN, and returns its address.
func nxdomainServer(t *testing.T) string {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			// The header (12 bytes) and the one question: its name's labels, the root label, type, class.
			end := 12
			for end < n && buf[end] != 0 {
				end += int(buf[end]) + 1
			}
			end += 5
			if end > n {
				continue
			}
			reply := slices.Clone(buf[:end])
			reply[2] = 0x84 // QR (a response), AA (authoritative), opcode QUERY
			reply[3] = 0x03 // RCODE NXDOMAIN
			// One question, no answer, authority or additional records.
			copy(reply[4:12], []byte{0, 1, 0, 0, 0, 0, 0, 0})
			_, _ = conn.WriteTo(reply, from)
		}
	}()
	return conn.LocalAddr().String()
}
