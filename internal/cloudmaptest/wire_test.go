package cloudmaptest

import (
	"fmt"
	"testing"
)

// FuzzPage: any NextToken, valid or not, either fails with InvalidInput or yields a
// window inside the list that starts after the id the token names.
func FuzzPage(f *testing.F) {
	ids := make([]string, 10)
	for i := range ids {
		ids[i] = fmt.Sprintf("i-%02d", i)
	}
	_, tok, _ := page(ids, nil, "inst:x", 3)
	f.Add(*tok, 3)
	f.Add("", 1)
	f.Add("garbage!", 100)
	f.Fuzz(func(t *testing.T, token string, limit int) {
		if limit < 1 || limit > maxPage {
			return
		}
		window, next, err := page(ids, &token, "inst:x", limit)
		if err != nil {
			if e, ok := err.(*apiError); !ok || e.code != "InvalidInput" {
				t.Fatalf("bad token %q: %v, want InvalidInput", token, err)
			}
			return
		}
		after, _ := parseToken(token, "inst:x")
		if len(window) > limit || (len(window) > 0 && window[0] <= after) {
			t.Fatalf("token %q (after %q) gave window %v", token, after, window)
		}
		if next != nil && len(window) == 0 {
			t.Fatal("an empty window carries a NextToken")
		}
	})
}
