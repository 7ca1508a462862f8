// Package grpcstop stops a gRPC server the way every Switchboard server stops one:
// gracefully, so that calls in flight finish and clients move on cleanly, but for no
// longer than a bound, after which the calls still open are cut.
package grpcstop

import "time"

// Server is what Stop needs of a *grpc.Server.
type Server interface {
	GracefulStop()
	Stop()
}

// Stop stops s gracefully and, once timeout has passed, hard. It returns when s has
// stopped.
func Stop(s Server, timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		s.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.Stop()
		<-done // GracefulStop returns once Stop has closed every connection
	}
}
