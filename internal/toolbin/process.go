package toolbin

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// stopTimeout bounds how long Stop waits for the killed process and its output.
const stopTimeout = 10 * time.Second

// Command is a child process to start.
type Command struct {
	// Bin and Args are the program and its arguments.
	Bin  string
	Args []string
	// Dir is its working directory; empty for the test's.
	Dir string
	// LogPath is the file that gets its stdout and stderr.
	LogPath string
	// LogTailLines is how much of the log LogTail returns: enough to hold the
	// cause of a failure, which is near the end.
	LogTailLines int
}

// Process is a child process started by StartProcess.
type Process struct {
	cmd      *exec.Cmd
	cancel   context.CancelFunc
	logPath  string
	tailSize int
	done     chan struct{}
	once     sync.Once

	mu  sync.Mutex
	err error // from Wait, once done is closed
}

// StartProcess starts c bound to a context that Stop cancels, so the process dies
// with the test even if a caller forgets to stop it explicitly (and, on Linux, if
// the test binary dies without running its cleanups).
func StartProcess(c Command) (*Process, error) {
	logFile, err := os.Create(c.LogPath)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, c.Bin, c.Args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = c.Dir
	cmd.WaitDelay = stopTimeout
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		cancel()
		_ = logFile.Close()
		return nil, err
	}
	p := &Process{cmd: cmd, cancel: cancel, logPath: c.LogPath, tailSize: c.LogTailLines, done: make(chan struct{})}
	go p.wait(logFile)
	return p, nil
}

func (p *Process) wait(logFile *os.File) {
	err := p.cmd.Wait()
	_ = logFile.Close()
	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
	close(p.done)
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitErr is how the process ended (Wait's error), once Exited.
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Stop kills the process (the tools run for tests hold nothing worth a graceful
// shutdown) and waits for it, up to stopTimeout. It may be called more than once.
func (p *Process) Stop() {
	p.once.Do(func() {
		p.cancel()
		select {
		case <-p.done:
		case <-time.After(stopTimeout):
		}
	})
}

// AddrInUse reports whether the process died because a port it wanted was taken.
func (p *Process) AddrInUse() bool {
	return p.Exited() && strings.Contains(p.LogTail(), "address already in use")
}

// LogTail returns the last LogTailLines lines of the log (all of it if that is 0).
func (p *Process) LogTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return errors.Join(errors.New("read log"), err).Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if p.tailSize > 0 && len(lines) > p.tailSize {
		lines = lines[len(lines)-p.tailSize:]
	}
	return strings.Join(lines, "\n")
}
