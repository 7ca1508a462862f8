// Package cloudmaptest serves an in-process fake of the AWS Cloud Map
// (servicediscovery) API for tests: the AWS JSON 1.1 protocol, with operations named
// by the X-Amz-Target header Route53AutoNaming_v20170314.<Operation>, on an httptest
// server bound to 127.0.0.1. Tests drive it with the real aws-sdk-go-v2 client.
//
// Only the operations the registry/cloudmap backend uses are implemented:
// CreateHttpNamespace, GetNamespace, ListNamespaces, CreateService, ListServices,
// RegisterInstance, DeregisterInstance, GetInstance, ListInstances and GetOperation.
// Anything else is answered with UnknownOperationException.
//
// What it models from the real service, because the backend must cope with it:
//   - RegisterInstance, DeregisterInstance and CreateHttpNamespace are asynchronous.
//     They return an operation id; GetOperation reports SUBMITTED, then PENDING, then
//     SUCCESS or FAIL (Options.PendingPolls sets how many polls stay unfinished). The
//     effect becomes visible only when the operation succeeds, and operations on one
//     instance take effect in the order they were submitted.
//   - List operations page with NextToken; ListServices and ListNamespaces read a page
//     and then filter it, so a page can be empty while more results follow.
//   - Input limits: instance ids, service names, attribute key/value lengths and the
//     5,000-character total of an instance's attributes are rejected with InvalidInput.
//   - Requests must be SigV4-signed for the servicediscovery signing name, so only a
//     real SDK client (or something equally careful) gets through.
//
// Test knobs: FailNext makes the next operation on an instance end in FAIL, Hold keeps
// them pending, Throttle answers the next requests with ThrottlingException, and Calls
// counts requests per operation.
//
// See registrar.md ("Registry Backend") in the shared specs for why Cloud Map is a backend.
package cloudmaptest
