package kubetest

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

// process is kube-apiserver as a child, its output in a file under the test's
// temporary directory.
type process struct {
	cmd     *exec.Cmd
	cancel  context.CancelFunc
	logPath string
	done    chan struct{}
	once    sync.Once

	mu  sync.Mutex
	err error // from Wait, once done is closed
}

// startProcess starts bin bound to a context that stop cancels, so the server dies
// with the test even if a caller forgets to stop it explicitly.
func startProcess(bin string, args []string, dir string) (*process, error) {
	logPath := filepath.Join(dir, "kube-apiserver.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.WaitDelay = stopTimeout
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		cancel()
		_ = logFile.Close()
		return nil, err
	}
	p := &process{cmd: cmd, cancel: cancel, logPath: logPath, done: make(chan struct{})}
	go p.wait(logFile)
	return p, nil
}

func (p *process) wait(logFile *os.File) {
	err := p.cmd.Wait()
	_ = logFile.Close()
	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
	close(p.done)
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// stop kills the process (nothing it holds is worth a graceful shutdown: etcd and
// the directory are thrown away) and waits for it, up to stopTimeout.
func (p *process) stop() {
	p.once.Do(func() {
		p.cancel()
		select {
		case <-p.done:
		case <-time.After(stopTimeout):
		}
	})
}

// addrInUse reports whether the server died because its port was taken.
func (p *process) addrInUse() bool {
	return p.exited() && strings.Contains(p.logTail(), "address already in use")
}

// logTailLines is how much of the log a failure shows: kube-apiserver logs
// hundreds of lines while starting, and the cause is near the end.
const logTailLines = 60

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
