package config

import (
	"fmt"
	"regexp"
	"strings"
)

const (
	// Wildcard in a link matches every registered group.
	Wildcard = "*"
	// GroupVar in a segment stands for the group the segment is instantiated for.
	GroupVar = "$group"
	// MaxNameLen bounds group and segment names.
	MaxNameLen = 253
)

var groupRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]*$`)

// ValidGroupName checks a concrete group name: a letter or digit, then letters, digits,
// '.', '_' or '-'. Node ids are "{group}/{node}", so a group never holds '/'.
func ValidGroupName(s string) error {
	if len(s) > MaxNameLen || !groupRE.MatchString(s) {
		return fmt.Errorf("%q is not a valid group name (letters, digits, '.', '_', '-', starting with a letter or digit, at most %d)",
			s, MaxNameLen)
	}
	return nil
}

// ValidSegmentName checks a segment name, which may hold GroupVar anywhere.
func ValidSegmentName(s string) error {
	plain := strings.ReplaceAll(s, GroupVar, "g")
	if len(s) > MaxNameLen || !groupRE.MatchString(plain) {
		return fmt.Errorf("%q is not a valid segment name (letters, digits, '.', '_', '-' and %s, at most %d)",
			s, GroupVar, MaxNameLen)
	}
	return nil
}

// validLinkGroup checks a group or neighbor entry: a group name, Wildcard, or (in
// segments) GroupVar.
func validLinkGroup(s string, inSegment bool) error {
	switch {
	case s == Wildcard:
		return nil
	case s == GroupVar && inSegment:
		return nil
	case s == GroupVar:
		return fmt.Errorf("%s is only allowed inside segments", GroupVar)
	}
	return ValidGroupName(s)
}

// UsesGroupVar reports whether the segment is a per-group template.
func (s Segment) UsesGroupVar() bool {
	if strings.Contains(s.Name, GroupVar) {
		return true
	}
	for _, l := range s.Links {
		if l.Group == GroupVar {
			return true
		}
		for _, n := range l.Neighbors {
			if n == GroupVar {
				return true
			}
		}
	}
	return false
}

// IsEmpty reports whether the topology says nothing (API mode).
func (t *Topology) IsEmpty() bool { return t == nil || (len(t.Links) == 0 && len(t.Segments) == 0) }
