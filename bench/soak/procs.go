package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a child process of the soak: this same binary re-executed with "child"
// as its first argument, so that a fault can SIGKILL it for real and restart it with
// the same arguments (same ports, same data directory). The child prints
// "ready <address>" on stdout once it serves, and exits when its stdin closes, so it
// never outlives the soak even when the soak itself is killed.
type proc struct {
	name string
	args []string
	// wrap, when set, is the command that runs the child: ip netns exec NS.
	wrap []string
	log  string // stderr of every incarnation, appended
	// ready bounds how long a start waits for the child's "ready" line.
	ready time.Duration

	mu     sync.Mutex
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan struct{}
	addr   string
	starts int
}

var errRunning = errors.New("already running")

func newProc(name, logDir string, ready time.Duration, args ...string) *proc {
	return &proc{name: name, args: append([]string{"child"}, args...), log: logDir + "/" + name + ".log", ready: ready}
}

// start runs a new incarnation and waits for it to serve. A child that exits before
// it is ready (a port not yet released, say) is started again until the deadline.
func (p *proc) start() error {
	deadline := time.Now().Add(p.ready)
	var last error
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		if attempt > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		if last = p.startOnce(time.Until(deadline)); last == nil || errors.Is(last, errRunning) {
			return nil // another caller (the heal step, the crash monitor) started it
		}
		slog.Warn("child did not start, retrying", "child", p.name, "err", last)
	}
	return fmt.Errorf("%s: not ready after %s: %w", p.name, p.ready, last)
}

func (p *proc) startOnce(wait time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return errRunning
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child holds its own descriptor
	fmt.Fprintf(logf, "=== %s start %d at %s\n", p.name, p.starts+1, time.Now().Format(time.RFC3339Nano))
	argv := append(append(append([]string(nil), p.wrap...), self), p.args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = logf
	// Own process group: a ^C to the soak reaches the soak, which then closes every
	// child's stdin, instead of killing children in the middle of a check. Pdeathsig
	// covers what stdin cannot: a child frozen by a fault reads nothing, so if the soak
	// dies meanwhile the kernel kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := spawn(cmd); err != nil {
		return err
	}
	exited := make(chan struct{})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "ready ") {
				select {
				case lines <- strings.TrimPrefix(l, "ready "):
				default:
				}
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	select {
	case addr := <-lines:
		p.cmd, p.stdin, p.exited, p.addr = cmd, stdin, exited, addr
		p.starts++
		return nil
	case <-exited:
		return fmt.Errorf("%s exited before it was ready (%s; see %s)", p.name, cmd.ProcessState, p.log)
	case <-time.After(wait):
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("%s not ready within %s (see %s)", p.name, wait, p.log)
	}
}

// spawner starts every child from one OS thread that lives as long as the soak:
// Pdeathsig fires when the thread that started a child ends, not the process, and Go
// may end an idle thread.
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

// kill sends SIGKILL and waits until the process is gone.
func (p *proc) kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s is not running", p.name)
	}
	err := p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		err = errors.Join(err, fmt.Errorf("%s did not die within 10s of SIGKILL", p.name))
	}
	_ = p.stdin.Close()
	p.cmd = nil
	return err
}

// order writes one line to the running incarnation's stdin (a registrar child
// takes orders for its proxies there).
func (p *proc) order(line string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s is not running", p.name)
	}
	_, err := io.WriteString(p.stdin, line+"\n")
	return err
}

// signal sends sig to the running incarnation (SIGSTOP and SIGCONT freeze and thaw it).
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s is not running", p.name)
	}
	return p.cmd.Process.Signal(sig)
}

// stop ends the child the gentle way (its stdin closes), then kills it if it has
// not gone within 15 s.
func (p *proc) stop() {
	p.mu.Lock()
	cmd, stdin, exited := p.cmd, p.stdin, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = stdin.Close()
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// exitedOnItsOwn reports a child that died without being killed: a crash worth
// reporting, which the heal step restarts.
func (p *proc) exitedOnItsOwn() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		p.cmd = nil
		return true
	default:
		return false
	}
}
