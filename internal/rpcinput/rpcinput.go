// Package rpcinput makes requests that cannot be decoded bad input, as any other:
// gRPC reports a request its codec cannot decode as Internal, a server fault, with
// a message that does not say which field was wrong, and it sends that status
// itself before the handler can change it.
//
// So a server's codec decodes requests with Unmarshal, which lets a request whose
// only fault is invalid UTF-8 in a string field through, noting the fault (with
// the field's path) against the message; the handlers of a service registered
// through Service look the message up right after decoding and answer
// InvalidArgument naming the field. Both halves are needed: a codec using
// Unmarshal on a server whose services are not wrapped by Service would hand
// handlers requests with invalid strings.
package rpcinput

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Service returns a copy of desc whose handlers report a request that fails to
// decode as InvalidArgument instead of Internal.
func Service(desc *grpc.ServiceDesc) *grpc.ServiceDesc {
	out := *desc
	out.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		h := m.Handler
		m.Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			return h(srv, ctx, func(v any) error { return checked(v, dec(v)) }, ic)
		}
		out.Methods[i] = m
	}
	out.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, s := range desc.Streams {
		h := s.Handler
		s.Handler = func(srv any, stream grpc.ServerStream) error {
			return h(srv, recvChecked{stream})
		}
		out.Streams[i] = s
	}
	return &out
}

type recvChecked struct{ grpc.ServerStream }

func (r recvChecked) RecvMsg(m any) error { return checked(m, r.ServerStream.RecvMsg(m)) }

// faults holds the decode faults Unmarshal noted, by message, until the handler
// that decoded the message collects them (at once, on the same goroutine).
var faults sync.Map // proto.Message → string

// checked turns a fault noted against v into InvalidArgument.
func checked(v any, err error) error {
	if err != nil {
		return err
	}
	if f, ok := faults.LoadAndDelete(v); ok {
		return status.Error(codes.InvalidArgument, f.(string))
	}
	return nil
}

// Unmarshal decodes data into v with base. A message whose only fault is invalid
// UTF-8 in a string field is decoded anyway and the fault noted against it, for
// Service's handlers to report; every other failure is returned.
func Unmarshal(base encoding.CodecV2, data mem.BufferSlice, v any) error {
	err := base.Unmarshal(data, v)
	m, ok := v.(proto.Message)
	if err == nil || !ok || !strings.Contains(err.Error(), "UTF-8") {
		return err
	}
	raw := data.Materialize()
	path, found := InvalidUTF8Field(raw, m.ProtoReflect().Descriptor())
	if !found {
		return err
	}
	proto.Reset(m) // the handler never reads it, but leave nothing half-decoded
	faults.Store(v, path+": invalid UTF-8")
	return nil
}

// InvalidUTF8Field finds the first string field of b, a message of type md, that
// holds invalid UTF-8, and returns its path (endpoints[0].service,
// annotations["k"]). Malformed input stops the search.
func InvalidUTF8Field(b []byte, md protoreflect.MessageDescriptor) (string, bool) {
	return walk(b, md, "")
}

func walk(b []byte, md protoreflect.MessageDescriptor, prefix string) (string, bool) {
	counts := map[protowire.Number]int{}
	var path string
	found := false
	eachBytesField(b, func(num protowire.Number, v []byte) bool {
		fd := md.Fields().ByNumber(num)
		if fd == nil {
			return true
		}
		name := prefix + string(fd.Name())
		if fd.IsList() {
			name = fmt.Sprintf("%s[%d]", name, counts[num])
			counts[num]++
		}
		path, found = field(v, fd, name)
		return !found
	})
	return path, found
}

// eachBytesField calls fn with the number and value of every length-delimited field
// of b, in order, until fn returns false; it skips other fields and stops at
// malformed input.
func eachBytesField(b []byte, fn func(protowire.Number, []byte) bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return
		}
		b = b[n:]
		if !fn(num, v) {
			return
		}
	}
}

// field checks one length-delimited value of fd.
func field(v []byte, fd protoreflect.FieldDescriptor, name string) (string, bool) {
	switch {
	case fd.IsMap():
		return mapEntry(v, fd, name)
	case fd.Kind() == protoreflect.StringKind:
		return name, !utf8.Valid(v)
	case fd.Kind() == protoreflect.MessageKind:
		return walk(v, fd.Message(), name+".")
	}
	return "", false
}

// mapEntry checks one map entry: its key names it in the path when it is valid.
func mapEntry(v []byte, fd protoreflect.FieldDescriptor, name string) (string, bool) {
	entry := fd.Message()
	keyFD, valFD := entry.Fields().ByNumber(1), entry.Fields().ByNumber(2)
	var key, val []byte
	var hasVal bool
	eachBytesField(v, func(num protowire.Number, b []byte) bool {
		switch num {
		case 1:
			key = b
		case 2:
			val, hasVal = b, true
		}
		return true
	})
	if keyFD.Kind() == protoreflect.StringKind && !utf8.Valid(key) {
		return name + " key", true
	}
	if !hasVal {
		return "", false
	}
	return field(val, valFD, fmt.Sprintf("%s[%q]", name, key))
}
