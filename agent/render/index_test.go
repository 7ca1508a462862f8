package render

import (
	"bytes"
	"strings"
	"testing"
	"text/template"
)

// TestIndexAgreesWithTheBuiltin: index replaces text/template's builtin and must
// answer as it does, but for the annotations of a stand-in.
func TestIndexAgreesWithTheBuiltin(t *testing.T) {
	m := map[string]string{"a": "A"}
	data := map[string]any{
		"S": []string{"x", "y"}, "A": [2]int{7, 8}, "Str": "hey", "M": m, "P": &m,
		"N": []map[string]int{{"b": 2}}, "IM": map[int]string{2: "two"}, "U8": map[uint8]string{1: "one"},
		"PM": map[*int]string{}, "Nil": nil, "I": any([]int{5}),
		"Ann": annotations{"a": "A"},
	}
	for _, src := range []string{
		`{{index .S 1}}`, `{{index .S 2}}`, `{{index .S -1}}`, `{{index .S "a"}}`, `{{index .S nil}}`,
		`{{index .A 1}}`, `{{index .Str 0}}`, `{{index .M "a"}}`, `{{index .M "zz"}}`, `{{index .P "a"}}`,
		`{{index .N 0 "b"}}`, `{{index .IM 2}}`, `{{index .U8 1}}`, `{{index .M 1}}`, `{{index .PM nil}}`,
		`{{index .Nil 1}}`, `{{index .I 0}}`, `{{index .M}}`, `{{index 3 1}}`, `{{index .Ann "a"}}`,
		`{{if eq (index .M "zz") ""}}empty{{end}}`,
	} {
		want, wantErr := execWith(t, src, data, nil)
		got, gotErr := execWith(t, src, data, template.FuncMap{"index": index})
		if got != want || (gotErr == nil) != (wantErr == nil) {
			t.Errorf("%s = %q, %v; the builtin gives %q, %v", src, got, gotErr, want, wantErr)
		}
	}
	got, err := execWith(t, `{{index .Ann "zz"}}|{{if eq (index .Ann "zz") ""}}empty{{end}}`, data, template.FuncMap{"index": index})
	if got != "|empty" || err != nil {
		t.Errorf("a stand-in's missing annotation = %q, %v; want it empty, as an endpoint's", got, err)
	}
}

func execWith(t *testing.T, src string, data any, funcs template.FuncMap) (string, error) {
	t.Helper()
	tm, err := template.New("t").Funcs(funcs).Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	err = tm.Execute(&b, data)
	return strings.TrimSpace(b.String()), err
}
