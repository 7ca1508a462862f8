package render

import (
	"context"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// hostile are values another node could store, each trying to break out of the
// construct it is rendered into.
var hostile = []string{
	injected,
	`"; proxy_pass http://evil.example; "`,
	`it's'; rm -rf / ; echo '`,
	`$(touch /tmp/pwned) ${HOME} $HOME`,
	`\"\\ back\slash`,
	"nul\x00byte",
	"esc\x1b[31m",
	"del\x7f c1\u0085 sep\u2028",
	"cr\rlf\ntab\t",
	"# comment } { ;",
}

// withValue renders src over one endpoint whose annotation "v" holds value.
func withValue(t *testing.T, src, value string) (string, []Refusal, error) {
	t.Helper()
	e := ep("prod", "web", "http", "10.0.0.1", 80)
	e.Annotations = map[string]string{"v": value}
	tm, err := Parse("t.tmpl", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	out, refused, err := tm.Render([]endpoint.Endpoint{e})
	return string(out), refused, err
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                        `"plain"`,
		`a"b\c`:                        `"a\"b\\c"`,
		"x\n}\nserver {":               `"x\n}\nserver {"`,
		"\x00\x1b\x7f\u0085\u2028\t\r": `"\u0000\u001b\u007f\u0085\u2028\t\r"`,
		"ünï 東京":                       `"ünï 東京"`,
	} {
		if got, _, err := withValue(t, `{{range registrations "" "" "" ""}}{{quote .Annotations.v}}{{end}}`, in); got != want || err != nil {
			t.Errorf("quote %q = %s, %v; want %s", in, got, err, want)
		}
	}
	// What quote writes reads back as the value in JSON and in Go.
	for _, in := range hostile {
		q := quote(in)
		var fromJSON string
		if err := json.Unmarshal([]byte(q), &fromJSON); err != nil || fromJSON != in {
			t.Errorf("JSON reads quote(%q) = %s as %q, %v", in, q, fromJSON, err)
		}
		if fromGo, err := strconv.Unquote(q); err != nil || fromGo != in {
			t.Errorf("Go reads quote(%q) = %s as %q, %v", in, q, fromGo, err)
		}
		noControls(t, "quote", in, q)
	}
}

func TestJSON(t *testing.T) {
	e := ep("prod", "web", "http", "10.0.0.1", 80)
	e.Annotations = map[string]string{"v": "a\n<b>\u0085"}
	for src, want := range map[string]string{
		`{{json .Annotations.v}}`:           `"a\n\u003cb\u003e\u0085"`,
		`{{json .Annotations}}`:             `{"v":"a\n\u003cb\u003e\u0085"}`,
		`{{json .}}`:                        `{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.1","port":80,"priority":1,"annotations":{"v":"a\n\u003cb\u003e\u0085"}}`,
		`{{json (raw .Annotations.v)}}`:     `"a\n\u003cb\u003e\u0085"`,
		`{{json .Port}} {{json "a&b"}}`:     `80 "a\u0026b"`,
		`{{json (index .Annotations "x")}}`: `""`,
	} {
		tm, err := Parse("t.tmpl", []byte(`{{range registrations "" "" "" ""}}`+src+`{{end}}`))
		if err != nil {
			t.Fatal(err)
		}
		out, refused, err := tm.Render([]endpoint.Endpoint{e})
		if string(out) != want || err != nil || len(refused) != 0 {
			t.Errorf("%s = %s, %v, %v; want %s", src, out, refused, err, want)
		}
	}
	for _, in := range hostile {
		got, _, err := withValue(t, `{{range registrations "" "" "" ""}}{{json .Annotations.v}}{{end}}`, in)
		var back string
		if err != nil || json.Unmarshal([]byte(got), &back) != nil || back != in {
			t.Errorf("json %q = %s (reads back as %q), %v", in, got, back, err)
		}
		noControls(t, "json", in, got)
	}
}

func TestShellquote(t *testing.T) {
	if got, _, _ := withValue(t, `{{range registrations "" "" "" ""}}{{shellquote .Annotations.v}}{{end}}`, "it's"); got != `'it'\''s'` {
		t.Errorf(`shellquote "it's" = %s`, got)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to check the quoting against")
	}
	for _, in := range hostile {
		got, refused, err := withValue(t, `{{range registrations "" "" "" ""}}{{shellquote .Annotations.v}}{{end}}`, in)
		if err != nil {
			t.Fatalf("shellquote %q: %v", in, err)
		}
		if strings.ContainsFunc(in, unicode.IsControl) {
			// No POSIX quoting for these: the endpoint is left out.
			if got != "" || len(refused) != 1 || refused[0].Field != "annotations[v]" {
				t.Errorf("shellquote %q = %q, refused %v; want it left out", in, got, refused)
			}
			continue
		}
		// The shell reads the quoted word back as the value, one argument.
		out, err := exec.CommandContext(context.Background(), sh, "-c", `printf '%s|' `+got).Output()
		if err != nil || string(out) != in+"|" {
			t.Errorf("sh reads shellquote(%q) = %s as %q, %v", in, got, out, err)
		}
	}
	if _, _, err := withValue(t, `{{shellquote "a\x00"}}`, ""); err == nil || !strings.Contains(err.Error(), "shellquote: control character U+0000 cannot be quoted") {
		t.Errorf("shellquote of a template's own NUL = %v; want an error", err)
	}
}

func TestNginx(t *testing.T) {
	for in, want := range map[string]string{
		`max_fails=3`:                    `"max_fails=3"`,
		`a"b\c;}{ #x`:                    `"a\"b\\c;}{ #x"`,
		"edge\n}\nserver {\r\tlisten 80": `"edge\n}\nserver {\r\tlisten 80"`,
	} {
		if got, _, err := withValue(t, `{{range registrations "" "" "" ""}}{{nginx .Annotations.v}}{{end}}`, in); got != want || err != nil {
			t.Errorf("nginx %q = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range hostile {
		got, refused, err := withValue(t, `{{range registrations "" "" "" ""}}{{nginx .Annotations.v}}{{end}}`, in)
		if err != nil {
			t.Fatalf("nginx %q: %v", in, err)
		}
		if strings.ContainsFunc(strings.NewReplacer("\n", "", "\r", "", "\t", "").Replace(in), unicode.IsControl) {
			if got != "" || len(refused) != 1 {
				t.Errorf("nginx %q = %q, refused %v; want it left out", in, got, refused)
			}
			continue
		}
		if back, ok := nginxToken(got); !ok || back != in {
			t.Errorf("nginx reads nginx(%q) = %s as %q (one token: %v)", in, got, back, ok)
		}
		noControls(t, "nginx", in, got)
	}
}

// nginxToken reads s as nginx's configuration parser reads a double-quoted token
// (ngx_conf_read_token): it must be exactly one token, and \" \\ \' \n \r \t are
// unescaped.
func nginxToken(s string) (string, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", false
	}
	var b strings.Builder
	for i := 1; i < len(s)-1; i++ {
		c := s[i]
		switch {
		case c == '"':
			return "", false // the token would end here
		case c == '\\' && i+1 < len(s)-1:
			i++
			switch s[i] {
			case '"', '\'', '\\':
				b.WriteByte(s[i])
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			default:
				b.WriteByte('\\')
				b.WriteByte(s[i])
			}
		case c == '\\':
			return "", false // escapes the closing quote
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

func TestHAProxy(t *testing.T) {
	for in, want := range map[string]string{
		`a"b\c $HOME ${X} #x 'y'`: `"a\"b\\c \$HOME \${X} #x 'y'"`,
		"esc\x1b c1\u0085 nl\n":   `"esc\x1b c1\xc2\x85 nl\n"`,
	} {
		if got, _, err := withValue(t, `{{range registrations "" "" "" ""}}{{haproxy .Annotations.v}}{{end}}`, in); got != want || err != nil {
			t.Errorf("haproxy %q = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range hostile {
		got, refused, err := withValue(t, `{{range registrations "" "" "" ""}}{{haproxy .Annotations.v}}{{end}}`, in)
		if err != nil {
			t.Fatalf("haproxy %q: %v", in, err)
		}
		if strings.Contains(in, "\x00") {
			// HAProxy would cut the argument short at a NUL: the endpoint is left out.
			if got != "" || len(refused) != 1 {
				t.Errorf("haproxy %q = %q, refused %v; want it left out", in, got, refused)
			}
			continue
		}
		if len(refused) != 0 {
			t.Fatalf("haproxy %q: refused %v", in, refused)
		}
		if back, ok := haproxyArg(got); !ok || back != in {
			t.Errorf("HAProxy reads haproxy(%q) = %s as %q (one argument: %v)", in, got, back, ok)
		}
		noControls(t, "haproxy", in, got)
	}
}

// haproxyArg reads s as HAProxy's parse_line reads one weakly quoted argument: it
// must be exactly one argument with no variable to expand, and \" \\ \$ \' \# \n \r
// \t \xHH are unescaped.
func haproxyArg(s string) (string, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", false
	}
	var b []byte
	for i := 1; i < len(s)-1; i++ {
		c := s[i]
		switch {
		case c == '"' || c == '$' || c == '\n':
			return "", false // ends the argument, expands a variable, or ends the line
		case c == '\\' && i+1 < len(s)-1:
			i++
			switch s[i] {
			case '"', '\\', '$', '\'', '#', ' ':
				b = append(b, s[i])
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'x':
				n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
				if err != nil {
					return "", false
				}
				b = append(b, byte(n))
				i += 2
			default:
				return "", false
			}
		case c == '\\':
			return "", false
		default:
			b = append(b, c)
		}
	}
	return string(b), true
}

func TestRaw(t *testing.T) {
	got, refused, err := withValue(t, `{{range registrations "" "" "" ""}}{{raw .Annotations.v}}|{{raw .Port}}{{end}}`, injected)
	if err != nil || got != injected+"|80" || len(refused) != 0 {
		t.Fatalf("raw = %q, %v, %v; want the value as stored", got, refused, err)
	}
}

// noControls fails when a helper's output holds a control character.
func noControls(t *testing.T, helper, in, out string) {
	t.Helper()
	if strings.ContainsFunc(out, unicode.IsControl) {
		t.Errorf("%s(%q) = %q holds a control character", helper, in, out)
	}
}

func TestHelpersOfATemplatesOwnValues(t *testing.T) {
	for src, want := range map[string]string{
		`{{quote "a b"}} {{quote 8080}}`: `"a b" "8080"`,
		`{{nginx "a b"}}`:                `"a b"`,
		`{{haproxy "a b"}}`:              `"a b"`,
		`{{shellquote "a b"}}`:           `'a b'`,
		`{{json "a b"}}`:                 `"a b"`,
	} {
		got, _, err := withValue(t, src, "")
		if err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", src, got, err, want)
		}
	}
	if _, _, err := withValue(t, `{{nginx "\x1b"}}`, ""); err == nil || !strings.Contains(err.Error(), "nginx: control character U+001B cannot be quoted") {
		t.Errorf(`nginx "\x1b" = %v; want an error naming the character`, err)
	}
}
