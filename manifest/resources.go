package manifest

import (
	"fmt"
	"math"
	"regexp"
	"strconv"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// settleResources is Toa 289's resources(): every workload takes its own resources, else the
// context's (`resources: null` is an answer: deploy without), else it is refused; then the heap
// is sized by the memory limit.
func settleResources(app *toa.Application, v *Values) error {
	units := append([]*Workload(nil), v.Compositions...)
	if v.Mono != nil {
		units = append([]*Workload{v.Mono}, units...)
	}
	// a service a workload runs is asked nothing: the workload's resources are its
	var services []*Service
	for _, s := range v.Services {
		if len(s.Workload) == 0 {
			w := &Workload{Subject: fmt.Sprintf("Service '%s'", s.Name), Resources: s.Resources,
				Variables: s.Variables, resourcesKey: "resources"}
			units = append(units, w)
			services = append(services, s)
		}
	}
	defer func() {
		for i, s := range services {
			w := units[len(units)-len(services)+i]
			s.Resources, s.Variables, s.resourcesKey = w.Resources, w.Variables, w.resourcesKey
		}
	}()
	for _, w := range units {
		if w.Resources == nil {
			w.Resources, w.resourcesKey = app.Resources, "resources"
		}
		if w.Resources == nil {
			return &fault.Input{File: app.File, Message: w.Subject + " declares no resources. " +
				"Declare them on it or as the context's 'resources', " +
				"or 'resources: null' to deploy it without any.",
				Hint: "like `resources: {cpu: [100m, 1], memory: [256Mi, 1Gi]}`"}
		}
		if err := heap(w); err != nil {
			return &fault.Input{File: app.File, Key: w.resourcesKey + ".memory", Message: w.Subject + ": " + err.Error(), Err: err,
				Hint: "a memory quantity is a number with an optional suffix K, M, G, T, P, E or Ki, Mi, Gi, Ti, Pi, Ei, like 512Mi"}
		}
	}
	return nil
}

// heapShare is the part of the memory limit the heap may take. Node sizes its heap by the
// machine's memory, not the container's: without a limit of its own the heap grows past the
// container's and the pod is killed instead of collected. The rest is the process itself.
const heapShare = 0.75

// heap appends NODE_OPTIONS=--max-old-space-size=<75% of the memory limit in MiB>, unless the
// workload has no memory limit or states NODE_OPTIONS itself.
func heap(w *Workload) error {
	if w.Resources.None || w.Resources.Memory == nil {
		return nil
	}
	for _, v := range w.Variables {
		if v.Name == "NODE_OPTIONS" {
			return nil
		}
	}
	bytes, err := quantity(w.Resources.Memory.Limit)
	if err != nil {
		return err
	}
	megabytes := math.Floor(bytes * heapShare / (1 << 20))
	w.Variables = append(w.Variables, Variable{Name: "NODE_OPTIONS",
		Value: "--max-old-space-size=" + strconv.FormatFloat(megabytes, 'f', -1, 64)})
	return nil
}

var quantityPattern = regexp.MustCompile(`^(\d+(?:\.\d+)?)([KMGTPE]i?|[kmun])?$`)

// quantitySuffixes are the scales of the memory suffixes; k, m, u and n are quantities but not
// of memory.
var quantitySuffixes = map[string]float64{
	"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
	"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60,
}

// quantity reads a Kubernetes memory quantity in bytes, as Toa 289's quantity() does, with its
// messages.
func quantity(value string) (float64, error) {
	m := quantityPattern.FindStringSubmatch(value)
	if m == nil {
		return 0, fmt.Errorf("'%s' is not a quantity", value)
	}
	scale, ok := quantitySuffixes[m[2]]
	if !ok {
		return 0, fmt.Errorf("'%s' is not a memory quantity", value)
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("'%s' is not a quantity", value)
	}
	return n * scale, nil
}
