package wire

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/durationpb"

	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/internal/wirecheck"
)

// The registrar's hand-written encoder of events and listings, and the decoder of
// watch requests, agree with the .proto: every field number they use is the field
// they take it for. The event is written whole and the watch request decoded
// whole, so a field added to either fails here until the codec knows it.
func TestRegistrarFieldsMatchTheProto(t *testing.T) {
	wirecheck.Check(t, &registrarv1.EndpointEvent{}, map[protowire.Number]wirecheck.Field{
		EventFieldType:       {Name: "type", Kind: protoreflect.EnumKind},
		EventFieldEndpoint:   {Name: "endpoint", Kind: protoreflect.MessageKind},
		EventFieldVersion:    {Name: "version", Kind: protoreflect.StringKind},
		EventFieldEndpoints:  {Name: "endpoints", Kind: protoreflect.MessageKind},
		EventFieldResumed:    {Name: "resumed", Kind: protoreflect.BoolKind},
		EventFieldPersisted:  {Name: "persisted", Kind: protoreflect.StringKind},
		EventFieldScopeID:    {Name: "scope_id", Kind: protoreflect.Uint64Kind},
		EventFieldEvents:     {Name: "events", Kind: protoreflect.MessageKind},
		EventFieldCompressed: {Name: "compressed", Kind: protoreflect.BytesKind},
		EventFieldTrace:      {Name: "traceparent", Kind: protoreflect.StringKind},
	}, true)
	wirecheck.Check(t, &registrarv1.WatchEndpointsRequest{}, map[protowire.Number]wirecheck.Field{
		WatchFieldCluster:     {Name: "cluster_name", Kind: protoreflect.StringKind},
		WatchFieldNode:        {Name: "node_name", Kind: protoreflect.StringKind},
		WatchFieldLastVersion: {Name: "last_version", Kind: protoreflect.StringKind},
		WatchFieldServices:    {Name: "services", Kind: protoreflect.StringKind},
		WatchFieldScopeID:     {Name: "scope_id", Kind: protoreflect.Uint64Kind},
		WatchFieldAll:         {Name: "all_services", Kind: protoreflect.BoolKind},
		WatchFieldBatches:     {Name: "accept_batches", Kind: protoreflect.BoolKind},
		WatchFieldCompressed:  {Name: "accept_compressed", Kind: protoreflect.BoolKind},
		WatchFieldSession:     {Name: "session", Kind: protoreflect.StringKind},
	}, true)
	wirecheck.Check(t, &registrarv1.ListAllEndpointsResponse{}, map[protowire.Number]wirecheck.Field{
		ListFieldEndpoints: {Name: "endpoints", Kind: protoreflect.MessageKind},
		ListFieldVersion:   {Name: "version", Kind: protoreflect.StringKind},
	}, true)
}

// The decoder of endpoints (DecodeListing) agrees with the .proto, field by field,
// and knows every field of Endpoint, of its annotations' map entries and of its
// ttl: one added to the .proto fails here until the decoder reads it (it would
// otherwise be dropped without a word).
func TestEndpointFieldsMatchTheProto(t *testing.T) {
	wirecheck.Check(t, &registryv1.Endpoint{}, map[protowire.Number]wirecheck.Field{
		EndpointFieldCluster:     {Name: "cluster", Kind: protoreflect.StringKind},
		EndpointFieldService:     {Name: "service", Kind: protoreflect.StringKind},
		EndpointFieldProtocol:    {Name: "protocol", Kind: protoreflect.StringKind},
		EndpointFieldAddress:     {Name: "address", Kind: protoreflect.StringKind},
		EndpointFieldPort:        {Name: "port", Kind: protoreflect.Uint32Kind},
		EndpointFieldNode:        {Name: "node", Kind: protoreflect.StringKind},
		EndpointFieldPriority:    {Name: "priority", Kind: protoreflect.Uint32Kind},
		EndpointFieldWeight:      {Name: "weight", Kind: protoreflect.Uint32Kind},
		EndpointFieldAnnotations: {Name: "annotations", Kind: protoreflect.MessageKind},
		EndpointFieldTTL:         {Name: "ttl", Kind: protoreflect.MessageKind},
		EndpointFieldTTLNever:    {Name: "ttl_never", Kind: protoreflect.BoolKind},
		EndpointFieldInstanceID:  {Name: "instance_id", Kind: protoreflect.StringKind}, // also left out of compressed parts
		EndpointFieldRegion:      {Name: "region", Kind: protoreflect.StringKind},
		EndpointFieldZone:        {Name: "zone", Kind: protoreflect.StringKind},
		EndpointFieldHealth:      {Name: "health", Kind: protoreflect.EnumKind},
	}, true)
	entry := (&registryv1.Endpoint{}).ProtoReflect().Descriptor().Fields().ByNumber(EndpointFieldAnnotations).Message()
	wirecheck.Check(t, dynamicpb.NewMessage(entry), map[protowire.Number]wirecheck.Field{
		MapEntryFieldKey:   {Name: "key", Kind: protoreflect.StringKind},
		MapEntryFieldValue: {Name: "value", Kind: protoreflect.StringKind},
	}, true)
	wirecheck.Check(t, &durationpb.Duration{}, map[protowire.Number]wirecheck.Field{
		DurationFieldSeconds: {Name: "seconds", Kind: protoreflect.Int64Kind},
		DurationFieldNanos:   {Name: "nanos", Kind: protoreflect.Int32Kind},
	}, true)
}

// The data-plane node's forwarding path and client codec agree with the .proto,
// field by field. Message, Name, LinkFrame (whose last member the node finds) and
// the batches it decodes whole must list every field: one added to the .proto
// fails here until the codec knows whether to read it or pass it on.
func TestNodeFieldsMatchTheProto(t *testing.T) {
	wirecheck.Check(t, &nodev1.Message{}, map[protowire.Number]wirecheck.Field{
		MessageFieldName:         {Name: "name", Kind: protoreflect.MessageKind},
		MessageFieldPayload:      {Name: "payload", Kind: protoreflect.BytesKind},
		MessageFieldBroadcast:    {Name: "broadcast", Kind: protoreflect.BoolKind},
		MessageFieldTTL:          {Name: "ttl", Kind: protoreflect.Uint32Kind},
		MessageFieldOrigin:       {Name: "origin", Kind: protoreflect.StringKind},
		MessageFieldSeq:          {Name: "seq", Kind: protoreflect.Uint64Kind},
		MessageFieldPublished:    {Name: "published_unix_nano", Kind: protoreflect.Int64Kind},
		MessageFieldSegments:     {Name: "segments", Kind: protoreflect.StringKind},
		MessageFieldReplyTo:      {Name: "reply_to", Kind: protoreflect.StringKind},
		MessageFieldInReplyTo:    {Name: "in_reply_to", Kind: protoreflect.StringKind},
		MessageFieldNoResponders: {Name: "no_responders", Kind: protoreflect.BoolKind},
	}, true)
	wirecheck.Check(t, &nodev1.Name{}, map[protowire.Number]wirecheck.Field{
		NameFieldOrg:       {Name: "org", Kind: protoreflect.StringKind},
		NameFieldNamespace: {Name: "namespace", Kind: protoreflect.StringKind},
		NameFieldService:   {Name: "service", Kind: protoreflect.StringKind},
		NameFieldID:        {Name: "id", Kind: protoreflect.Uint64Kind},
	}, true)
	wirecheck.Check(t, &nodev1.LinkFrame{}, map[protowire.Number]wirecheck.Field{
		FrameFieldBatch:       {Name: "batch", Kind: protoreflect.MessageKind},
		FrameFieldSubscribe:   {Name: "subscribe", Kind: protoreflect.MessageKind},
		FrameFieldUnsubscribe: {Name: "unsubscribe", Kind: protoreflect.MessageKind},
		FrameFieldAck:         {Name: "ack", Kind: protoreflect.MessageKind},
		FrameFieldRelink:      {Name: "relink", Kind: protoreflect.MessageKind},
		FrameFieldBatchAck:    {Name: "batch_ack", Kind: protoreflect.MessageKind},
	}, true)
	wirecheck.Check(t, &nodev1.Batch{}, map[protowire.Number]wirecheck.Field{
		BatchFieldMessages: {Name: "messages", Kind: protoreflect.MessageKind},
		BatchFieldSeq:      {Name: "seq", Kind: protoreflect.Uint64Kind},
	}, true)
	wirecheck.Check(t, &nodev1.SubscribeResponse{}, map[protowire.Number]wirecheck.Field{
		DeliveryFieldID:       {Name: "subscription_id", Kind: protoreflect.Uint64Kind},
		DeliveryFieldMessages: {Name: "messages", Kind: protoreflect.MessageKind},
	}, true)
	wirecheck.Check(t, &nodev1.PublishBatch{}, map[protowire.Number]wirecheck.Field{
		PublishBatchFieldMessages: {Name: "messages", Kind: protoreflect.MessageKind},
	}, true)
	wirecheck.Check(t, &nodev1.PublishRequest{}, map[protowire.Number]wirecheck.Field{
		PublishFieldName:      {Name: "name", Kind: protoreflect.MessageKind},
		PublishFieldPayload:   {Name: "payload", Kind: protoreflect.BytesKind},
		PublishFieldBroadcast: {Name: "broadcast", Kind: protoreflect.BoolKind},
	}, true)
	// Requests ride the publish decoder, with two fields of their own.
	wirecheck.Check(t, &nodev1.RequestBatch{}, map[protowire.Number]wirecheck.Field{
		PublishBatchFieldMessages: {Name: "requests", Kind: protoreflect.MessageKind},
	}, true)
	wirecheck.Check(t, &nodev1.RequestRequest{}, map[protowire.Number]wirecheck.Field{
		PublishFieldName:    {Name: "name", Kind: protoreflect.MessageKind},
		PublishFieldPayload: {Name: "payload", Kind: protoreflect.BytesKind},
		RequestFieldTimeout: {Name: "timeout_ms", Kind: protoreflect.Uint32Kind},
		RequestFieldID:      {Name: "id", Kind: protoreflect.Uint64Kind},
	}, true)
	wirecheck.Check(t, &nodev1.RespondBatch{}, map[protowire.Number]wirecheck.Field{
		RespondBatchFieldAnswers: {Name: "answers", Kind: protoreflect.MessageKind},
	}, true)
	wirecheck.Check(t, &nodev1.RespondRequest{}, map[protowire.Number]wirecheck.Field{
		RespondFieldReplyTo: {Name: "reply_to", Kind: protoreflect.StringKind},
		RespondFieldPayload: {Name: "payload", Kind: protoreflect.BytesKind},
	}, true)
	wirecheck.Check(t, &nodev1.RequestResponseBatch{}, map[protowire.Number]wirecheck.Field{
		AnswerBatchFieldResponses: {Name: "responses", Kind: protoreflect.MessageKind},
	}, true)
	wirecheck.Check(t, &nodev1.RequestResponse{}, map[protowire.Number]wirecheck.Field{
		AnswerFieldPayload:   {Name: "payload", Kind: protoreflect.BytesKind},
		AnswerFieldResponder: {Name: "responder", Kind: protoreflect.StringKind},
		AnswerFieldID:        {Name: "id", Kind: protoreflect.Uint64Kind},
		AnswerFieldCode:      {Name: "code", Kind: protoreflect.Uint32Kind},
		AnswerFieldError:     {Name: "error", Kind: protoreflect.StringKind},
	}, true)
}
