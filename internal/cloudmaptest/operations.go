package cloudmaptest

import (
	"slices"
	"time"
)

// operation is one asynchronous change. Its effect runs when it succeeds.
type operation struct {
	id       string
	seq      uint64 // submission order
	kind     string // REGISTER_INSTANCE, DEREGISTER_INSTANCE, CREATE_NAMESPACE
	status   string // SUBMITTED, PENDING, SUCCESS, FAIL
	targets  map[string]string
	instance string // instance id for instance operations, "" otherwise
	polls    int    // unfinished answers still to give
	effect   func()
	errCode  string
	errMsg   string
	created  time.Time
	updated  time.Time
}

// submit records a new operation; callers hold s.mu.
func (s *Server) submit(kind, instance string, targets map[string]string, effect func()) *operation {
	now := time.Now()
	op := &operation{
		id: s.nextID("op-"), kind: kind, status: "SUBMITTED", targets: targets,
		instance: instance, polls: s.opts.PendingPolls, effect: effect, created: now, updated: now,
	}
	op.seq = s.seq
	s.ops[op.id] = op
	s.open[instance] = append(s.open[instance], op)
	return op
}

// advance moves an operation one step on a poll: the first unfinished answer is
// SUBMITTED, later ones PENDING. Operations on one instance finish in submission
// order: finishing one first finishes the earlier ones still open.
func (s *Server) advance(op *operation) {
	switch {
	case op.done():
		return
	case s.held[op.instance] || op.polls > 0:
		if op.polls < s.opts.PendingPolls || s.held[op.instance] {
			op.status = "PENDING"
		}
		op.polls = max(op.polls-1, 0)
		op.updated = time.Now()
		return
	}
	// finish edits s.open, so walk a copy.
	for _, earlier := range slices.Clone(s.open[op.instance]) {
		if earlier.seq >= op.seq {
			break
		}
		s.finish(earlier)
	}
	s.finish(op)
}

// finish ends an operation: FAIL if one was requested for its instance, else the
// effect runs and it succeeds.
func (s *Server) finish(op *operation) {
	op.updated = time.Now()
	s.open[op.instance] = slices.DeleteFunc(s.open[op.instance], func(o *operation) bool { return o == op })
	if len(s.open[op.instance]) == 0 {
		delete(s.open, op.instance)
	}
	if f, ok := s.failNext[op.instance]; ok && op.instance != "" {
		delete(s.failNext, op.instance)
		op.status, op.errCode, op.errMsg = "FAIL", f.code, f.message
		return
	}
	op.effect()
	op.status = "SUCCESS"
}

func (op *operation) done() bool { return op.status == "SUCCESS" || op.status == "FAIL" }

// pendingRegister reports whether a registration of the instance is still open, so a
// deregistration racing it is accepted as the real service would.
func (s *Server) pendingRegister(serviceID, instance string) bool {
	for _, op := range s.open[instance] {
		if op.kind == "REGISTER_INSTANCE" && op.targets["SERVICE"] == serviceID {
			return true
		}
	}
	return false
}

type operationJSON struct {
	Id           string
	Type         string
	Status       string
	ErrorCode    string `json:",omitempty"`
	ErrorMessage string `json:",omitempty"`
	CreateDate   float64
	UpdateDate   float64
	Targets      map[string]string
}

func (s *Server) getOperation(body []byte) (any, error) {
	var in struct{ OperationId string }
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	op, ok := s.ops[in.OperationId]
	if !ok {
		return nil, notFound("OperationNotFound", "operation %q not found", in.OperationId)
	}
	s.advance(op)
	return map[string]any{"Operation": operationJSON{
		Id: op.id, Type: op.kind, Status: op.status, ErrorCode: op.errCode, ErrorMessage: op.errMsg,
		CreateDate: epoch(op.created), UpdateDate: epoch(op.updated), Targets: op.targets,
	}}, nil
}

// operationOutput is the answer of every asynchronous call.
func operationOutput(op *operation) any { return map[string]string{"OperationId": op.id} }
