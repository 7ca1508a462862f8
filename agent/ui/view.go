package ui

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxEntries bounds the entries one rendering shows: a node with thousands of pods
// still gets a page that loads quickly. The filter finds the others.
const MaxEntries = 500

// view is what the templates render: the State, with the entries filtered and
// counted.
type view struct {
	State
	Filter  string
	Shown   []Entry // the entries matching Filter, at most MaxEntries
	Matched int     // how many match Filter
	Counts  []count // all entries by state
	Gate    gate
	// RefreshMillis is how often an open page fetches a fresh rendering at least.
	RefreshMillis int64
}

type count struct {
	Name string
	N    int
}

// gate sums up the publish gate over all entries: it is per entry, and the page
// says for how many it is open and why it is closed for the others.
type gate struct {
	Open, Closed int
	Reasons      []count // why it is closed, the commonest first
}

// Word is "open", "closed" or "partly open": the gate over all entries.
func (g gate) Word() string {
	switch {
	case g.Closed == 0 && g.Open > 0:
		return "open"
	case g.Open == 0:
		return "closed"
	}
	return "partly open"
}

// Class names the gate's state for CSS and tests: gate-open, gate-closed or
// gate-partly.
func (g gate) Class() string {
	switch w := g.Word(); w {
	case "open", "closed":
		return "gate-" + w
	}
	return "gate-partly"
}

// stateOrder lists the entry states as the summary shows them.
var stateOrder = []string{StatePublished, StatePublishing, StateWaiting, StateHeld, StateWithdrawn, StateDryRun}

func newView(s State, filter string, refresh time.Duration) view {
	v := view{State: s, Filter: filter, RefreshMillis: refresh.Milliseconds(), Shown: []Entry{}}
	byState := map[string]int{}
	reasons := map[string]int{}
	for _, e := range s.Entries {
		byState[e.State]++
		if e.GateOpen {
			v.Gate.Open++
		} else {
			v.Gate.Closed++
			reasons[e.Reason]++
		}
		if !matches(e, filter) {
			continue
		}
		v.Matched++
		if len(v.Shown) < MaxEntries {
			v.Shown = append(v.Shown, e)
		}
	}
	for _, st := range stateOrder {
		if n := byState[st]; n > 0 {
			v.Counts = append(v.Counts, count{st, n})
		}
	}
	for r, n := range reasons {
		v.Gate.Reasons = append(v.Gate.Reasons, count{r, n})
	}
	slices.SortFunc(v.Gate.Reasons, func(a, b count) int { return cmp.Or(cmp.Compare(b.N, a.N), cmp.Compare(a.Name, b.Name)) })
	return v
}

// matches reports whether an entry's key or source contains the filter, ignoring
// case.
func matches(e Entry, filter string) bool {
	if filter == "" {
		return true
	}
	f := strings.ToLower(filter)
	return strings.Contains(strings.ToLower(e.Key), f) || strings.Contains(strings.ToLower(e.Source), f)
}

// filtered returns s with only the entries the filter matches, for state.json.
func filtered(s State, filter string) State {
	if filter == "" {
		return s
	}
	keep := []Entry{} // a filter that matches nothing gives "entries": [], not null
	for _, e := range s.Entries {
		if matches(e, filter) {
			keep = append(keep, e)
		}
	}
	s.Entries = keep
	return s
}

// status is a check's state in a word.
func status(c Check) string {
	switch {
	case c.Healthy:
		return "passing"
	case c.Pending:
		return "waiting"
	}
	return "failing"
}

// counters says where a check stands against the threshold that would flip it.
func counters(c Check) string {
	switch {
	case c.Results == 0:
		return "no result yet"
	case c.Healthy && c.Failures > 0:
		return fmt.Sprintf("%d of %d failures before unhealthy", c.Failures, c.Fall)
	case c.Healthy:
		return fmt.Sprintf("%s in a row; unhealthy after %s", plural(c.Passes, "pass", "passes"), plural(c.Fall, "failure", "failures"))
	case c.Passes > 0:
		return fmt.Sprintf("%d of %d passes before healthy", c.Passes, c.Rise)
	}
	return fmt.Sprintf("%s in a row; healthy after %s", plural(c.Failures, "failure", "failures"), plural(c.Rise, "pass", "passes"))
}

// plural is "1 pass", "2 passes".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// last is a check's latest result; zero before the first.
func last(c Check) Result {
	if len(c.History) == 0 {
		return Result{}
	}
	return c.History[len(c.History)-1]
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.Format("15:04:05")
}

func stamp(t time.Time) string { return t.Format(time.RFC3339) }

// ago is how long before now t was, to the second.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return max(now.Sub(t), 0).Truncate(time.Second).String() + " ago"
}

// short cuts a long version (a hash) for a table cell; the full one goes in a
// title.
func short(s string) string {
	if len(s) <= 12 {
		return s
	}
	i := 12
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Truncate(time.Second).String()
}
