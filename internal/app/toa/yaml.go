package toa

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// readYAML parses a YAML file into a node tree with its anchors and merge keys expanded, so that
// the rest of the package sees plain mappings, sequences and scalars, each with its line.
// An empty file is an empty mapping. The second result is false when the file does not exist.
func readYAML(path string) (*yaml.Node, bool, error) {
	data, err := fsys.ReadFile(path, fsys.MaxYAMLSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, err
	}
	node, err := parseYAML(path, data)
	return node, true, err
}

func parseYAML(path string, data []byte) (*yaml.Node, error) {
	if err := checkText(path, data); err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: 1}, nil
		}
		return nil, syntaxError(path, data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &fault.Input{File: path, Line: extra.Line, Message: "holds more than one YAML document",
			Hint: "remove the '---' separator: a Toa file is one document"}
	}
	root := &doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = doc.Content[0]
	}
	if err := checkKeys(path, "", root); err != nil {
		return nil, err
	}
	x := &expander{path: path, active: map[*yaml.Node]bool{}}
	expanded, err := x.expand(root, 0)
	if err != nil {
		return nil, err
	}
	if isNull(expanded) {
		return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: expanded.Line}, nil
	}
	return expanded, nil
}

// checkText refuses what js-yaml, which Toa reads its files with, refuses before parsing: bytes
// that are not UTF-8, and characters YAML does not allow in a file (control characters but tab
// and line breaks). The YAML library says so without a line, and this says where.
func checkText(path string, data []byte) error {
	line, column := 1, 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return &fault.Input{File: path, Line: line,
				Message: fmt.Sprintf("is not valid UTF-8: byte 0x%02x at column %d", data[i], column),
				Hint:    "save the file as UTF-8: Toa reads its files as UTF-8"}
		case notAllowedInYAML(r):
			return &fault.Input{File: path, Line: line,
				Message: fmt.Sprintf("holds the control character %s at column %d, which YAML does not allow in a file", fault.Printable(string(r)), column),
				Hint:    "remove it, or write it as an escape in a double-quoted string (\"\\e\" for ESC)"}
		case r == '\n':
			line, column = line+1, 0
		}
		column++
		i += size
	}
	return nil
}

// notAllowedInYAML is js-yaml's PATTERN_NON_PRINTABLE: the characters outside YAML's printable set.
func notAllowedInYAML(r rune) bool {
	switch {
	case r == '\t', r == '\n', r == '\r':
		return false
	case r < 0x20, r >= 0x7f && r <= 0x84, r >= 0x86 && r <= 0x9f, r == 0xfffe, r == 0xffff:
		return true
	}
	return false
}

// syntaxError turns the parser's message ("yaml: line 3: did not find expected key") into one
// of ours, with the line where the parser gives one (or where the unknown alias is written), and
// a hint for the mistakes that are not of indentation.
func syntaxError(path string, data []byte, err error) error {
	msg, line := splitSyntaxError(err)
	if at := problemLine(data, msg, line); at > 0 {
		line = at
	}
	hint := "check the indentation of this line and of the one above it"
	switch {
	case strings.HasPrefix(msg, "unknown anchor '"):
		anchor := strings.TrimSuffix(strings.TrimPrefix(msg, "unknown anchor '"), "' referenced")
		if i := bytes.Index(data, []byte("*"+anchor)); i >= 0 && line == 0 {
			line = fsys.LineAt(data, int64(i))
		}
		msg = fmt.Sprintf("the alias *%s names no anchor", anchor)
		hint = fmt.Sprintf("write the anchor (&%s) on the value it names, above this line", anchor)
	case strings.Contains(msg, "unknown escape character"):
		hint = `in double quotes a backslash starts an escape: write \\ for a backslash, or use single quotes`
	case strings.Contains(msg, "unexpected end of stream"):
		hint = "a quote or a bracket opened on this line is not closed"
	case strings.Contains(msg, "cannot start any token") && line > 0 && bytes.Contains(lineText(data, line), []byte("\t")):
		hint = "indent with spaces: YAML does not allow tabs in indentation"
	}
	return &fault.Input{File: path, Line: line, Message: "is not valid YAML: " + msg, Hint: hint}
}

func splitSyntaxError(err error) (string, int) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if _, scanErr := fmt.Sscanf(msg, "line %d:", &line); scanErr == nil {
		msg = strings.TrimSpace(msg[strings.Index(msg, ":")+1:])
	}
	return msg, line
}

// problemLine finds the line of a syntax error: the first line after which the file, cut there,
// fails with the same message. The YAML library gives the line where the block or flow around the
// problem starts, and for the parser's errors one less than that, counted from 0: "line 3" for a
// mistake on line 6. So the search starts a line above the library's and gallops down (1, 2, 4
// lines further) until a cut fails alike, then halves the last step: a few parses of the file's
// beginning, where a search of the whole file would take log2(lines). 0 when no cut fails alike.
func problemLine(data []byte, msg string, reported int) int {
	var ends []int
	for i, b := range data {
		if b == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	failsAlike := func(lines int) bool {
		var n yaml.Node
		err := yaml.NewDecoder(bytes.NewReader(data[:ends[lines-1]])).Decode(&n)
		if err == nil || errors.Is(err, io.EOF) {
			return false
		}
		m, _ := splitSyntaxError(err)
		return m == msg
	}
	// first is the first line in (after, upto] whose cut fails alike, or 0.
	first := func(after, upto int) int {
		i := sort.Search(upto-after, func(i int) bool { return failsAlike(after + i + 1) })
		if i == upto-after {
			return 0
		}
		return after + i + 1
	}
	start := min(max(reported-1, 1), len(ends))
	if failsAlike(start) { // the library's line was not above the mistake after all
		return first(0, start)
	}
	after := start
	for step := 1; after < len(ends); step *= 2 {
		upto := min(after+step, len(ends))
		if failsAlike(upto) {
			return first(after, upto)
		}
		after = upto
	}
	return 0
}

// lineText is the 1-based line n of data.
func lineText(data []byte, n int) []byte {
	lines := bytes.SplitN(data, []byte("\n"), n+1)
	if n-1 < len(lines) {
		return lines[n-1]
	}
	return nil
}

// checkKeys refuses, as js-yaml does, a mapping that gives a key twice, at any depth, naming both
// lines. It walks the tree as written: an alias is checked where its anchor is.
func checkKeys(path, key string, node *yaml.Node) error {
	switch node.Kind {
	case yaml.SequenceNode:
		for i, item := range node.Content {
			if err := checkKeys(path, fmt.Sprintf("%s[%d]", key, i), item); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		first := make(map[string]int, len(node.Content)/2)
		for i := 0; i+1 < len(node.Content); i += 2 {
			k, v := node.Content[i], node.Content[i+1]
			if k.Kind == yaml.ScalarNode && !isMergeKey(k) {
				if line, seen := first[k.Value]; seen {
					return &fault.Input{File: path, Line: k.Line, Key: joinKey(key, k.Value),
						Message: fmt.Sprintf("is given twice, first at line %d", line),
						Hint:    "remove one of the two: a mapping holds each key once"}
				}
				first[k.Value] = k.Line
			}
			if err := checkKeys(path, joinKey(key, k.Value), v); err != nil {
				return err
			}
		}
	}
	return nil
}

func isMergeKey(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && k.Tag == "!!merge"
}

// maxDepth bounds how deep values nest, aliases expanded; maxNodes bounds how many there are once
// every alias is replaced by a copy of what it names. Aliases of aliases multiply ("billion
// laughs": nine lines make 387 million values), so the bound is what keeps such a file from
// exhausting memory. A real Toa file holds some hundreds.
const (
	maxDepth = 100
	maxNodes = 100_000
)

// expander copies a node tree replacing every alias by a copy of what it names and resolving every
// merge key (<<): keys written in the mapping win over merged ones, as in js-yaml, which Toa
// reads its files with.
type expander struct {
	path    string
	nodes   int                 // how many have been made so far
	aliases int                 // how many aliases have been expanded so far
	active  map[*yaml.Node]bool // the anchored nodes being expanded: an alias of one is a cycle
}

func (x *expander) expand(node *yaml.Node, depth int) (*yaml.Node, error) {
	if depth > maxDepth {
		return nil, &fault.Input{File: x.path, Line: node.Line, Message: fmt.Sprintf("nests values more than %d levels deep", maxDepth),
			Hint: "a Toa file nests some levels of mappings and lists: write this value flatter"}
	}
	if x.nodes++; x.nodes > maxNodes {
		return nil, x.tooMany()
	}
	if node.Anchor != "" {
		x.active[node] = true
		defer delete(x.active, node)
	}
	switch node.Kind {
	case yaml.AliasNode:
		if x.active[node.Alias] {
			return nil, &fault.Input{File: x.path, Line: node.Line, Message: fmt.Sprintf("the alias *%s is inside the value it names", fault.Printable(node.Value)),
				Hint: "an alias cannot name a value that contains it: such a value never ends"}
		}
		x.aliases++
		return x.expand(node.Alias, depth)
	case yaml.SequenceNode:
		out := *node
		out.Anchor = ""
		out.Content = make([]*yaml.Node, 0, len(node.Content))
		for _, item := range node.Content {
			c, err := x.expand(item, depth+1)
			if err != nil {
				return nil, err
			}
			out.Content = append(out.Content, c)
		}
		return &out, nil
	case yaml.MappingNode:
		return x.expandMapping(node, depth)
	default:
		out := *node
		out.Anchor = ""
		return &out, nil
	}
}

func (x *expander) tooMany() error {
	if x.aliases == 0 {
		return &fault.Input{File: x.path, Message: fmt.Sprintf("holds more than %d values", maxNodes),
			Hint: "a Toa file holds some hundreds: check that this is the file you meant"}
	}
	return &fault.Input{File: x.path, Message: fmt.Sprintf("holds more than %d values once its aliases are expanded", maxNodes),
		Hint: "each alias (*name) is a copy of what its anchor (&name) names, and aliases of aliases multiply: write fewer of them"}
}

func (x *expander) expandMapping(node *yaml.Node, depth int) (*yaml.Node, error) {
	out := *node
	out.Anchor = ""
	out.Content = nil
	written := map[string]bool{}
	var merged []*yaml.Node
	for i := 0; i+1 < len(node.Content); i += 2 {
		k, v := node.Content[i], node.Content[i+1]
		value, err := x.expand(v, depth+1)
		if err != nil {
			return nil, err
		}
		if isMergeKey(k) {
			sources, err := mergeSources(x.path, value)
			if err != nil {
				return nil, err
			}
			merged = append(merged, sources...)
			continue
		}
		key := *k
		key.Anchor = ""
		out.Content = append(out.Content, &key, value)
		written[k.Value] = true
	}
	for _, src := range merged {
		for i := 0; i+1 < len(src.Content); i += 2 {
			if k := src.Content[i]; !written[k.Value] {
				out.Content = append(out.Content, k, src.Content[i+1])
				written[k.Value] = true
			}
		}
	}
	return &out, nil
}

func mergeSources(path string, value *yaml.Node) ([]*yaml.Node, error) {
	switch value.Kind {
	case yaml.MappingNode:
		return []*yaml.Node{value}, nil
	case yaml.SequenceNode:
		for _, item := range value.Content {
			if item.Kind != yaml.MappingNode {
				return nil, &fault.Input{File: path, Line: item.Line, Message: "merges something that is not a mapping",
					Hint: "'<<' takes an alias of a mapping, or a list of them"}
			}
		}
		return value.Content, nil
	}
	return nil, &fault.Input{File: path, Line: value.Line, Message: "merges something that is not a mapping",
		Hint: "'<<' takes an alias of a mapping, or a list of them"}
}

// lookup returns the value of key in a mapping node, or nil.
func lookup(mapping *yaml.Node, key string) *yaml.Node {
	if mapping == nil || mapping.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(mapping.Content); i += 2 {
		if mapping.Content[i].Value == key {
			return mapping.Content[i+1]
		}
	}
	return nil
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// convolve resolves Toa's environment overrides (`key@env`) at any depth, in place: for each key
// the value tagged with the earliest name of the chain wins over the untagged one, whatever their
// order in the file; every tagged key is then removed. A chain of no names drops every tagged
// key. Keys that start with '@' are not tags and are kept.
func convolve(node *yaml.Node, chain []string) {
	switch node.Kind {
	case yaml.SequenceNode:
		for _, item := range node.Content {
			convolve(item, chain)
		}
	case yaml.MappingNode:
		convolveMapping(node, chain)
	}
}

func convolveMapping(node *yaml.Node, chain []string) {
	type winner struct {
		rank       int
		key, value *yaml.Node
	}
	winners := map[string]*winner{}
	var order []string
	var kept []*yaml.Node
	for i := 0; i+1 < len(node.Content); i += 2 {
		k, v := node.Content[i], node.Content[i+1]
		convolve(v, chain)
		name, tag, tagged := strings.Cut(k.Value, "@")
		if !tagged || name == "" {
			kept = append(kept, k, v)
			continue
		}
		tag, _, _ = strings.Cut(tag, "@") // as JS's key.split('@'): a second '@' ends the tag
		rank := indexOf(chain, tag)
		if rank < 0 {
			continue
		}
		w, seen := winners[name]
		if !seen {
			order = append(order, name)
			winners[name] = &winner{rank: rank, key: k, value: v}
			continue
		}
		if rank < w.rank {
			*w = winner{rank: rank, key: k, value: v}
		}
	}
	position := make(map[string]int, len(kept)/2)
	for i := 0; i+1 < len(kept); i += 2 {
		position[kept[i].Value] = i
	}
	for _, name := range order {
		w := winners[name]
		if existing, ok := position[name]; ok {
			kept[existing+1] = w.value
			continue
		}
		key := *w.key
		key.Value = name
		kept = append(kept, &key, w.value)
	}
	node.Content = kept
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}
