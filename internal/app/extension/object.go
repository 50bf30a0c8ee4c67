package extension

import (
	"bytes"
	"encoding/json"
)

// object is a JSON object that keeps its keys in order: what the packages are handed is an
// object of JavaScript, whose key order they see (the routes of a section are in the order it
// lists them), so the order of the files is kept.
type object struct {
	keys   []string
	values map[string]json.RawMessage
}

func newObject() *object { return &object{values: map[string]json.RawMessage{}} }

// parseObject reads a JSON object, keeping its keys' order; anything else is an empty object.
func parseObject(raw json.RawMessage) *object {
	o := newObject()
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return o
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return newObject()
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return newObject()
		}
		o.setRaw(key, v)
	}
	return o
}

func (o *object) get(key string) (json.RawMessage, bool) {
	v, ok := o.values[key]
	return v, ok
}

// set puts a value at key: in place where the key is, at the end where it is new. The values
// set are toa-deploy's own (names, lists of names, objects of those), which JSON writes.
func (o *object) set(key string, v any) {
	raw, ok := v.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(v); err != nil {
			raw = json.RawMessage("null")
		}
	}
	o.setRaw(key, raw)
}

func (o *object) setRaw(key string, raw json.RawMessage) {
	if _, seen := o.values[key]; !seen {
		o.keys = append(o.keys, key)
	}
	o.values[key] = raw
}

func (o *object) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		key, _ := json.Marshal(k)
		buf.Write(key)
		buf.WriteByte(':')
		buf.Write(o.values[k])
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}
