package extension

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
)

// Declaration is what a package's deployment() returned (reference §4.1), read strictly:
// anything of another shape is an error that names the field.
type Declaration struct {
	Services  []*Service
	Variables []Group[Variable] // by key, "global" or a component's label, in the package's order
	Mounts    []Group[Mount]
	// Probe is the readiness probe of every workload (telemetry's); nil when it says nothing.
	Probe *Probe
	// NoProbe is `probe: false`: no workload is probed.
	NoProbe bool
	Events  []string // event labels it consumes
	// References are the Helm charts it asks to be installed with the application (Toa's chart
	// dependencies): toa-push deploys none, and says so.
	References []Chart
}

// Chart is a Helm chart a package asks for, as Toa's Chart.yaml lists its dependencies.
type Chart struct {
	Name       string `json:"name"`
	Version    string `json:"version"`
	Repository string `json:"repository"`
	Alias      string `json:"alias"`
}

// Group is a key's items: "global", or a component's label.
type Group[T any] struct {
	Key   string
	Items []T
}

// Variable is an environment variable: a value, or a key of a Secret.
type Variable struct {
	Name   string     `json:"name"`
	Value  string     `json:"-"`
	Secret *SecretKey `json:"secret"`
}

// SecretKey is a key of a Secret.
type SecretKey struct {
	Name     string `json:"name"`
	Key      string `json:"key"`
	Optional bool   `json:"optional"`
}

// Mount is a volume claim mounted at a path.
type Mount struct {
	Name  string `json:"name"`
	Path  string `json:"path"`
	Claim string `json:"claim"`
}

// Probe is an HTTP readiness endpoint.
type Probe struct {
	Path  string `json:"path"`
	Port  int32  `json:"port"`
	Delay int32  `json:"delay"`
}

// Service is a service an extension runs (reference §4.1): a Deployment of its own, or a
// process inside a composition's pod that lists it.
type Service struct {
	Group   string `json:"group"`
	Name    string `json:"name"`
	Version string `json:"version"`
	// Image is the repository the extension publishes the service's image to, without a tag.
	Image       string            `json:"image"`
	Port        int32             `json:"port"`
	Ingress     *Ingress          `json:"ingress"`
	Variables   []Variable        `json:"variables"`
	Components  []string          `json:"components"` // the labels of the components it runs
	Probe       *Probe            `json:"-"`
	NoProbe     bool              `json:"-"`           // `probe: false`
	Resources   *toa.Resources    `json:"-"`           // nil when it says nothing; None for null
	Annotations map[string]string `json:"annotations"` // of its Kubernetes Service
}

// Ingress is what a service asks of its ingress; the context's `ingress` fills the rest.
type Ingress struct {
	Default     *bool             `json:"default"`
	Hosts       []string          `json:"hosts"`
	Class       string            `json:"class"`
	Annotations map[string]string `json:"annotations"`
	Path        string            `json:"path"`
}

// FullName is the service's name as it is deployed: "<group>-<name>".
func (s *Service) FullName() string { return s.Group + "-" + s.Name }

func readDeclaration(data []byte) (*Declaration, error) {
	var raw struct {
		Services   []json.RawMessage    `json:"services"`
		Variables  [][2]json.RawMessage `json:"variables"`
		Mounts     [][2]json.RawMessage `json:"mounts"`
		Probe      json.RawMessage      `json:"probe"`
		Events     []string             `json:"events"`
		References []Chart              `json:"references"`
	}
	if err := strict(data, &raw); err != nil {
		return nil, err
	}
	d := &Declaration{Events: raw.Events, References: raw.References}
	for i, c := range d.References {
		if c.Name == "" {
			return nil, fmt.Errorf("references[%d]: a chart needs a name", i)
		}
	}
	for _, pair := range raw.Variables {
		var key string
		if err := json.Unmarshal(pair[0], &key); err != nil {
			return nil, fmt.Errorf("variables: %w", err)
		}
		var items []json.RawMessage
		if err := json.Unmarshal(pair[1], &items); err != nil {
			return nil, fmt.Errorf("variables.%s is not a list", key)
		}
		g := Group[Variable]{Key: key}
		for i, item := range items {
			v, err := readVariable(item)
			if err != nil {
				return nil, fmt.Errorf("variables.%s[%d]: %w", key, i, err)
			}
			g.Items = append(g.Items, v)
		}
		d.Variables = append(d.Variables, g)
	}
	for _, pair := range raw.Mounts {
		var key string
		if err := json.Unmarshal(pair[0], &key); err != nil {
			return nil, fmt.Errorf("mounts: %w", err)
		}
		g := Group[Mount]{Key: key}
		if err := strict(pair[1], &g.Items); err != nil {
			return nil, fmt.Errorf("mounts.%s: %w", key, err)
		}
		for i, m := range g.Items {
			if m.Name == "" || m.Path == "" || m.Claim == "" {
				return nil, fmt.Errorf("mounts.%s[%d]: a mount needs a name, a path and a claim", key, i)
			}
		}
		d.Mounts = append(d.Mounts, g)
	}
	var err error
	if d.Probe, d.NoProbe, err = readProbe(raw.Probe); err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	for i, s := range raw.Services {
		svc, err := readService(s)
		if err != nil {
			return nil, fmt.Errorf("services[%d]: %w", i, err)
		}
		d.Services = append(d.Services, svc)
	}
	return d, nil
}

func readService(data []byte) (*Service, error) {
	var s Service
	if err := strict(data, &s); err != nil {
		return nil, err
	}
	if s.Group == "" || s.Name == "" {
		return nil, fmt.Errorf("a service needs a group and a name")
	}
	var rest struct {
		Probe     json.RawMessage   `json:"probe"`
		Resources json.RawMessage   `json:"resources"`
		Variables []json.RawMessage `json:"variables"`
		Ingress   *struct {
			Host string `json:"host"`
		} `json:"ingress"`
	}
	if err := json.Unmarshal(data, &rest); err != nil {
		return nil, err
	}
	var err error
	if s.Probe, s.NoProbe, err = readProbe(rest.Probe); err != nil {
		return nil, fmt.Errorf("%s: probe: %w", s.FullName(), err)
	}
	s.Variables = nil
	for i, item := range rest.Variables {
		v, err := readVariable(item)
		if err != nil {
			return nil, fmt.Errorf("%s: variables[%d]: %w", s.FullName(), i, err)
		}
		s.Variables = append(s.Variables, v)
	}
	if s.Ingress != nil && s.Ingress.Hosts == nil && rest.Ingress != nil && rest.Ingress.Host != "" {
		s.Ingress.Hosts = []string{rest.Ingress.Host} // the ingress of Toa's older services names one host
	}
	if len(rest.Resources) > 0 {
		if bytes.Equal(rest.Resources, []byte("null")) {
			s.Resources = &toa.Resources{None: true}
		} else {
			var r struct {
				CPU    []json.RawMessage `json:"cpu"`
				Memory []json.RawMessage `json:"memory"`
			}
			if err := strict(rest.Resources, &r); err != nil {
				return nil, fmt.Errorf("%s: resources: %w", s.FullName(), err)
			}
			s.Resources = &toa.Resources{}
			for _, p := range []struct {
				key  string
				pair []json.RawMessage
				into **toa.Pair
			}{{"cpu", r.CPU, &s.Resources.CPU}, {"memory", r.Memory, &s.Resources.Memory}} {
				if p.pair == nil {
					continue
				}
				if len(p.pair) != 2 {
					return nil, fmt.Errorf("%s: resources.%s: a pair [request, limit], not %d item(s)", s.FullName(), p.key, len(p.pair))
				}
				var quantities [2]string
				for i, q := range p.pair {
					v, ok := quantity(q)
					if !ok {
						return nil, fmt.Errorf("%s: resources.%s[%d] is %s, not a quantity like 500m or 0.5", s.FullName(), p.key, i, q)
					}
					quantities[i] = v
				}
				*p.into = &toa.Pair{Request: quantities[0], Limit: quantities[1]}
			}
		}
	}
	return &s, nil
}

func readProbe(data json.RawMessage) (*Probe, bool, error) {
	switch {
	case len(data) == 0 || bytes.Equal(data, []byte("null")):
		return nil, false, nil
	case bytes.Equal(data, []byte("false")):
		return nil, true, nil
	}
	var p Probe
	if err := strict(data, &p); err != nil {
		return nil, false, err
	}
	if p.Path == "" || p.Port <= 0 {
		return nil, false, fmt.Errorf("a probe needs a path and a port")
	}
	return &p, false, nil
}

// quantity reads one side of a resources pair: a string, or a number (`cpu: [0.5, 1]`), which is
// read as the context's are, by its text.
func quantity(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, s != ""
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String(), true
	}
	return "", false
}

// chartValue is a variable's value as Toa's chart wrote it: `{{- if .value }} value: {{ .value |
// quote }}`, of the value Helm read from values.yaml. A false, a zero or an empty string is no
// value at all (a bare name, an empty variable); true is "true"; any other number is written as
// Go's %v writes the float64 Helm read, so 1000000 is "1e+06" and 0.5 is "0.5".
func chartValue(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case bool:
		if !x {
			return "", nil
		}
		return "true", nil
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return "", err
		}
		if f == 0 {
			return "", nil
		}
		return fmt.Sprintf("%v", f), nil
	}
	kind := "an object"
	if _, ok := v.([]any); ok {
		kind = "a list"
	}
	return "", fmt.Errorf("the value is %s, not a string, a number or a boolean", kind)
}

// readVariable reads {name, value} or {name, secret}; a number or a boolean value is written as
// Toa's chart wrote it (chartValue).
func readVariable(data []byte) (Variable, error) {
	var v Variable
	if err := strict(data, &v); err != nil {
		return v, err
	}
	if v.Name == "" {
		return v, fmt.Errorf("a variable needs a name")
	}
	var value struct {
		Value any `json:"value"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&value); err != nil {
		return v, err
	}
	text, err := chartValue(value.Value)
	if err != nil {
		return v, fmt.Errorf("%s: %w", v.Name, err)
	}
	v.Value = text
	if v.Secret != nil && (v.Secret.Name == "" || v.Secret.Key == "") {
		return v, fmt.Errorf("%s: a secret needs a name and a key", v.Name)
	}
	return v, nil
}

// strict decodes JSON into v, refusing values of the wrong type (unknown fields are left).
func strict(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		if te, ok := err.(*json.UnmarshalTypeError); ok {
			field := te.Field
			if field == "" {
				field = "the value"
			}
			return fmt.Errorf("%s is %s, not %s", field, jsonKind(te.Value), goKind(te.Type.String()))
		}
		return err
	}
	return nil
}

func jsonKind(s string) string {
	switch s {
	case "string", "number", "object", "array", "bool":
		return "a " + s
	}
	return s
}

func goKind(t string) string {
	switch {
	case t == "string":
		return "a string"
	case t == "int32" || t == "int" || t == "float64":
		return "a number"
	case t == "bool" || t == "*bool":
		return "a boolean"
	case len(t) > 2 && t[:2] == "[]":
		return "a list"
	}
	return "an object"
}
