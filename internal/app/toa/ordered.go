package toa

import (
	"bytes"
	"encoding/json"

	"go.yaml.in/yaml/v3"
)

// orderedJSON writes a value of the file as JSON with every mapping's keys in the order the file
// gives them (after `@env` overrides, which keep a key where the untagged one was), as JavaScript
// keeps an object's keys. The extension packages see the values Toa hands them in that order, and
// it shows: the routes of a realtime section, the selectors of an origins section, the text of a
// value they write as JSON. Keys and scalars are read as field.value reads them, with its errors.
func orderedJSON(f field) (json.RawMessage, error) {
	if _, err := f.value(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := writeOrdered(&buf, f.node); err != nil {
		return nil, f.fail("", "cannot be read: %v", err)
	}
	return buf.Bytes(), nil
}

func writeOrdered(buf *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			buf.WriteString("null")
			return nil
		}
		return writeOrdered(buf, n.Content[0])
	case yaml.AliasNode:
		return writeOrdered(buf, n.Alias)
	case yaml.MappingNode:
		buf.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				buf.WriteByte(',')
			}
			key, err := keyText(n.Content[i])
			if err != nil {
				return err
			}
			k, _ := json.Marshal(key)
			buf.Write(k)
			buf.WriteByte(':')
			if err := writeOrdered(buf, n.Content[i+1]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, item := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeOrdered(buf, item); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	default:
		var v any
		if err := n.Decode(&v); err != nil {
			return err
		}
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		buf.Write(data)
	}
	return nil
}
