package cni

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// This file edits CNI configuration files without understanding other plugins'
// keys: every value is kept as the bytes it was written as (json.RawMessage), and
// object keys keep their order, so another plugin's configuration survives an edit
// exactly, only re-indented.

// member is one key of a JSON object and its value as written.
type member struct {
	key   string
	value json.RawMessage
}

// object is a JSON object with its keys in order.
type object []member

// parseObject reads a JSON object, refusing duplicate keys (which parsers resolve
// differently) and anything after the object.
func parseObject(data []byte) (object, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	var o object
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		if _, dup := o.get(key); dup {
			return nil, fmt.Errorf("key %q appears twice", key)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		o = append(o, member{key, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON object")
	}
	return o, nil
}

func (o object) get(key string) (json.RawMessage, bool) {
	for _, m := range o {
		if m.key == key {
			return m.value, true
		}
	}
	return nil, false
}

// set replaces key's value in place, or appends the key.
func (o object) set(key string, v json.RawMessage) object {
	for i := range o {
		if o[i].key == key {
			o[i].value = v
			return o
		}
	}
	return append(o, member{key, v})
}

func (o object) stringValue(key string) string {
	var s string
	if v, ok := o.get(key); ok {
		_ = json.Unmarshal(v, &s)
	}
	return s
}

// compact writes the object on one line, keys in order and values as written.
func (o object) compact(buf *bytes.Buffer) error {
	buf.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			buf.WriteByte(',')
		}
		writeString(buf, m.key)
		buf.WriteByte(':')
		if err := json.Compact(buf, m.value); err != nil {
			return err
		}
	}
	buf.WriteByte('}')
	return nil
}

// writeString quotes s as JSON without HTML escaping, which would change bytes of
// keys that other tools compare.
func writeString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	buf.Truncate(buf.Len() - 1)
}

// format is the object as the file is written: two-space indent, final newline.
func (o object) format() ([]byte, error) {
	var flat, out bytes.Buffer
	if err := o.compact(&flat); err != nil {
		return nil, err
	}
	if err := json.Indent(&out, flat.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// rawList writes a list of values as written.
func rawList(items []json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, it := range items {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(it)
	}
	buf.WriteByte(']')
	return buf.Bytes()
}

// plugins reads a configuration list's plugins, each an object with a type.
func (o object) plugins() ([]json.RawMessage, error) {
	v, ok := o.get("plugins")
	if !ok {
		return nil, errors.New("no plugins list")
	}
	var list []json.RawMessage
	if err := json.Unmarshal(v, &list); err != nil || list == nil {
		return nil, errors.New("plugins is not a list")
	}
	for i, p := range list {
		if _, err := pluginType(p); err != nil {
			return nil, fmt.Errorf("plugins[%d]: %w", i, err)
		}
	}
	return list, nil
}

// pluginType is a plugin entry's "type", matched exactly (encoding/json would also
// take "Type").
func pluginType(p json.RawMessage) (string, error) {
	o, err := parseObject(p)
	if err != nil {
		return "", err
	}
	v, ok := o.get("type")
	var t string
	if !ok || json.Unmarshal(v, &t) != nil {
		return "", errors.New("no type")
	}
	return t, nil
}

// withPlugin returns the list with every entry of type name removed and entry
// appended: our plugin runs last, after every plugin that sets up the pod's network,
// so prevResult holds the pod's final addresses.
func withPlugin(list []json.RawMessage, name string, entry json.RawMessage) []json.RawMessage {
	out := withoutPlugin(list, name)
	return append(out, entry)
}

func withoutPlugin(list []json.RawMessage, name string) []json.RawMessage {
	out := make([]json.RawMessage, 0, len(list)+1)
	for _, p := range list {
		if t, _ := pluginType(p); t != name {
			out = append(out, p)
		}
	}
	return out
}

// chainList adds entry, of type name, as the last plugin of a .conflist.
func chainList(data []byte, name string, entry json.RawMessage) ([]byte, error) {
	o, err := parseObject(data)
	if err != nil {
		return nil, err
	}
	list, err := o.plugins()
	if err != nil {
		return nil, err
	}
	return o.set("plugins", rawList(withPlugin(list, name, entry))).format()
}

// unchainList removes every plugin of type name from a .conflist. found is false
// (and out nil) when there was none; empty reports that no plugin is left.
func unchainList(data []byte, name string) (out []byte, found, empty bool, err error) {
	o, err := parseObject(data)
	if err != nil {
		return nil, false, false, err
	}
	list, err := o.plugins()
	if err != nil {
		return nil, false, false, err
	}
	kept := withoutPlugin(list, name)
	if len(kept) == len(list) {
		return nil, false, false, nil
	}
	out, err = o.set("plugins", rawList(kept)).format()
	return out, true, len(kept) == 0, err
}

// convertConf turns a single-plugin .conf into a .conflist with entry after the
// plugin, as libcni's ConfListFromConf would read it: the list takes the plugin's
// name and cniVersion, and the plugin stays as written.
func convertConf(data []byte, name string, entry json.RawMessage) ([]byte, error) {
	o, err := parseObject(data)
	if err != nil {
		return nil, err
	}
	t, err := pluginType(data)
	switch {
	case err != nil:
		return nil, err
	case t == name:
		return nil, fmt.Errorf("the network's only plugin is %s itself: there is no plugin to chain after", name)
	}
	var list object
	for _, key := range []string{"cniVersion", "name"} {
		if v, ok := o.get(key); ok {
			list = list.set(key, v)
		}
	}
	if _, ok := list.get("name"); !ok {
		return nil, errors.New("no network name")
	}
	var flat bytes.Buffer
	if err := o.compact(&flat); err != nil {
		return nil, err
	}
	return list.set("plugins", rawList([]json.RawMessage{flat.Bytes(), entry})).format()
}
