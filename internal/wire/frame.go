package wire

import "google.golang.org/protobuf/encoding/protowire"

// Field numbers of the switchboard.node.v1 messages the data-plane node encodes
// and decodes by hand (dataplane/node's forwarding path and its client codec).
// The node keeps a forwarded message's bytes as it received them: it needs the
// numbers to read the few fields forwarding looks at and to rewrite the hop count
// and the segments.

// Field numbers of LinkFrame: the members of its oneof frame. The node decodes a
// batch by hand and the other frames with protobuf, after finding which member
// the frame carries.
const (
	FrameFieldBatch       protowire.Number = 1
	FrameFieldSubscribe   protowire.Number = 2
	FrameFieldUnsubscribe protowire.Number = 3
	FrameFieldAck         protowire.Number = 4
	FrameFieldRelink      protowire.Number = 5
	FrameFieldBatchAck    protowire.Number = 6
)

// Field numbers of Batch.
const (
	BatchFieldMessages protowire.Number = 1
	BatchFieldSeq      protowire.Number = 2
)

// Field numbers of Message.
const (
	MessageFieldName         protowire.Number = 1
	MessageFieldPayload      protowire.Number = 2
	MessageFieldBroadcast    protowire.Number = 3
	MessageFieldTTL          protowire.Number = 4
	MessageFieldOrigin       protowire.Number = 5
	MessageFieldSeq          protowire.Number = 6
	MessageFieldPublished    protowire.Number = 7 // published_unix_nano
	MessageFieldSegments     protowire.Number = 8
	MessageFieldReplyTo      protowire.Number = 9
	MessageFieldInReplyTo    protowire.Number = 10
	MessageFieldNoResponders protowire.Number = 11
)

// Field numbers of Name: its three components, in order, and its instance id.
const (
	NameFieldOrg       protowire.Number = 1
	NameFieldNamespace protowire.Number = 2
	NameFieldService   protowire.Number = 3
	NameFieldID        protowire.Number = 4
)

// Field numbers of SubscribeResponse, a delivery to a local subscriber.
const (
	DeliveryFieldID       protowire.Number = 1 // subscription_id
	DeliveryFieldMessages protowire.Number = 2
)

// Field numbers of PublishBatch and PublishRequest. A RequestBatch has its
// RequestRequests where PublishBatch has its messages, and a RequestRequest has
// the name and the payload where PublishRequest has them (the node decodes both
// with one decoder), with a timeout and an id of its own.
const (
	PublishBatchFieldMessages protowire.Number = 1
	PublishFieldName          protowire.Number = 1
	PublishFieldPayload       protowire.Number = 2
	PublishFieldBroadcast     protowire.Number = 3

	RequestFieldTimeout protowire.Number = 3 // timeout_ms
	RequestFieldID      protowire.Number = 4
)

// Field numbers of RespondBatch and RespondRequest.
const (
	RespondBatchFieldAnswers protowire.Number = 1
	RespondFieldReplyTo      protowire.Number = 1
	RespondFieldPayload      protowire.Number = 2
)

// Field numbers of RequestResponseBatch and RequestResponse: the answers to a
// RequestStream's requests.
const (
	AnswerBatchFieldResponses protowire.Number = 1
	AnswerFieldPayload        protowire.Number = 1
	AnswerFieldResponder      protowire.Number = 2
	AnswerFieldID             protowire.Number = 3
	AnswerFieldCode           protowire.Number = 4
	AnswerFieldError          protowire.Number = 5
)
