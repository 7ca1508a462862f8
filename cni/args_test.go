package cni

import (
	"strings"
	"testing"
)

func TestParseCNIArgs(t *testing.T) {
	for in, want := range map[string]podArgs{
		"": {},
		"IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1": {Namespace: "shop", Name: "web-0", UID: "u-1"},
		"K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;":                                                               {Namespace: "shop", Name: "web-0"},
		"K8S_POD_NAME=a=b": {Name: "a=b"},
		"K8S_POD_NAME=":    {},
	} {
		got, err := parseCNIArgs(in)
		if err != nil || got != want {
			t.Errorf("parseCNIArgs(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	if _, err := parseCNIArgs("K8S_POD_NAME=web;garbage"); err == nil || !strings.Contains(err.Error(), `"garbage"`) {
		t.Errorf("a pair without = : err %v", err)
	}
}

func TestPodArgsIsPod(t *testing.T) {
	for p, want := range map[podArgs]bool{
		{Namespace: "a", Name: "b"}: true,
		{Namespace: "a"}:            false,
		{Name: "b", UID: "u"}:       false,
	} {
		if p.isPod() != want {
			t.Errorf("%+v.isPod() != %v", p, want)
		}
	}
}

// FuzzParseCNIArgs: any CNI_ARGS parses or fails without panicking, and a value read
// never contains the separator.
func FuzzParseCNIArgs(f *testing.F) {
	f.Add("IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_UID=u")
	f.Add(";;=;K8S_POD_NAME")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parseCNIArgs(s)
		if err != nil {
			return
		}
		for _, v := range []string{p.Namespace, p.Name, p.UID} {
			if strings.Contains(v, ";") || !strings.Contains(s, v) {
				t.Fatalf("parseCNIArgs(%q) read %q", s, v)
			}
		}
	})
}
