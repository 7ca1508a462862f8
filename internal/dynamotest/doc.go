// Package dynamotest serves github.com/truora/minidyn over HTTP on 127.0.0.1 so tests
// can drive the real aws-sdk-go-v2 DynamoDB client against it (docs/development.md,
// "Real servers in tests").
//
// The wrapper fills the gaps of minidyn that Switchboard's DynamoDB backend meets:
//
//   - it serialises table administration (CreateTable, DescribeTable, …) against data
//     operations, because minidyn's CreateTable writes its table map without a lock;
//   - it answers UpdateTimeToLive and DescribeTimeToLive, which minidyn does not serve,
//     and records the TTL attribute so tests can check it was enabled;
//   - it enforces DynamoDB's limit of 100 items per TransactWriteItems, which minidyn
//     does not;
//   - it sends the X-Amz-Crc32 header DynamoDB sends, without which the SDK logs a
//     checksum warning for every response;
//
// and adds what tests need to observe and disturb the traffic: per-operation request
// counts (to prove a filter was served by Query, not Scan), injected error responses
// (throttling, cancelled transactions) and table statuses for DescribeTable. Items are
// never expired by minidyn, which is how tests see DynamoDB's lazy TTL deletion.
package dynamotest
