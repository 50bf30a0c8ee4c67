package kustomize

import (
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	"sigs.k8s.io/kustomize/api/filters/imagetag"
	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// kustomize applies a kustomization's `images:` one entry at a time to every object, walking
// each object whole and compiling a regular expression for every image it meets: entries ×
// objects walks. toa-push pins each image with an entry, so an application of 1,000
// compositions is 1,000 entries over 3,000 objects, three million walks: more than five minutes
// of kustomize's time, where the rest of the render takes seconds. So, when the kustomization
// Render is given is one whose `images:` kustomize applies last of what could touch an image (see
// deferImages), Render has kustomize render it without them and then applies them itself, with
// kustomize's own image filters, to each object only for the entries that match one of its
// images, in the entries' order, as kustomize would have: a walk an object and an entry that
// matches. TestDeferredImages holds both ways to the same output.

// deferred is a kustomization whose images Render applies after kustomize.
type deferred struct {
	path     string // the kustomization file, absolute
	stripped []byte // its text without images and imageTags
	images   []types.Image
	// resources are its resource files, absolute; partable that nothing in it ties one
	// object to another (renderInParts)
	resources []string
	partable  bool
	// index is the images' index, made once for all parts (sync.OnceValue): each part made
	// its own, a thousand regular expressions compiled for each of fifteen parts
	index func() *imageIndex
}

// imageName is what an images entry's name may hold for the deferral: its only regular
// expression character (kustomize puts the name in one unquoted) is '.', one character.
var imageName = regexp.MustCompile(`^[a-zA-Z0-9._/:-]+$`)

// deferImages says whether the kustomization in dir has images Render may apply after kustomize,
// and which. It may when they are the last thing kustomize would do to an image: the
// kustomization's resources are files of its own folder (no base that could bring vars,
// configurations or images of its own), and it has none of what runs after images or changes
// where they are (replacements, vars, components, configurations, crds, generators, transformers,
// validators, build metadata, Helm charts).
func deferImages(fs filesys.FileSystem, dir string) (*deferred, bool) {
	abs, _, err := fs.CleanedAbs(dir)
	if err != nil {
		return nil, false
	}
	var path string
	for _, name := range konfig.RecognizedKustomizationFileNames() {
		if p := filepath.Join(abs.String(), name); fs.Exists(p) {
			if path != "" {
				return nil, false // kustomize refuses two: let it
			}
			path = p
		}
	}
	if path == "" {
		return nil, false
	}
	data, err := fs.ReadFile(path)
	if err != nil {
		return nil, false
	}
	var k types.Kustomization
	if err := k.Unmarshal(data); err != nil {
		return nil, false
	}
	k.FixKustomization()
	//lint:ignore SA1019 a kustomization may still have vars, which kustomize resolves after images
	vars := len(k.Vars)
	if len(k.Images) == 0 || (k.Kind != "" && k.Kind != types.KustomizationKind) ||
		len(k.Replacements)+vars+len(k.Components)+len(k.Configurations)+len(k.Crds)+len(k.Generators)+
			len(k.Transformers)+len(k.Validators)+len(k.BuildMetadata)+len(k.HelmCharts)+len(k.HelmChartInflationGenerator) > 0 ||
		k.HelmGlobals != nil {
		return nil, false
	}
	var resources []string
	for _, r := range k.Resources {
		p := filepath.Join(abs.String(), r)
		if strings.Contains(r, "://") || fs.IsDir(p) || !fs.Exists(p) {
			return nil, false
		}
		resources = append(resources, p)
	}
	for _, img := range k.Images {
		if !imageName.MatchString(img.Name) {
			return nil, false
		}
	}
	node, err := yaml.Parse(string(data))
	if err != nil {
		return nil, false
	}
	for _, field := range []string{"images", "imageTags"} {
		if err := node.PipeE(yaml.Clear(field)); err != nil {
			return nil, false
		}
	}
	stripped, err := node.String()
	if err != nil {
		return nil, false
	}
	return &deferred{path: path, stripped: []byte(stripped), images: k.Images, resources: resources, partable: partable(k),
		index: sync.OnceValue(func() *imageIndex { return newImageIndex(k.Images) })}, true
}

// errNotDeferrable is an object the deferral cannot hold to kustomize's result: Render renders
// again with kustomize's own images.
var errNotDeferrable = errors.New("images not deferrable")

// imageFieldSpecs are kustomize's default fields of images (api/internal/konfig/
// builtinpluginconsts/images.go), which a kustomization without configurations keeps.
var imageFieldSpecs = func() []types.FieldSpec {
	var out []types.FieldSpec
	for _, p := range []string{"spec/containers[]/image", "spec/initContainers[]/image", "spec/volumes[]/image/reference",
		"spec/template/spec/containers[]/image", "spec/template/spec/initContainers[]/image",
		"spec/template/spec/volumes[]/image/reference", "spec/jobTemplate/spec/template/spec/volumes[]/image/reference"} {
		out = append(out, types.FieldSpec{Path: p, CreateIfNotPresent: true})
	}
	return out
}()

// applyImages applies the entries to the rendered objects as kustomize's ImageTagTransformer
// does (its LegacyFilter, then its Filter, one entry after the other), each to the objects it
// matches.
func (d *deferred) applyImages(m resmap.ResMap) error {
	ix := d.index()
	for _, r := range m.Resources() {
		for last := -1; ; {
			values, err := imageValues(&r.RNode)
			if err != nil {
				return err
			}
			next := ix.next(values, last)
			if next < 0 {
				break
			}
			img := d.images[next]
			if err := r.ApplyFilter(imagetag.LegacyFilter{ImageTag: img}); err != nil {
				return err
			}
			if err := r.ApplyFilter(imagetag.Filter{ImageTag: img, FsSlice: imageFieldSpecs}); err != nil {
				return err
			}
			last = next
		}
	}
	return nil
}

// imageValues are the values of every field named image or reference in node, what kustomize's
// image filters may change and more. A container's image that is not a string, which
// kustomize's filters refuse, is errNotDeferrable.
func imageValues(node *yaml.RNode) ([]string, error) {
	var out []string
	var walk func(n *yaml.Node, inContainers bool) error
	walk = func(n *yaml.Node, inContainers bool) error {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				key, value := n.Content[i].Value, n.Content[i+1]
				if (key == "image" || key == "reference") && value.Kind == yaml.ScalarNode {
					out = append(out, value.Value)
				}
				if key == "image" && inContainers && value.Kind != yaml.ScalarNode {
					return errNotDeferrable
				}
				if err := walk(value, key == "containers" || key == "initContainers"); err != nil {
					return err
				}
			}
		case yaml.SequenceNode:
			for _, c := range n.Content {
				// a list's elements are containers when the list is; kustomize's filters
				// refuse a container that is not a mapping
				if inContainers && c.Kind != yaml.MappingNode {
					return errNotDeferrable
				}
				if err := walk(c, inContainers); err != nil {
					return err
				}
			}
		case yaml.DocumentNode, yaml.AliasNode:
			for _, c := range n.Content {
				if err := walk(c, false); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return out, walk(node.YNode(), false)
}

// imageIndex finds the entries whose name matches an image, as kustomize's IsImageMatched
// decides it (the name as a regular expression, then a tag, then a digest), without trying each
// entry on each image: an entry's name takes exactly as many characters of the image as it has
// (its dots match any one), ending where the image ends or its tag or digest begins, so the
// entries are looked up by those characters, and only those found are matched.
type imageIndex struct {
	names  []string
	exact  map[string][]int // names without a dot
	dotted map[int]map[int]map[string][]int
	// dotted: names with a dot, by length, by the length of what follows their last dot, by that
}

// imageSuffix is what kustomize's pattern lets follow the name: a tag, then a digest.
var imageSuffix = regexp.MustCompile(`^(:[a-zA-Z0-9_.{}-]*)?(@[a-zA-Z0-9]+([.+_-][a-zA-Z0-9]+)*:[a-zA-Z0-9_.{}-]*)?$`)

func newImageIndex(images []types.Image) *imageIndex {
	ix := &imageIndex{exact: map[string][]int{}, dotted: map[int]map[int]map[string][]int{}}
	for i, img := range images {
		ix.names = append(ix.names, img.Name)
		dot := strings.LastIndexByte(img.Name, '.')
		if dot < 0 {
			ix.exact[img.Name] = append(ix.exact[img.Name], i)
			continue
		}
		tail := img.Name[dot+1:]
		byTail := ix.dotted[len(img.Name)]
		if byTail == nil {
			byTail = map[int]map[string][]int{}
			ix.dotted[len(img.Name)] = byTail
		}
		if byTail[len(tail)] == nil {
			byTail[len(tail)] = map[string][]int{}
		}
		byTail[len(tail)][tail] = append(byTail[len(tail)][tail], i)
	}
	return ix
}

// matches says whether entry i's name matches image v as kustomize's pattern does ("^" + name +
// imageSuffix), without compiling a pattern for each entry (a thousand of them were a tenth of a
// render's collector): a deferred name's only special character is '.' (imageName), so the name
// takes exactly its length of v, each dot one character but a line end, and the rest is the
// tag and digest. Where a dot meets a byte of a multi-byte character, which the pattern takes
// whole, the pattern itself decides.
func (ix *imageIndex) matches(i int, v string) bool {
	name := ix.names[i]
	if len(v) < len(name) {
		return false
	}
	for j := range len(name) {
		switch {
		case name[j] != '.':
			if name[j] != v[j] {
				return false
			}
		case v[j] == '\n':
			return false
		case v[j] >= utf8.RuneSelf:
			p, err := regexp.Compile("^" + name + imageSuffix.String()[1:])
			return err == nil && p.MatchString(v)
		}
	}
	return imageSuffix.MatchString(v[len(name):])
}

// next is the first entry after last that matches one of values, -1 when none does.
func (ix *imageIndex) next(values []string, last int) int {
	best := -1
	consider := func(candidates []int, v string) {
		for _, i := range candidates {
			if i > last && (best < 0 || i < best) && ix.matches(i, v) {
				best = i
			}
		}
	}
	for _, v := range values {
		for p := range len(v) + 1 {
			if p < len(v) && v[p] != ':' && v[p] != '@' {
				continue
			}
			consider(ix.exact[v[:p]], v)
			for tailLen, byTail := range ix.dotted[p] {
				if tailLen <= p {
					consider(byTail[v[p-tailLen:p]], v)
				}
			}
		}
	}
	return best
}
