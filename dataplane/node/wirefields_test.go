package node

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
	"github.com/switchboard-mesh/switchboard/internal/wirecheck"
)

// The forwarding path's hand-written codec agrees with the .proto, field by field.
// Message, Name and the batches it decodes whole must list every field: one added
// to the .proto fails here until the codec knows whether to read it or pass it on.
func TestWireFieldsMatchTheProto(t *testing.T) {
	type f = wirecheck.Field
	wirecheck.Check(t, &nodev1.Message{}, map[protowire.Number]wirecheck.Field{
		fMsgName:      f{Name: "name", Kind: protoreflect.MessageKind},
		fMsgPayload:   f{Name: "payload", Kind: protoreflect.BytesKind},
		fMsgBroadcast: f{Name: "broadcast", Kind: protoreflect.BoolKind},
		fMsgTTL:       f{Name: "ttl", Kind: protoreflect.Uint32Kind},
		fMsgOrigin:    f{Name: "origin", Kind: protoreflect.StringKind},
		fMsgSeq:       f{Name: "seq", Kind: protoreflect.Uint64Kind},
		fMsgPublished: f{Name: "published_unix_nano", Kind: protoreflect.Int64Kind},
		fMsgSegments:  f{Name: "segments", Kind: protoreflect.StringKind},
		fMsgReplyTo:   f{Name: "reply_to", Kind: protoreflect.StringKind},
		fMsgInReplyTo: f{Name: "in_reply_to", Kind: protoreflect.StringKind},
		fMsgNoResp:    f{Name: "no_responders", Kind: protoreflect.BoolKind},
	}, true)
	wirecheck.Check(t, &nodev1.Name{}, map[protowire.Number]wirecheck.Field{
		fNameOrg:       f{Name: "org", Kind: protoreflect.StringKind},
		fNameNamespace: f{Name: "namespace", Kind: protoreflect.StringKind},
		fNameService:   f{Name: "service", Kind: protoreflect.StringKind},
		fNameID:        f{Name: "id", Kind: protoreflect.Uint64Kind},
	}, true)
	wirecheck.Check(t, &nodev1.LinkFrame{}, map[protowire.Number]wirecheck.Field{
		fFrameBatch: f{Name: "batch", Kind: protoreflect.MessageKind}, // the other frames are decoded by protobuf
	}, false)
	wirecheck.Check(t, &nodev1.Batch{}, map[protowire.Number]wirecheck.Field{
		fBatchMessages: f{Name: "messages", Kind: protoreflect.MessageKind},
		fBatchSeq:      f{Name: "seq", Kind: protoreflect.Uint64Kind},
	}, true)
	wirecheck.Check(t, &nodev1.SubscribeResponse{}, map[protowire.Number]wirecheck.Field{
		1:                 f{Name: "subscription_id", Kind: protoreflect.Uint64Kind},
		fDeliveryMessages: f{Name: "messages", Kind: protoreflect.MessageKind},
	}, true)
	wirecheck.Check(t, &nodev1.PublishBatch{}, map[protowire.Number]wirecheck.Field{
		fPubBatchMessages: f{Name: "messages", Kind: protoreflect.MessageKind},
	}, true)
	wirecheck.Check(t, &nodev1.PublishRequest{}, map[protowire.Number]wirecheck.Field{
		fPubName:      f{Name: "name", Kind: protoreflect.MessageKind},
		fPubPayload:   f{Name: "payload", Kind: protoreflect.BytesKind},
		fPubBroadcast: f{Name: "broadcast", Kind: protoreflect.BoolKind},
	}, true)
	// Requests ride the publish decoder, with two fields of their own.
	wirecheck.Check(t, &nodev1.RequestBatch{}, map[protowire.Number]wirecheck.Field{
		fPubBatchMessages: f{Name: "requests", Kind: protoreflect.MessageKind},
	}, true)
	wirecheck.Check(t, &nodev1.RequestRequest{}, map[protowire.Number]wirecheck.Field{
		fPubName:    f{Name: "name", Kind: protoreflect.MessageKind},
		fPubPayload: f{Name: "payload", Kind: protoreflect.BytesKind},
		fReqTimeout: f{Name: "timeout_ms", Kind: protoreflect.Uint32Kind},
		fReqID:      f{Name: "id", Kind: protoreflect.Uint64Kind},
	}, true)
	wirecheck.Check(t, &nodev1.RespondBatch{}, map[protowire.Number]wirecheck.Field{
		fRespBatchAnswers: f{Name: "answers", Kind: protoreflect.MessageKind},
	}, true)
	wirecheck.Check(t, &nodev1.RespondRequest{}, map[protowire.Number]wirecheck.Field{
		fRespReplyTo: f{Name: "reply_to", Kind: protoreflect.StringKind},
		fRespPayload: f{Name: "payload", Kind: protoreflect.BytesKind},
	}, true)
	wirecheck.Check(t, &nodev1.RequestResponseBatch{}, map[protowire.Number]wirecheck.Field{
		fAnsBatchResponses: f{Name: "responses", Kind: protoreflect.MessageKind},
	}, true)
	wirecheck.Check(t, &nodev1.RequestResponse{}, map[protowire.Number]wirecheck.Field{
		fAnsPayload:   f{Name: "payload", Kind: protoreflect.BytesKind},
		fAnsResponder: f{Name: "responder", Kind: protoreflect.StringKind},
		fAnsID:        f{Name: "id", Kind: protoreflect.Uint64Kind},
		fAnsCode:      f{Name: "code", Kind: protoreflect.Uint32Kind},
		fAnsError:     f{Name: "error", Kind: protoreflect.StringKind},
	}, true)
}
