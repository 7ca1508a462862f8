package leader

// DropWatchEvents makes e's observer lose the next n responses of its watch, as a
// watch stream that missed an event would.
func DropWatchEvents(e *Elector, n int32) { e.dropWatch.Store(n) }
