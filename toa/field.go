package toa

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/toa-deploy/toa-deploy/fault"
)

// field is one value of a YAML file with where it stands: the file and the key path. Its methods
// read the value as the shape the key must have, or say precisely why it cannot.
type field struct {
	file string
	key  string
	node *yaml.Node
}

func (f field) fail(hint, format string, args ...any) *fault.Input {
	line := 0
	if f.node != nil {
		line = f.node.Line
	}
	return &fault.Input{File: f.file, Key: f.key, Line: line, Message: fmt.Sprintf(format, args...), Hint: hint}
}

func (f field) isNull() bool { return isNull(f.node) }

func (f field) child(key string) (field, bool) {
	n := lookup(f.node, key)
	path := key
	if f.key != "" {
		path = f.key + "." + key
	}
	return field{file: f.file, key: path, node: n}, n != nil
}

func (f field) item(i int) field {
	return field{file: f.file, key: fmt.Sprintf("%s[%d]", f.key, i), node: f.node.Content[i]}
}

// describe names a node's kind the way a user thinks of it.
func describe(n *yaml.Node) string {
	switch {
	case isNull(n):
		return "null"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Tag == "!!bool":
		return "a boolean"
	case n.Tag == "!!int" || n.Tag == "!!float":
		return "a number"
	}
	return "a string"
}

// mapping checks that the value is a mapping whose keys are all in allowed (any key when allowed
// is nil), and returns its keys in file order.
func (f field) mapping(allowed []string, hint string) ([]string, error) {
	if f.node.Kind != yaml.MappingNode {
		return nil, f.fail(hint, "must be a mapping, not %s", describe(f.node))
	}
	var keys []string
	for i := 0; i+1 < len(f.node.Content); i += 2 {
		k := f.node.Content[i]
		if k.Kind != yaml.ScalarNode {
			return nil, (field{file: f.file, key: f.key, node: k}).fail("", "has a key that is not a string")
		}
		if indexOf(keys, k.Value) >= 0 {
			return nil, (field{file: f.file, key: joinKey(f.key, k.Value), node: k}).fail(
				"remove one of the two", "is given twice")
		}
		if allowed != nil && indexOf(allowed, k.Value) < 0 {
			return nil, (field{file: f.file, key: joinKey(f.key, k.Value), node: k}).fail(
				"allowed keys"+where(f.key)+": "+strings.Join(sorted(allowed), ", "), "is not a known key")
		}
		keys = append(keys, k.Value)
	}
	return keys, nil
}

func where(key string) string {
	if key == "" {
		return ""
	}
	return " of '" + key + "'"
}

func joinKey(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func sorted(list []string) []string {
	out := append([]string(nil), list...)
	sort.Strings(out)
	return out
}

// str reads a scalar as a string. Numbers and booleans are taken as their text, as ajv's
// coerceTypes does for Toa's string keys ("version: 1.0" is "1.0").
func (f field) str() (string, error) {
	if f.node.Kind != yaml.ScalarNode || isNull(f.node) {
		return "", f.fail("", "must be a string, not %s", describe(f.node))
	}
	return f.node.Value, nil
}

// optStr reads key of the mapping as a string, "" when it is absent.
func (f field) optStr(key string) (string, error) {
	c, ok := f.child(key)
	if !ok {
		return "", nil
	}
	return c.str()
}

// pattern reads a string that must match re; noun names what it is ("composition name").
func (f field) pattern(re *regexp.Regexp, noun, hint string) (string, error) {
	s, err := f.str()
	if err != nil {
		return "", err
	}
	if !re.MatchString(s) {
		return "", f.fail(hint, "'%s' is not a valid %s", s, noun)
	}
	return s, nil
}

func (f field) integer(min int) (int, error) {
	if f.node.Kind != yaml.ScalarNode || isNull(f.node) {
		return 0, f.fail("", "must be a whole number, not %s", describe(f.node))
	}
	n, err := strconv.Atoi(f.node.Value)
	if err != nil {
		return 0, f.fail("", "'%s' is not a whole number", f.node.Value)
	}
	if n < min {
		return 0, f.fail("", "must be at least %d, not %d", min, n)
	}
	return n, nil
}

func (f field) boolean() (bool, error) {
	if f.node.Kind == yaml.ScalarNode && f.node.Tag == "!!bool" {
		var b bool
		if err := f.node.Decode(&b); err == nil {
			return b, nil
		}
	}
	return false, f.fail("write true or false", "must be a boolean, not %s", describe(f.node))
}

// list reads a sequence, refusing one shorter than min with hint.
func (f field) list(min int, hint string) ([]field, error) {
	if f.node.Kind != yaml.SequenceNode {
		return nil, f.fail(hint, "must be a list, not %s", describe(f.node))
	}
	if len(f.node.Content) < min {
		if min == 1 {
			return nil, f.fail(hint, "is an empty list")
		}
		return nil, f.fail(hint, "must list at least %d items, not %d", min, len(f.node.Content))
	}
	items := make([]field, len(f.node.Content))
	for i := range f.node.Content {
		items[i] = f.item(i)
	}
	return items, nil
}

// strings reads a list of strings, or a single string as a list of one when single is true.
func (f field) strings(min int, single bool, hint string) ([]string, error) {
	if single && f.node.Kind == yaml.ScalarNode && !isNull(f.node) {
		return []string{f.node.Value}, nil
	}
	items, err := f.list(min, hint)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(items))
	for i, it := range items {
		if out[i], err = it.str(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// value decodes any YAML value into plain Go values: map[string]any (keys in file order are lost,
// see Ordered), []any, string, int, float64, bool, nil.
func (f field) value() (any, error) {
	var v any
	if err := f.node.Decode(&v); err != nil {
		return nil, f.fail("", "cannot be read: %v", err)
	}
	return normalizeValue(v), nil
}

// normalizeValue turns map[any]any, which yaml.v3 never produces for string keys but may for
// others, into map[string]any so that the value marshals as JSON.
func normalizeValue(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = normalizeValue(x)
		}
		return t
	case map[any]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[fmt.Sprint(k)] = normalizeValue(x)
		}
		return out
	case []any:
		for i, x := range t {
			t[i] = normalizeValue(x)
		}
		return t
	}
	return v
}
