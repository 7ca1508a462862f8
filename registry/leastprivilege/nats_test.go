package leastprivilege_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
	sbjs "github.com/switchboard-mesh/switchboard/registry/jetstream"
	"github.com/switchboard-mesh/switchboard/registry/registrytest"
)

const (
	stream       = sbjs.DefaultStream
	prefix       = sbjs.DefaultPrefix
	natsTestRoot = "sb-test-root"
)

// natsServer is an embedded nats-server whose users are those of natsPermissions and
// natsAccounts, plus natsTestRoot and any variants a test asks for.
type natsServer struct {
	srv       *server.Server
	addr      string
	passwords map[string]string
}

// natsVariant is an extra user: the permissions of base with one grant removed.
type natsVariant struct {
	user, base, drop string
}

func startNATS(t *testing.T, variants ...natsVariant) *natsServer {
	t.Helper()
	s := &natsServer{passwords: map[string]string{natsTestRoot: "root-secret"}}
	var vars strings.Builder
	for _, u := range []struct{ user, v string }{
		{"sb-admin", "SB_ADMIN_PASSWORD"}, {"sb-reader", "SB_READER_PASSWORD"}, {"sb-writer", "SB_WRITER_PASSWORD"},
		{"sb-prod", "SB_PROD_PASSWORD"}, {"sb-publisher", "SB_PUBLISHER_PASSWORD"},
	} {
		s.passwords[u.user] = u.user + "-secret"
		fmt.Fprintf(&vars, "%s = %q\n", u.v, s.passwords[u.user])
	}
	root := fmt.Sprintf("      { user: %q, password: %q }\n", natsTestRoot, s.passwords[natsTestRoot])
	opts := &server.Options{}
	if err := opts.ProcessConfigString(vars.String() + natsPermissions + fmt.Sprintf(natsAccounts, root)); err != nil {
		t.Fatalf("the documented NATS configuration does not load: %v", err)
	}
	for _, v := range variants {
		base := findUser(t, opts, v.base)
		perms := clonePerms(base.Permissions)
		grants := &perms.Publish.Allow
		if slices.Contains(perms.Subscribe.Allow, v.drop) { // only _INBOX.> is there
			grants = &perms.Subscribe.Allow
		}
		if !slices.Contains(*grants, v.drop) {
			t.Fatalf("user %s has no grant %q", v.base, v.drop)
		}
		*grants = slices.DeleteFunc(*grants, func(s string) bool { return s == v.drop })
		if len(*grants) == 0 { // an empty allow list allows everything
			perms.Subscribe.Deny = []string{">"}
		}
		opts.Users = append(opts.Users, &server.User{Username: v.user, Password: v.user + "-secret", Permissions: perms, Account: base.Account})
		s.passwords[v.user] = v.user + "-secret"
	}
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.JetStream, opts.StoreDir = true, t.TempDir()
	opts.NoSigs, opts.NoLog = true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready within 10s")
	}
	s.srv = ns
	s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ns.Addr().(*net.TCPAddr).Port))
	return s
}

func findUser(t *testing.T, o *server.Options, name string) *server.User {
	t.Helper()
	for _, u := range o.Users {
		if u.Username == name {
			return u
		}
	}
	t.Fatalf("no user %s in the configuration", name)
	return nil
}

func clonePerms(p *server.Permissions) *server.Permissions {
	c := &server.Permissions{Publish: &server.SubjectPermission{}, Subscribe: &server.SubjectPermission{}}
	if p.Publish != nil {
		c.Publish.Allow = slices.Clone(p.Publish.Allow)
		c.Publish.Deny = slices.Clone(p.Publish.Deny)
	}
	if p.Subscribe != nil {
		c.Subscribe.Allow = slices.Clone(p.Subscribe.Allow)
		c.Subscribe.Deny = slices.Clone(p.Subscribe.Deny)
	}
	return c
}

// url is the nats:// URL that logs in as user: how the jetstream and nats backends
// take a user name and password (there is no separate flag for them).
func (s *natsServer) url(user string) string {
	return (&url.URL{Scheme: "nats", User: url.UserPassword(user, s.passwords[user]), Host: s.addr}).String()
}

// params are the backend parameters of a command run as user.
func (s *natsServer) params(user string, extra ...string) map[string]string {
	p := map[string]string{sbjs.ParamURL: s.url(user), sbjs.ParamCreateStream: "false", sbjs.ParamMarkerTTL: "1s"}
	for i := 0; i+1 < len(extra); i += 2 {
		p[extra[i]] = extra[i+1]
	}
	return p
}

func (s *natsServer) open(t *testing.T, user string, extra ...string) registry.Registry {
	t.Helper()
	r, err := registry.Open(testCtx(t, 15*time.Second), "jetstream", s.params(user, extra...), nil)
	if err != nil {
		t.Fatalf("open jetstream as %s: %v", user, err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// initStream runs `switchboard registry init` as the administrator.
func (s *natsServer) initStream(t *testing.T, extra ...string) {
	t.Helper()
	if err := registry.Init(testCtx(t, 15*time.Second), "jetstream", s.params("sb-admin", extra...), nil); err != nil {
		t.Fatalf("registry init as sb-admin: %v", err)
	}
}

// conn is a raw connection as user that records the permission violations the server
// reports to it.
type conn struct {
	nc         *nats.Conn
	js         jetstream.JetStream
	mu         sync.Mutex
	violations []string
}

func (s *natsServer) connect(t *testing.T, user string) *conn {
	t.Helper()
	c := &conn{}
	nc, err := nats.Connect(s.url(user), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			c.mu.Lock()
			c.violations = append(c.violations, err.Error())
			c.mu.Unlock()
		}
	}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	c.nc = nc
	c.js, err = jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// refused waits for the server to report that this connection may not publish to
// (or subscribe to) subject.
func (c *conn) refused(t *testing.T, subject string) {
	t.Helper()
	want := strconv.Quote(subject)
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		found := slices.ContainsFunc(c.violations, func(v string) bool { return strings.Contains(v, want) })
		all := slices.Clone(c.violations)
		c.mu.Unlock()
		if found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no permissions violation for %s reported; got %q", want, all)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// root is the unrestricted test user, for checking what the roles did.
func (s *natsServer) root(t *testing.T) *conn { return s.connect(t, natsTestRoot) }

func (c *conn) streamInfo(t *testing.T) *jetstream.StreamInfo {
	t.Helper()
	st, err := c.js.Stream(testCtx(t, 10*time.Second), stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := st.Info(testCtx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// purge empties the stream. It returns its error rather than failing the test: the
// conformance suite calls it from its own subtests.
func (c *conn) purge() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.js.Stream(ctx, stream)
	if err == nil {
		err = st.Purge(ctx)
	}
	if err != nil {
		return fmt.Errorf("purge %s: %w", stream, err)
	}
	return nil
}

// TestNATSAdministrator: sb-admin runs `registry init`, which creates the stream and
// later changes its settings; it can do nothing else, and no other role can init.
func TestNATSAdministrator(t *testing.T) {
	s := startNATS(t)
	root := s.root(t)

	// Readers and writers cannot create the stream, even when their open is allowed
	// to try (the create-stream parameter defaults to true).
	for _, user := range []string{"sb-writer", "sb-reader"} {
		r, err := registry.Open(shortCtx(t), "jetstream", s.params(user, sbjs.ParamCreateStream, "true"), nil)
		if err == nil {
			_ = r.Close()
			t.Fatalf("%s opened (and so created) the stream", user)
		}
		c := s.connect(t, user)
		if _, err := c.js.CreateStream(shortCtx(t), jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ".>"}}); err == nil {
			t.Fatalf("%s created the stream", user)
		}
		c.refused(t, "$JS.API.STREAM.CREATE."+stream)
	}
	if _, err := root.js.Stream(testCtx(t, 10*time.Second), stream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("stream after the refused creates: %v, want not found", err)
	}

	s.initStream(t, sbjs.ParamMaxAge, "1h")
	if got := root.streamInfo(t).Config.MaxAge; got != time.Hour {
		t.Fatalf("max age after init = %s, want 1h", got)
	}
	s.initStream(t, sbjs.ParamMaxAge, "2h") // an update of an existing stream
	if got := root.streamInfo(t).Config.MaxAge; got != 2*time.Hour {
		t.Fatalf("max age after the second init = %s, want 2h", got)
	}

	// Neither a writer nor a reader can change the stream.
	for _, user := range []string{"sb-writer", "sb-reader"} {
		err := registry.Init(shortCtx(t), "jetstream", s.params(user, sbjs.ParamMaxAge, "3h"), nil)
		if err == nil {
			t.Fatalf("registry init as %s succeeded", user)
		}
		if !strings.Contains(err.Error(), "Permissions Violation for Publish to \"$JS.API.STREAM.UPDATE."+stream) {
			t.Errorf("registry init as %s: %v, want an error naming the refused stream update", user, err)
		}
	}
	if got := root.streamInfo(t).Config.MaxAge; got != 2*time.Hour {
		t.Fatalf("max age after the refused inits = %s, want 2h", got)
	}

	// The administrator can neither write entries, nor read them, nor delete or purge
	// the stream.
	admin := s.connect(t, "sb-admin")
	if err := admin.nc.Publish(prefix+".prod.http.web.10_0_0_1.x", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	admin.refused(t, prefix+".prod.http.web.10_0_0_1.x")
	if err := admin.js.DeleteStream(shortCtx(t), stream); err == nil {
		t.Fatal("sb-admin deleted the stream")
	}
	admin.refused(t, "$JS.API.STREAM.DELETE."+stream)
	ar, err := registry.Open(shortCtx(t), "jetstream", s.params("sb-admin"), nil)
	if err != nil {
		t.Fatalf("sb-admin may read the stream's configuration: %v", err)
	}
	defer ar.Close()
	if _, err := ar.List(shortCtx(t), endpoint.Filter{}); err == nil {
		t.Fatal("sb-admin listed the entries")
	}
	if root.streamInfo(t).State.Msgs != 0 {
		t.Fatal("a refused publish reached the stream")
	}
}

// TestNATSWriter: sb-writer does everything a registrar or agent does (register with
// and without TTL, list with both lookups, watch additions, unregisters and expiries)
// and nothing outside it.
func TestNATSWriter(t *testing.T) {
	s := startNATS(t)
	s.initStream(t)
	root := s.root(t)
	w := s.open(t, "sb-writer")
	direct := s.open(t, "sb-writer", sbjs.ParamLookup, sbjs.LookupDirect)

	a := ep("prod", "web", "10.0.0.1", 80)
	b := withTTL(ep("staging", "web", "10.0.0.2", 80), time.Hour)
	c := ep("prod", "api", "10.0.0.3", 81)
	c.TTL = endpoint.Never
	mustApply(t, w, registry.Register(a), registry.Register(b), registry.Register(c))
	for _, r := range []registry.Registry{w, direct} {
		expectList(t, r, endpoint.Filter{}, a, b, c)
		expectList(t, r, endpoint.Filter{Service: "web"}, a, b)
	}

	ch := watch(t, w, endpoint.Filter{Service: "web"})
	expectSynced(t, ch, a, b)
	mustApply(t, w, registry.Unregister(b))
	expectEvent(t, ch, 10*time.Second, registry.Removed, b)
	short := withTTL(ep("prod", "web", "10.0.0.4", 80), time.Second)
	mustApply(t, w, registry.Register(short))
	expectEvent(t, ch, 10*time.Second, registry.Added, short)
	expectEvent(t, ch, 15*time.Second, registry.Removed, short) // its TTL ran out
	mustApply(t, w, registry.Unregister(a), registry.Unregister(c))
	expectEvent(t, ch, 10*time.Second, registry.Removed, a)
	for _, r := range []registry.Registry{w, direct} {
		expectList(t, r, endpoint.Filter{})
	}

	// Outside the role: the stream's settings, its messages, other subjects.
	wc := s.connect(t, "sb-writer")
	if err := wc.js.DeleteStream(shortCtx(t), stream); err == nil {
		t.Fatal("sb-writer deleted the stream")
	}
	wc.refused(t, "$JS.API.STREAM.DELETE."+stream)
	st, err := wc.js.Stream(testCtx(t, 10*time.Second), stream)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(shortCtx(t)); err == nil {
		t.Fatal("sb-writer purged the stream")
	}
	wc.refused(t, "$JS.API.STREAM.PURGE."+stream)
	cfg := st.CachedInfo().Config
	cfg.MaxAge = time.Minute
	if _, err := wc.js.UpdateStream(shortCtx(t), cfg); err == nil {
		t.Fatal("sb-writer updated the stream")
	}
	wc.refused(t, "$JS.API.STREAM.UPDATE."+stream)
	if err := wc.nc.Publish("elsewhere.subject", []byte("x")); err != nil {
		t.Fatal(err)
	}
	wc.refused(t, "elsewhere.subject")
	if _, err := wc.nc.SubscribeSync(prefix + ".>"); err != nil {
		t.Fatal(err)
	}
	wc.refused(t, prefix+".>")
	if got := root.streamInfo(t).Config.MaxAge; got != sbjs.DefaultMaxAge {
		t.Fatalf("max age = %s after the refused update, want %s", got, sbjs.DefaultMaxAge)
	}
}

// TestNATSClusterWriter: a writer whose entry grant names one cluster registers and
// unregisters that cluster's endpoints; another cluster's are refused and never
// written.
func TestNATSClusterWriter(t *testing.T) {
	s := startNATS(t)
	s.initStream(t)
	log := &logRecorder{}
	r, err := registry.Open(testCtx(t, 15*time.Second), "jetstream", s.params("sb-prod"), log.logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	writer := s.open(t, "sb-writer")

	a := withTTL(ep("prod", "web", "10.0.0.1", 80), time.Minute)
	mustApply(t, r, registry.Register(a))
	ch := watch(t, r, endpoint.Filter{})
	expectSynced(t, ch, a)

	other := ep("staging", "web", "10.0.0.2", 80)
	err = r.Apply(shortCtx(t), []registry.Op{registry.Register(other)})
	var applyErr *registry.ApplyError
	if !errors.As(err, &applyErr) || len(applyErr.Failed) != 1 || applyErr.Failed[0] != other.Key() {
		t.Fatalf("Apply of another cluster's endpoint = %v, want an ApplyError naming %s", err, other.Key())
	}
	// How the refusal looks to the caller: the server drops the publish, so the ack
	// never comes and the error is the deadline (ErrUnavailable); the reason is in
	// the log.
	t.Logf("refused Apply: %v (ErrUnavailable: %v)", err, errors.Is(err, registry.ErrUnavailable))
	log.waitLog(t, 5*time.Second, "NATS async error", "Permissions Violation for Publish", "switchboard.registration.v1.staging.")

	// Another writer's entry in another cluster cannot be unregistered either.
	mustApply(t, writer, registry.Register(other))
	expectEvent(t, ch, 10*time.Second, registry.Added, other)
	if err := r.Apply(shortCtx(t), []registry.Op{registry.Unregister(other)}); err == nil {
		t.Fatal("sb-prod unregistered a staging endpoint")
	}
	mustApply(t, r, registry.Unregister(a))
	expectEvent(t, ch, 10*time.Second, registry.Removed, a)
	expectList(t, writer, endpoint.Filter{}, other)
}

// TestNATSReader: sb-reader lists (both lookups) and watches everything, including
// removals and expiries written by others, and cannot write or unregister.
func TestNATSReader(t *testing.T) {
	s := startNATS(t)
	s.initStream(t)
	w := s.open(t, "sb-writer")
	log := &logRecorder{}
	rd, err := registry.Open(testCtx(t, 15*time.Second), "jetstream", s.params("sb-reader"), log.logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rd.Close() })
	direct := s.open(t, "sb-reader", sbjs.ParamLookup, sbjs.LookupDirect)

	a := ep("prod", "web", "10.0.0.1", 80)
	b := withTTL(ep("prod", "web", "10.0.0.2", 80), time.Second)
	mustApply(t, w, registry.Register(a))
	ch := watch(t, rd, endpoint.Filter{Cluster: "prod"})
	expectSynced(t, ch, a)
	mustApply(t, w, registry.Register(b))
	expectEvent(t, ch, 10*time.Second, registry.Added, b)
	expectEvent(t, ch, 15*time.Second, registry.Removed, b) // expired
	for _, r := range []registry.Registry{rd, direct} {
		expectList(t, r, endpoint.Filter{}, a)
	}

	for _, op := range []registry.Op{registry.Register(ep("prod", "web", "10.0.0.9", 80)), registry.Unregister(a)} {
		if err := rd.Apply(shortCtx(t), []registry.Op{op}); err == nil {
			t.Fatalf("sb-reader applied %s %s", op.Kind, op.Endpoint.Key())
		}
	}
	log.waitLog(t, 5*time.Second, "NATS async error", "Permissions Violation for Publish", "switchboard.registration.v1.prod.http.web.10_0_0_9.")
	expectList(t, w, endpoint.Filter{}, a)

	mustApply(t, w, registry.Unregister(a))
	expectEvent(t, ch, 10*time.Second, registry.Removed, a)

	rc := s.connect(t, "sb-reader")
	if _, err := rc.nc.Request("$JS.API.STREAM.MSG.GET."+stream, []byte(`{"last_by_subj":"x"}`), time.Second); err == nil {
		t.Fatal("sb-reader got a message through the stream API")
	}
	rc.refused(t, "$JS.API.STREAM.MSG.GET."+stream)
	if err := rc.js.DeleteStream(shortCtx(t), stream); err == nil {
		t.Fatal("sb-reader deleted the stream")
	}
	rc.refused(t, "$JS.API.STREAM.DELETE."+stream)
}

// TestNATSPublisher: the nats backend needs only to publish entries.
func TestNATSPublisher(t *testing.T) {
	s := startNATS(t, natsVariant{user: "publisher-denied", base: "sb-publisher", drop: prefix + ".>"})
	s.initStream(t)
	p, err := registry.Open(testCtx(t, 15*time.Second), "nats", map[string]string{sbjs.ParamURL: s.url("sb-publisher")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	a := ep("prod", "web", "10.0.0.1", 80)
	mustApply(t, p, registry.Register(a))
	rd := s.open(t, "sb-reader")
	deadline := time.Now().Add(10 * time.Second)
	for len(listKeys(t, rd, endpoint.Filter{})) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the published entry never reached the stream")
		}
		time.Sleep(50 * time.Millisecond)
	}
	expectList(t, rd, endpoint.Filter{}, a)
	pc := s.connect(t, "sb-publisher")
	if _, err := pc.nc.SubscribeSync("_INBOX.>"); err != nil {
		t.Fatal(err)
	}
	pc.refused(t, "_INBOX.>")

	// Core NATS does not acknowledge a publish, but the server refuses one it may
	// not forward before it answers the flush: a write without the grant fails
	// instead of vanishing.
	denied, err := registry.Open(testCtx(t, 15*time.Second), "nats", map[string]string{sbjs.ParamURL: s.url("publisher-denied")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = denied.Close() })
	for range 2 { // the second refusal is told apart from the first
		err = denied.Apply(testCtx(t, 10*time.Second), []registry.Op{registry.Register(ep("prod", "web", "10.0.0.2", 80))})
		if err == nil || !strings.Contains(err.Error(), "Permissions Violation for Publish to \""+prefix+".") {
			t.Fatalf("a publish the server refused: %v, want an error naming the refusal", err)
		}
	}
}

// TestNATSEachGrantIsNeeded removes one grant at a time from a role and shows the
// operation that then fails: none of the grants is there for nothing.
func TestNATSEachGrantIsNeeded(t *testing.T) {
	// An op runs as user within d: a refused one fails at d, so the cases keep d
	// short for the users without the grant, and long for the others.
	type op func(t *testing.T, s *natsServer, user string, d time.Duration) error
	open := func(lookup string) func(t *testing.T, s *natsServer, user string, d time.Duration) (registry.Registry, error) {
		return func(t *testing.T, s *natsServer, user string, d time.Duration) (registry.Registry, error) {
			r, err := registry.Open(testCtx(t, d), "jetstream", s.params(user, sbjs.ParamLookup, lookup), nil)
			if err == nil {
				t.Cleanup(func() { _ = r.Close() })
			}
			return r, err
		}
	}
	openOnly := func(t *testing.T, s *natsServer, user string, d time.Duration) error {
		_, err := open(sbjs.LookupConsumer)(t, s, user, d)
		return err
	}
	// list reads the big entries: with a filter (one service), the default lookup
	// asks for them with one multi_last direct get; without one, it reads the whole
	// stream through a consumer.
	list := func(lookup string, f endpoint.Filter) op {
		return func(t *testing.T, s *natsServer, user string, d time.Duration) error {
			r, err := open(lookup)(t, s, user, d)
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			// Large enough for the server to ask for flow control (it does past
			// about 1 MB in flight, and stops sending at 2 MB without an answer).
			eps, err := r.List(testCtx(t, d), f)
			if err == nil && len(eps) < bigListSize {
				err = fmt.Errorf("listed %d entries, want at least %d", len(eps), bigListSize)
			}
			return err
		}
	}
	watch := func(t *testing.T, s *natsServer, user string, d time.Duration) error {
		r, err := open(sbjs.LookupConsumer)(t, s, user, d)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		_, err = r.(registry.Watcher).Watch(testCtx(t, d), endpoint.Filter{Service: "big"})
		return err
	}
	all, big := endpoint.Filter{}, endpoint.Filter{Service: "big"}
	apply := func(kind registry.OpKind) op {
		return func(t *testing.T, s *natsServer, user string, d time.Duration) error {
			r, err := open(sbjs.LookupConsumer)(t, s, user, d)
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			return r.Apply(testCtx(t, d), []registry.Op{{Kind: kind, Endpoint: ep("prod", "small", "10.2.0.1", 80)}})
		}
	}
	// A refused list waits longer: it has to have read enough for the server to ask
	// for flow control (past about 1 MB in flight; it stops sending at 2 MB).
	const refused, refusedList = 1500 * time.Millisecond, 5 * time.Second
	cases := []struct {
		base, drop string
		op         op
		wait       time.Duration // for the user without the grant
		what       string
	}{
		{"sb-writer", prefix + ".>", apply(registry.OpRegister), refused, "register"},
		{"sb-writer", "$JS.API.STREAM.MSG.GET." + stream, apply(registry.OpUnregister), refused, "unregister (sizing its removal)"},
		{"sb-reader", "$JS.API.STREAM.INFO." + stream, openOnly, refused, "open"},
		{"sb-reader", "$JS.API.CONSUMER.CREATE." + stream + ".>", list(sbjs.LookupConsumer, all), refusedList, "list everything (consumer)"},
		{"sb-reader", "$JS.FC." + stream + ".>", list(sbjs.LookupConsumer, all), refusedList, "list more than a flow-control window"},
		{"sb-reader", "$JS.API.CONSUMER.CREATE." + stream + ".>", watch, refused, "watch"},
		{"sb-reader", "$JS.API.DIRECT.GET." + stream, list(sbjs.LookupConsumer, big), refusedList, "list one service (multi_last direct get)"},
		{"sb-reader", "$JS.API.DIRECT.GET." + stream, list(sbjs.LookupDirect, big), refusedList, "list with --lookup direct"},
		{"sb-reader", "_INBOX.>", openOnly, refused, "open (no replies without _INBOX.>)"},
	}
	variants := []natsVariant{{user: "minus-delete", base: "sb-reader", drop: "$JS.API.CONSUMER.DELETE." + stream + ".*"}}
	for i, c := range cases {
		variants = append(variants, natsVariant{user: fmt.Sprintf("minus-%d", i), base: c.base, drop: c.drop})
	}
	s := startNATS(t, variants...)
	s.initStream(t)
	w := s.open(t, "sb-writer")
	ops := make([]registry.Op, bigListSize)
	for i := range ops {
		ops[i] = registry.Register(bigEntry(i))
	}
	mustApply(t, w, ops...)

	// Each case opens registries of its own, and a refused one waits for its
	// deadline: they run at once, all of them (t.Parallel would run two at a time
	// on two cores). The consumer count below needs them done.
	t.Run("refused", func(t *testing.T) {
		var wg sync.WaitGroup
		for i, c := range cases {
			wg.Go(func() {
				t.Run(c.what, func(t *testing.T) {
					op := func(user string, d time.Duration) error { return c.op(t, s, user, d) }
					checkRefused(t, op, c.base, fmt.Sprintf("minus-%d", i), c.wait, c.what, c.drop)
				})
			})
		}
		wg.Wait()
	})

	// Without the consumer delete grant lookups still work, but every one leaves its
	// consumer behind until the server reaps it (30s of inactivity).
	t.Run("consumer delete", func(t *testing.T) {
		root := s.root(t)
		for _, c := range []struct {
			user  string
			added int
		}{{"sb-reader", 0}, {"minus-delete", 1}} {
			before := root.streamInfo(t).State.Consumers
			r := s.open(t, c.user)
			if _, err := r.List(testCtx(t, 10*time.Second), endpoint.Filter{}); err != nil { // a consumer read
				t.Fatalf("List as %s: %v", c.user, err)
			}
			r.Close() // waits for the lookup's consumer to be deleted, which runs in the background
			if got := root.streamInfo(t).State.Consumers; got != before+c.added {
				t.Fatalf("%d consumers after a lookup by %s, want %d", got, c.user, before+c.added)
			}
		}
	})
}

// checkRefused runs op as base, which must succeed, and as without (base minus the
// grant drop) within wait, which must fail with an error naming what the server
// refused, not only the time it took.
func checkRefused(t *testing.T, op func(user string, d time.Duration) error, base, without string, wait time.Duration, what, drop string) {
	t.Helper()
	if err := op(base, 30*time.Second); err != nil {
		t.Fatalf("%s as %s: %v", what, base, err)
	}
	err := op(without, wait)
	if err == nil {
		t.Fatalf("%s without %q succeeded", what, drop)
	}
	t.Logf("without %q: %v", drop, err)
	if msg, denied := err.Error(), strings.TrimRight(drop, ">*"); !strings.Contains(msg, "Permissions Violation") || !strings.Contains(msg, denied) {
		t.Errorf("%s without %q: the error does not name the permission the server refused (%s)", what, drop, denied)
	}
}

const bigListSize = 800

// bigEntry is a registration of about 4 KB, so bigListSize of them exceed a
// flow-control window.
func bigEntry(i int) endpoint.Endpoint {
	e := ep("prod", "big", fmt.Sprintf("10.1.%d.%d", i/250, i%250+1), 80)
	e.Annotations = map[string]string{"padding": strings.Repeat("x", 4000)}
	return e
}

// TestNATSConformance runs the registry conformance suite as sb-writer, on a stream
// the administrator created and the test user purges before every check.
func TestNATSConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole conformance suite")
	}
	s := startNATS(t)
	s.initStream(t)
	root := s.root(t)
	for _, lookup := range []string{sbjs.LookupConsumer, sbjs.LookupDirect} {
		t.Run(lookup, func(t *testing.T) {
			registrytest.Run(t, func() (registry.Registry, error) {
				if err := root.purge(); err != nil {
					return nil, err
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				return registry.Open(ctx, "jetstream", s.params("sb-writer", sbjs.ParamLookup, lookup), nil)
			}, registrytest.Options{Wait: 10 * time.Second})
		})
	}
}
