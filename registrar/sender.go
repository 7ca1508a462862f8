package registrar

// A watch stream's handler goroutine only waits (service.go, watchStream): the
// receiving of its first request and all sending are done by the hub's senders
// (internal/hub), which run a watcher's Step when it may have something to do.

// schedule makes sure w is run once more after this call.
func (w *watcher) schedule() { w.r.hub.Schedule(&w.Member, w) }

// Finish hands the handler the error that ended w's stream, from its sender.
func (w *watcher) Finish(err error) { w.done <- err }

// Step opens w's stream if it is new and sends w what it is missing; it returns
// the error that ends the stream.
func (w *watcher) Step() error {
	if w.opening {
		w.opening = false
		if err := w.openStream(); err != nil {
			return err
		}
	}
	// Not before every message (the stream's context is a chain of gRPC's values
	// over a mutex): at the start, and again once something scheduled w meanwhile.
	if err := w.woken(); err != nil {
		return err
	}
	for {
		if w.Rescheduled() {
			if err := w.woken(); err != nil {
				return err
			}
		}
		msg := w.pending()
		if msg == nil {
			w.cursor.Store(w.next) // current: for Status (inspect.go)
			return nil
		}
		w.r.hub.BeginSend(&w.Member)
		err := w.stream.SendMsg(msg)
		w.r.hub.EndSend(&w.Member)
		if err != nil {
			return err
		}
		w.sent()
		w.cursor.Store(w.next)
	}
}
