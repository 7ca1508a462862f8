// Package wirecheck holds hand-written protobuf codecs to their .proto files: a
// test lists the field numbers a codec uses, with the names and kinds it expects,
// and wirecheck compares them with the generated descriptors. A .proto change the
// codec does not follow (a field renumbered, retyped, or added where the codec
// must know every field) fails that test instead of going unseen on the wire.
//
// It is for tests only, and imports nothing of Switchboard's.
package wirecheck

import (
	"sort"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Field is what a codec assumes of one field: its name and its kind.
type Field struct {
	Name string
	Kind protoreflect.Kind
}

// Check fails t for every field of fields that msg's descriptor does not have at
// that number with that name and kind. With complete, it also fails for every
// field of the descriptor that fields leaves out: a codec that decodes the whole
// message must be told of a new field.
func Check(t testing.TB, msg proto.Message, fields map[protowire.Number]Field, complete bool) {
	t.Helper()
	md := msg.ProtoReflect().Descriptor()
	for num, want := range fields {
		fd := md.Fields().ByNumber(num)
		switch {
		case fd == nil:
			t.Errorf("%s: the codec uses field %d (%s), which the .proto does not have", md.FullName(), num, want.Name)
		case string(fd.Name()) != want.Name || fd.Kind() != want.Kind:
			t.Errorf("%s: field %d is %s %s in the .proto, the codec takes it for %s %s", md.FullName(), num, fd.Kind(), fd.Name(), want.Kind, want.Name)
		}
	}
	if !complete {
		return
	}
	var missing []string
	for i := range md.Fields().Len() {
		fd := md.Fields().Get(i)
		if _, ok := fields[fd.Number()]; !ok {
			missing = append(missing, string(fd.Name()))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%s: fields %v are in the .proto but unknown to the codec", md.FullName(), missing)
	}
}
