package leastprivilege_test

// natsPermissions is the permission block of docs/operations.md, "Least-privilege
// NATS and etcd credentials", verbatim (TestDocsShowTheTestedGrants checks it): the
// nats-server configuration variables, one per role, for the default stream
// REGISTRATION and subject prefix switchboard.registration.v1.
const natsPermissions = `# switchboard registry init: read, create and update the stream; nothing else.
SB_ADMIN = {
  publish = {
    allow = [
      "$JS.API.STREAM.INFO.REGISTRATION"
      "$JS.API.STREAM.CREATE.REGISTRATION"
      "$JS.API.STREAM.UPDATE.REGISTRATION"
    ]
  }
  subscribe = { allow = ["_INBOX.>"] }
}

# Lookups and watches: switchboard registry lookup/watch, and any reader.
SB_READER = {
  publish = {
    allow = [
      "$JS.API.STREAM.INFO.REGISTRATION"
      "$JS.API.CONSUMER.CREATE.REGISTRATION.>"
      "$JS.API.CONSUMER.INFO.REGISTRATION.*"
      "$JS.API.CONSUMER.DELETE.REGISTRATION.*"
      "$JS.FC.REGISTRATION.>"
      "$JS.API.DIRECT.GET.REGISTRATION"
    ]
  }
  subscribe = { allow = ["_INBOX.>"] }
}

# Registrars and agents: everything a reader does, plus writing entries and
# reading one subject's last message (an unregister sizes its removal from it).
SB_WRITER = {
  publish = {
    allow = [
      "switchboard.registration.v1.>"
      "$JS.API.STREAM.MSG.GET.REGISTRATION"
      "$JS.API.STREAM.INFO.REGISTRATION"
      "$JS.API.CONSUMER.CREATE.REGISTRATION.>"
      "$JS.API.CONSUMER.INFO.REGISTRATION.*"
      "$JS.API.CONSUMER.DELETE.REGISTRATION.*"
      "$JS.FC.REGISTRATION.>"
      "$JS.API.DIRECT.GET.REGISTRATION"
    ]
  }
  subscribe = { allow = ["_INBOX.>"] }
}

# A writer confined to one cluster's entries (here: prod).
SB_WRITER_PROD = {
  publish = {
    allow = [
      "switchboard.registration.v1.prod.>"
      "$JS.API.STREAM.MSG.GET.REGISTRATION"
      "$JS.API.STREAM.INFO.REGISTRATION"
      "$JS.API.CONSUMER.CREATE.REGISTRATION.>"
      "$JS.API.CONSUMER.INFO.REGISTRATION.*"
      "$JS.API.CONSUMER.DELETE.REGISTRATION.*"
      "$JS.FC.REGISTRATION.>"
      "$JS.API.DIRECT.GET.REGISTRATION"
    ]
  }
  subscribe = { allow = ["_INBOX.>"] }
}

# The best-effort nats backend: plain publishes, nothing to read.
SB_PUBLISHER = {
  publish = { allow = ["switchboard.registration.v1.>"] }
  subscribe = { deny = [">"] }
}
`

// natsAccounts is the account block of the documentation; the tests add their own
// unrestricted user to it (natsTestRoot) to check from outside what the roles did.
const natsAccounts = `accounts {
  SWITCHBOARD {
    jetstream: enabled
    users = [
      { user: "sb-admin",     password: $SB_ADMIN_PASSWORD,     permissions: $SB_ADMIN }
      { user: "sb-reader",    password: $SB_READER_PASSWORD,    permissions: $SB_READER }
      { user: "sb-writer",    password: $SB_WRITER_PASSWORD,    permissions: $SB_WRITER }
      { user: "sb-prod",      password: $SB_PROD_PASSWORD,      permissions: $SB_WRITER_PROD }
      { user: "sb-publisher", password: $SB_PUBLISHER_PASSWORD, permissions: $SB_PUBLISHER }
%s    ]
  }
}
`
