package toa

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/toa-deploy/toa-deploy/fault"
)

// readYAML parses a YAML file into a node tree with its anchors and merge keys expanded, so that
// the rest of the package sees plain mappings, sequences and scalars, each with its line.
// An empty file is an empty mapping. The second result is false when the file does not exist.
func readYAML(path string) (*yaml.Node, bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, fmt.Errorf("read %s: %w", path, err)
	}
	node, err := parseYAML(path, data)
	return node, true, err
}

func parseYAML(path string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: 1}, nil
		}
		return nil, syntaxError(path, err)
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
	expanded, err := expand(path, root, 0)
	if err != nil {
		return nil, err
	}
	if isNull(expanded) {
		return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: expanded.Line}, nil
	}
	return expanded, nil
}

// syntaxError turns the parser's message ("yaml: line 3: did not find expected key") into one
// of ours, with the line where the parser gives one.
func syntaxError(path string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if _, scanErr := fmt.Sscanf(msg, "line %d:", &line); scanErr == nil {
		msg = strings.TrimSpace(msg[strings.Index(msg, ":")+1:])
	}
	return &fault.Input{File: path, Line: line, Message: "is not valid YAML: " + msg,
		Hint: "check the indentation of this line and of the one above it"}
}

// maxDepth bounds alias expansion, so that a file of nested aliases ("billion laughs") is refused
// instead of exhausting memory.
const maxDepth = 100

// expand returns a copy of node in which every alias is replaced by a copy of what it names and
// every merge key (<<) is resolved: keys written in the mapping win over merged ones, as in
// js-yaml, which Toa reads its files with.
func expand(path string, node *yaml.Node, depth int) (*yaml.Node, error) {
	if depth > maxDepth {
		return nil, &fault.Input{File: path, Line: node.Line, Message: "nests aliases too deeply",
			Hint: "an alias that refers to itself, or a chain of more than 100, cannot be expanded"}
	}
	switch node.Kind {
	case yaml.AliasNode:
		return expand(path, node.Alias, depth+1)
	case yaml.SequenceNode:
		out := *node
		out.Content = make([]*yaml.Node, 0, len(node.Content))
		for _, item := range node.Content {
			c, err := expand(path, item, depth+1)
			if err != nil {
				return nil, err
			}
			out.Content = append(out.Content, c)
		}
		return &out, nil
	case yaml.MappingNode:
		return expandMapping(path, node, depth)
	default:
		out := *node
		out.Anchor = ""
		return &out, nil
	}
}

func expandMapping(path string, node *yaml.Node, depth int) (*yaml.Node, error) {
	out := *node
	out.Anchor = ""
	out.Content = nil
	var merged []*yaml.Node
	for i := 0; i+1 < len(node.Content); i += 2 {
		k, v := node.Content[i], node.Content[i+1]
		value, err := expand(path, v, depth+1)
		if err != nil {
			return nil, err
		}
		if k.Kind == yaml.ScalarNode && k.Value == "<<" && k.Tag == "!!merge" {
			sources, err := mergeSources(path, value)
			if err != nil {
				return nil, err
			}
			merged = append(merged, sources...)
			continue
		}
		key := *k
		out.Content = append(out.Content, &key, value)
	}
	for _, src := range merged {
		for i := 0; i+1 < len(src.Content); i += 2 {
			if lookup(&out, src.Content[i].Value) == nil {
				out.Content = append(out.Content, src.Content[i], src.Content[i+1])
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
	for _, name := range order {
		w := winners[name]
		if existing := indexKey(kept, name); existing >= 0 {
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

func indexKey(content []*yaml.Node, key string) int {
	for i := 0; i+1 < len(content); i += 2 {
		if content[i].Value == key {
			return i
		}
	}
	return -1
}
