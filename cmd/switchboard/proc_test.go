package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
)

// procWait bounds each wait on a childProc: its output, its readiness, its exit.
const procWait = 30 * time.Second

// childProc is a long-running command of the real binary with an environment of
// its own, which the test stops with a signal of its choosing: the tracing tests' processes
// and the pod tests' agent.
type childProc struct {
	t        *testing.T
	name     string
	cmd      *exec.Cmd
	out, err *syncbuf.Buffer
	done     chan struct{}
}

// startProc runs the binary with args and env added to the test's environment,
// until the test stops it (or ends: then SIGTERM).
func startProc(t *testing.T, name string, env []string, args ...string) *childProc {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	p := &childProc{t: t, name: name, cmd: cmd, out: &syncbuf.Buffer{}, err: &syncbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.err
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.stop(syscall.SIGTERM) })
	return p
}

// waitOut waits up to procWait for stdout to match re and returns the submatches.
func (p *childProc) waitOut(re *regexp.Regexp) []string {
	p.t.Helper()
	deadline := time.Now().Add(procWait)
	for {
		if m := re.FindStringSubmatch(p.out.String()); m != nil {
			return m
		}
		select {
		case <-p.done:
			p.t.Fatalf("%s exited: %s", p.name, p.err)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: no %q on stdout within %s; stderr:\n%s", p.name, re, procWait, p.err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitReady waits up to procWait for 200 from http://addr/readyz.
func (p *childProc) waitReady(addr string) {
	p.t.Helper()
	deadline := time.Now().Add(procWait)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = fmt.Errorf("%s: %s", resp.Status, body)
		}
		select {
		case <-p.done:
			p.t.Fatalf("%s exited: %s", p.name, p.err)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s not ready within %s: %v\n%s", p.name, procWait, err, p.err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends sig and waits up to procWait for the process to exit, then kills it.
func (p *childProc) stop(sig syscall.Signal) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(procWait):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Errorf("%s did not stop within %s of %s", p.name, procWait, sig)
	}
}
