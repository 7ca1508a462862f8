package main

// Registry backends register themselves by name when imported, like database/sql
// drivers; every command that takes --registry-backend can use any of them.
import (
	_ "github.com/switchboard-mesh/switchboard/registrar/client"
	_ "github.com/switchboard-mesh/switchboard/registry/cloudmap"
	_ "github.com/switchboard-mesh/switchboard/registry/dynamodb"
	_ "github.com/switchboard-mesh/switchboard/registry/etcd"
	_ "github.com/switchboard-mesh/switchboard/registry/jetstream"
	_ "github.com/switchboard-mesh/switchboard/registry/memory"
)
