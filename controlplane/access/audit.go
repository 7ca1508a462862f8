package access

import (
	"context"
	"encoding/json"
	"path"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// change is what a mutating handler reports about the object it changed.
type change struct {
	before, after any
	set           bool
}

type changeKey struct{}

// RecordChange lets a mutating handler put the changed object, as it was before and
// after, in the call's audit line. nil means "absent". Outside an audited call it
// does nothing.
func RecordChange(ctx context.Context, before, after any) {
	if ch, ok := ctx.Value(changeKey{}).(*change); ok {
		ch.before, ch.after, ch.set = before, after, true
	}
}

// Audited reports whether ctx belongs to an audited call, so a handler can skip
// reading the before and after states when nobody records them.
func Audited(ctx context.Context) bool {
	_, ok := ctx.Value(changeKey{}).(*change)
	return ok
}

// auditLog writes the one line a successful mutation leaves. The request is logged
// whole but for its secrets (a group's registration secret), which are redacted.
func (a *Authorizer) auditLog(method string, c Caller, req, resp any, ch *change) {
	attrs := []any{
		"who", c.Who, "via", c.Via, "role", c.Role.String(), "peer", c.Peer,
		"method", path.Base(method), "request", compact(redacted(req)),
	}
	if ch.set {
		attrs = append(attrs, "before", compact(ch.before), "after", compact(ch.after))
	}
	if m, ok := resp.(interface{ GetMessage() string }); ok {
		attrs = append(attrs, "result", m.GetMessage())
	}
	a.audit.Info("northbound mutation", attrs...)
}

// secretField names the fields whose value an audit line never shows.
const secretField = "secret"

// redacted returns a copy of a request with every non-empty string field named
// secretField, at any depth, replaced by "[redacted]".
func redacted(v any) any {
	m, ok := v.(proto.Message)
	if !ok || !m.ProtoReflect().IsValid() {
		return v
	}
	c := proto.Clone(m)
	redact(c.ProtoReflect())
	return c
}

func redact(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Name() == secretField && fd.Kind() == protoreflect.StringKind && !fd.IsList() && !fd.IsMap():
			m.Set(fd, protoreflect.ValueOfString("[redacted]"))
		case fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap():
			redact(v.Message())
		case fd.Kind() == protoreflect.MessageKind && fd.IsList():
			for i := range v.List().Len() {
				redact(v.List().Get(i).Message())
			}
		}
		return true
	})
}

// compact renders a value as one line of JSON ("null" when absent), so text and
// JSON logs carry the same thing.
func compact(v any) string {
	if v == nil {
		return "null"
	}
	if m, ok := v.(proto.Message); ok {
		if !m.ProtoReflect().IsValid() {
			return "null"
		}
		if b, err := protojson.Marshal(m); err == nil {
			return string(b)
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "unprintable"
	}
	return string(b)
}
