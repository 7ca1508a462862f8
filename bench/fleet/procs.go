package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a child process: this binary re-executed as `fleet child KIND ...`. It
// prints "ready <address>" once it serves, then (the agents child) one line per
// reply or observation; it ends when its stdin closes, so a parent that dies, however
// it dies, takes it along. Each child leads a process group of its own, so that a
// ^C reaches the parent only (which then stops the children in order) and a failed
// run can SIGKILL the whole group.
type proc struct {
	name   string
	addr   string      // what the "ready" line named
	lines  chan string // stdout lines after "ready" that tap did not take; closed when the child exits
	tap    func(string) bool
	cmd    *exec.Cmd
	exited chan struct{}

	mu    sync.Mutex // orders writes to stdin
	stdin io.WriteCloser
}

// startProc starts `self child args...` and waits up to wait for its "ready" line.
// The child's stderr is appended to logDir/name.log. tap, if not nil, sees every
// later line first and keeps those it returns true for (observations that arrive
// whenever they happen, not as replies).
func startProc(name, logDir string, wait time.Duration, tap func(string) bool, args ...string) (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logDir+"/"+name+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.Command(self, append([]string{"child"}, args...)...)
	cmd.Stderr = logf
	// Pdeathsig covers a parent killed by SIGKILL: its stdin pipe closes too, but a
	// child stuck in a slow shutdown would linger.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := spawn(cmd); err != nil {
		return nil, err
	}
	p := &proc{name: name, cmd: cmd, stdin: stdin, exited: make(chan struct{}), lines: make(chan string, 4096), tap: tap}
	ready := make(chan string, 1)
	go p.read(stdout, ready)
	select {
	case p.addr = <-ready:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("%s exited before it was ready (%s; see %s.log)", name, cmd.ProcessState, name)
	case <-time.After(wait):
		p.killGroup()
		return nil, fmt.Errorf("%s not ready within %s (see its log)", name, wait)
	}
}

// read hands the "ready" address to ready and every later line to p.lines.
func (p *proc) read(stdout io.Reader, ready chan<- string) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	isReady := false
	for sc.Scan() {
		l := sc.Text()
		if !isReady && strings.HasPrefix(l, "ready ") {
			isReady = true
			ready <- strings.TrimPrefix(l, "ready ")
			continue
		}
		if isReady && (p.tap == nil || !p.tap(l)) {
			p.lines <- l
		}
	}
	_ = p.cmd.Wait()
	close(p.lines)
	close(p.exited)
}

// spawner starts every child from one locked OS thread that lives as long as the
// program: Pdeathsig fires when the thread that started a child ends, and Go may end
// an idle thread.
var spawner = make(chan func())

func init() {
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the process
		for f := range spawner {
			f()
		}
	}()
}

func spawn(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	spawner <- func() { done <- cmd.Start() }
	return <-done
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// send writes one line to the child's stdin.
func (p *proc) send(line string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := io.WriteString(p.stdin, line+"\n")
	return err
}

// kill sends SIGKILL to the child's process group and waits (10 s at most) until the
// child is gone.
func (p *proc) kill() error {
	p.killGroup()
	select {
	case <-p.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s did not die within 10s of SIGKILL", p.name)
	}
}

func (p *proc) killGroup() { _ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) }

// stop ends the child gently (its stdin closes), and kills its group if it has not
// gone within grace.
func (p *proc) stop(grace time.Duration) {
	p.mu.Lock()
	_ = p.stdin.Close()
	p.mu.Unlock()
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = p.kill()
	}
}

// alive reports whether the child is still running.
func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// call sends cmd and waits up to wait for the first line starting with want+" ",
// which it returns without the prefix. Other lines are dropped: replies come in the
// order asked, so a stale one can only be from a call that timed out.
func (p *proc) call(cmd, want string, wait time.Duration) (string, error) {
	if err := p.send(cmd); err != nil {
		return "", fmt.Errorf("%s: %s: %w", p.name, cmd, err)
	}
	return p.await(want, wait)
}

// await waits for the first line starting with want+" ".
func (p *proc) await(want string, wait time.Duration) (string, error) {
	deadline := time.After(wait)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				return "", fmt.Errorf("%s exited while waiting for %q", p.name, want)
			}
			if rest, found := strings.CutPrefix(l, want+" "); found {
				return rest, nil
			}
			if strings.HasPrefix(l, "error ") {
				return "", errors.New(p.name + ": " + strings.TrimPrefix(l, "error "))
			}
		case <-deadline:
			return "", fmt.Errorf("%s: no %q within %s", p.name, want, wait)
		}
	}
}
