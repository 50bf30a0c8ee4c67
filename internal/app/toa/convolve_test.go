package toa

import (
	"testing"

	"go.yaml.in/yaml/v3"
)

// render reads YAML, resolves overrides for chain and returns the result as plain values.
func convolved(t *testing.T, src string, chain []string) any {
	t.Helper()
	node, err := parseYAML("test.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	convolve(node, chain)
	var v any
	if err := node.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestConvolve(t *testing.T) {
	cases := []struct {
		name  string
		src   string
		chain []string
		want  string
	}{
		{"tagged wins when after", "a: 1\na@dev: 2\n", []string{"dev"}, "a: 2\n"},
		{"tagged wins when before", "a@dev: 2\na: 1\n", []string{"dev"}, "a: 2\n"},
		{"other environment dropped", "a: 1\na@prod: 2\n", []string{"dev"}, "a: 1\n"},
		{"no environment drops every tag", "a: 1\na@dev: 2\nb@dev: 3\n", nil, "a: 1\n"},
		{"tilde is a value", "platforms: [x]\nplatforms@dev: ~\n", []string{"dev"}, "platforms: null\n"},
		{"tagged key alone is added", "b@dev: 3\n", []string{"dev"}, "b: 3\n"},
		{"at any depth", "r:\n  base: x\n  base@dev: z\n", []string{"dev"}, "r:\n    base: z\n"},
		{"inside lists", "l:\n  - a: 1\n    a@dev: 2\n", []string{"dev"}, "l:\n    - a: 2\n"},
		{"a key starting with @ is kept", "'@toa.io/x': 1\n", []string{"dev"}, "'@toa.io/x': 1\n"},
		{"chain: first name wins", "a: 0\na@production: 1\na@staging: 2\n", []string{"staging", "production"}, "a: 2\n"},
		{"chain: falls back to the next name", "a: 0\na@production: 1\n", []string{"staging", "production"}, "a: 1\n"},
		{"chain: first name wins whatever the order", "a@staging: 2\na@production: 1\n", []string{"staging", "production"}, "a: 2\n"},
		{"tagged mapping is convolved too", "e@dev:\n  x: 1\n  x@dev: 2\n", []string{"dev"}, "e:\n    x: 2\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := yaml.Marshal(convolved(t, c.src, c.chain))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

func TestConvolveKeepsPlaceOfOverriddenKey(t *testing.T) {
	node, err := parseYAML("t.yaml", []byte("a: 1\nb: 2\nb@dev: 3\nc: 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	convolve(node, []string{"dev"})
	var keys []string
	for i := 0; i < len(node.Content); i += 2 {
		keys = append(keys, node.Content[i].Value)
	}
	if got := keys; len(got) != 3 || got[0] != "a" || got[1] != "b" || got[2] != "c" {
		t.Errorf("keys %v, want [a b c]", got)
	}
}

func TestAnchorsAndMergeKeys(t *testing.T) {
	src := `
base: &base
  cpu: [1, 2]
  memory: [3, 4]
merged:
  <<: *base
  memory: [5, 6]
alias: *base
`
	got, err := yaml.Marshal(convolved(t, src, nil))
	if err != nil {
		t.Fatal(err)
	}
	want := `alias:
    cpu:
        - 1
        - 2
    memory:
        - 3
        - 4
base:
    cpu:
        - 1
        - 2
    memory:
        - 3
        - 4
merged:
    cpu:
        - 1
        - 2
    memory:
        - 5
        - 6
`
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestAliasBombIsRefused(t *testing.T) {
	if _, err := parseYAML("t.yaml", []byte("a: &a\n  b: *a\n")); err == nil {
		t.Error("a self-referencing alias was expanded")
	}
}
