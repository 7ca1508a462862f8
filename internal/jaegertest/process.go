package jaegertest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// stopTimeout bounds how long stop waits for the killed process and its output.
const stopTimeout = 10 * time.Second

// process is Jaeger as a child, its output in a file under the test's temporary
// directory.
type process struct {
	cmd     *exec.Cmd
	cancel  context.CancelFunc
	logPath string
	done    chan struct{}
	once    sync.Once
}

// startProcess starts bin bound to a context that stop cancels, so Jaeger dies
// with the test even if a caller forgets to stop it explicitly.
func startProcess(bin string, args []string, dir string) (*process, error) {
	logPath := filepath.Join(dir, "jaeger.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.WaitDelay = stopTimeout
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		cancel()
		_ = logFile.Close()
		return nil, err
	}
	p := &process{cmd: cmd, cancel: cancel, logPath: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop kills the process (nothing it holds is worth a graceful shutdown: its
// storage is memory) and waits for it, up to stopTimeout.
func (p *process) stop() {
	p.once.Do(func() {
		p.cancel()
		select {
		case <-p.done:
		case <-time.After(stopTimeout):
		}
	})
}

// addrInUse reports whether Jaeger died because a port was taken.
func (p *process) addrInUse() bool {
	return p.exited() && strings.Contains(p.logTail(), "address already in use")
}

// logTailLines is how much of the log a failure shows.
const logTailLines = 40

func (p *process) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return errors.Join(errors.New("read log"), err).Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, "\n")
}
