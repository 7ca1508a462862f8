// Package codewords spells gRPC status codes as the words a person reads: the CLI
// and the registrar's client both put a code in front of a server's message, and
// PermissionDenied should read "permission denied", not "PermissionDenied" or
// "permissiondenied".
package codewords

import (
	"strings"
	"unicode"

	"google.golang.org/grpc/codes"
)

// Of spells c's name as lower-case words: OutOfRange is "out of range".
func Of(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if unicode.IsUpper(r) && i > 0 {
			b.WriteByte(' ')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// Trim drops c's own words, and the ": " after them, from the start of msg: servers
// that begin their messages with them ("not found: segment …") would otherwise read
// twice once the code is put in front. Case does not matter; msg is returned as it
// is when it does not begin so.
func Trim(c codes.Code, msg string) string {
	words := Of(c)
	if len(msg) <= len(words)+2 || !strings.EqualFold(msg[:len(words)], words) || msg[len(words):len(words)+2] != ": " {
		return msg
	}
	return msg[len(words)+2:]
}

// Say puts c's words in front of msg, without saying them twice (Trim): "permission
// denied: role viewer".
func Say(c codes.Code, msg string) string {
	return Of(c) + ": " + Trim(c, msg)
}
