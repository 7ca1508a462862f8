// Package aether serves Aether's registrar API (aether.registrar.v1.RegistrarService,
// gen/aether) beside Switchboard's own, on the registrar's gRPC port, over the same
// snapshot: an endpoint registered through either API is seen through both, so
// Aether's agents use Switchboard's registrar unchanged. docs/registrar.md,
// "Aether's registrar API", maps every call and field.
//
// It owns the translation only: Aether's service names to and from ours
// (names.go: "NS/NAME" is NAME__NS), Aether's messages to and from
// endpoint.Endpoint (mapping.go), and Aether's watch events from the registrar's
// own (translate.go).
// Storage, authorization, readiness and the watch machinery (history ring, resume
// tokens, slow-watcher resync) are the registrar's, reached through the Registrar
// interface, which package registrar implements (registrar/aether_hooks.go). So
// this package must not import package registrar (which imports it to register the
// service), nor any backend: it sees the registrar through Registrar only.
package aether
