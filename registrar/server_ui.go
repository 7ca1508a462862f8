package registrar

import (
	"context"
	"net/http"

	"github.com/switchboard-mesh/switchboard/registrar/ui"
)

// UIOptions configure the web page at /ui on the health port (package
// registrar/ui); the server sets its Source to its registrar.
type UIOptions = ui.Options

// page is the web page, named here so that server.go needs no import of it.
type page = ui.Page

// newPage makes the server's web page, unless cfg turns it off, and returns
// what mounts it on the health port (nil for none).
func (s *Server) newPage(cfg ServerConfig) func(*http.ServeMux) {
	if cfg.NoUI {
		return nil
	}
	o := cfg.UI
	o.Source = s.reg
	if o.Logger == nil {
		o.Logger = s.reg.log
	}
	s.page = ui.New(o)
	return s.page.Mount
}

// runPage feeds the page until ctx ends, which also ends its event streams
// (http.Server.Shutdown waits for handlers, and would wait for those for ever);
// the returned func waits until it has stopped.
func (s *Server) runPage(ctx context.Context) (wait func()) {
	if s.page == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.page.Run(ctx)
	}()
	return func() { <-done }
}
