package toa

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// field is one value of a YAML file with where it stands: the file and the key path. Its methods
// read the value as the shape the key must have, or say precisely why it cannot.
type field struct {
	file string
	key  string
	node *yaml.Node
}

// fail says what is wrong with the value. The strings among args are what the user wrote, quoted
// in the message: their control characters, line breaks included, are escaped.
func (f field) fail(hint, format string, args ...any) *fault.Input {
	line := 0
	if f.node != nil {
		line = f.node.Line
	}
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = fault.Printable(s)
		}
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
	seen := make(map[string]bool, len(f.node.Content)/2)
	for i := 0; i+1 < len(f.node.Content); i += 2 {
		k := f.node.Content[i]
		if k.Kind != yaml.ScalarNode {
			return nil, (field{file: f.file, key: f.key, node: k}).fail("write keys as plain words", "has a key that is %s, not a string", describe(k))
		}
		if seen[k.Value] {
			return nil, (field{file: f.file, key: joinKey(f.key, k.Value), node: k}).fail(
				"remove one of the two", "is given twice")
		}
		seen[k.Value] = true
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

// value reads any YAML value as plain Go values, the way JSON carries them to Toa's extensions:
// map[string]any (keys in file order are lost, see Ordered), []any, string, int, float64, bool,
// time.Time, nil. Keys are strings, as in JavaScript: `1: a` has the key "1", `~: a` the key
// "null". A value JSON cannot hold (infinity, not-a-number), a key that is a mapping or a list,
// or a scalar its tag cannot read is refused with its key and line.
func (f field) value() (any, error) {
	switch f.node.Kind {
	case yaml.MappingNode:
		out := make(map[string]any, len(f.node.Content)/2)
		for i := 0; i+1 < len(f.node.Content); i += 2 {
			k := f.node.Content[i]
			if k.Kind != yaml.ScalarNode {
				return nil, (field{file: f.file, key: f.key, node: k}).fail("write keys as plain words", "has a key that is %s, not a string", describe(k))
			}
			name, err := keyText(k)
			if err != nil {
				return nil, (field{file: f.file, key: joinKey(f.key, k.Value), node: k}).fail("quote it if you mean the text", "the key '%s' cannot be read as %s", k.Value, tagName(k.Tag))
			}
			v, err := (field{file: f.file, key: joinKey(f.key, name), node: f.node.Content[i+1]}).value()
			if err != nil {
				return nil, err
			}
			out[name] = v
		}
		return out, nil
	case yaml.SequenceNode:
		out := make([]any, len(f.node.Content))
		for i := range f.node.Content {
			v, err := f.item(i).value()
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case yaml.ScalarNode:
		var v any
		if err := f.node.Decode(&v); err != nil {
			return nil, f.fail("quote it if you mean the text", "'%s' cannot be read as %s", f.node.Value, tagName(f.node.Tag))
		}
		if x, ok := v.(float64); ok && (math.IsInf(x, 0) || math.IsNaN(x)) {
			what := "infinity"
			if math.IsNaN(x) {
				what = "not a number"
			}
			return nil, f.fail(fmt.Sprintf("write a number, or quote it ('%s') if you mean the text", fault.Printable(f.node.Value)),
				"'%s' is %s, which a JSON value cannot hold", f.node.Value, what)
		}
		return v, nil
	}
	return nil, f.fail("", "cannot be read")
}

// keyText is a key as JavaScript sees it: the text of the value it resolves to.
func keyText(k *yaml.Node) (string, error) {
	if k.Tag == "!!str" || k.Tag == "" {
		return k.Value, nil
	}
	var v any
	if err := k.Decode(&v); err != nil {
		return "", err
	}
	switch t := v.(type) {
	case nil:
		return "null", nil
	case string:
		return t, nil
	case float64:
		return strconv.FormatFloat(t, 'g', -1, 64), nil
	}
	return fmt.Sprint(v), nil
}

// tagName names a YAML tag in words.
func tagName(tag string) string {
	switch tag {
	case "!!int":
		return "a whole number"
	case "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	case "!!timestamp":
		return "a date"
	case "!!binary":
		return "base64"
	case "!!null":
		return "null"
	}
	return "its tag " + tag
}
