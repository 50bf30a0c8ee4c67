package kustomize

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/sync/errgroup"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// kustomize checks each object it adds against every object before it, several times over (the
// resources read, the local ones dropped, the name references, the sort): a render of n objects
// costs n² walks of YAML. At 1,000 compositions (3,000 objects) that was 10 s of the 11 s
// render, a tenth of a first apply. When nothing in a kustomization ties one object to another
// (no name or namespace changed, no patch, no generator: its objects are its own files with
// labels and annotations over them, and images Render applies itself), Render has kustomize
// render its objects in parts of defaultPartSize documents, two at once, and then does what
// kustomize does across them: refuses two objects of one ID (by rendering whole, so that
// kustomize says it). The parts' objects, one after the other, are in kustomize's order, which
// is the documents' (krusty's default does not reorder). TestRenderInParts holds the result to
// kustomize's whole render.

// defaultPartSize is how many documents one part holds, and partsAtOnce how many parts are
// rendered at once: what one part's render leaves for the collector is held twice at most.
const (
	defaultPartSize = 200
	partsAtOnce     = 2
)

// errNotPartable is a kustomization, or a set of objects, that Render must render whole.
var errNotPartable = errors.New("not renderable in parts")

// partable says whether the deferred kustomization k ties no object to another: beside its
// resources and images it has labels, annotations and metadata only.
func partable(k types.Kustomization) bool {
	k.TypeMeta, k.MetaData = types.TypeMeta{}, nil
	k.Resources, k.Images = nil, nil
	//lint:ignore SA1019 commonLabels still works, per object, as labels does
	k.CommonLabels = nil
	k.Labels, k.CommonAnnotations = nil, nil
	return reflect.DeepEqual(k, types.Kustomization{})
}

// renderInParts renders d's objects in parts of partSize documents and applies its images to
// them: errNotPartable where the objects are too few for parts to help or kustomize must see
// them together.
func renderInParts(ctx context.Context, fs filesys.FileSystem, d *deferred, partSize int) ([]*resource.Resource, error) {
	if !d.partable {
		return nil, errNotPartable
	}
	texts, err := partTexts(fs, d.resources, partSize)
	if err != nil {
		return nil, err
	}
	kustomization, err := partKustomization(d)
	if err != nil {
		return nil, err
	}
	rendered := make([][]*resource.Resource, len(texts))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(partsAtOnce)
	for i, text := range texts {
		g.Go(func() error {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			res, err := renderPart(d, kustomization, text)
			rendered[i] = res
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	all := slices.Concat(rendered...) // in the documents' order, as kustomize's (krusty's default: no reordering)
	if !distinct(all) {
		return nil, errNotPartable
	}
	return all, nil
}

// partTexts are the documents of the resource files in parts of partSize, each part's as one
// YAML stream of the documents' own text; errNotPartable where they are fewer than two parts.
// The documents are cut apart where kustomize cuts them, not parsed: parsing them here was a
// serial pass over every object before the parts (a sixth of a render's processor at 1,000
// compositions), and kustomize parses each part anyway, side by side. A stream cut wrongly
// fails kustomize's parse of its part, and Render renders whole.
func partTexts(fs filesys.FileSystem, files []string, partSize int) ([]string, error) {
	var texts []string
	var part strings.Builder
	n := 0
	for _, f := range files {
		data, err := fs.ReadFile(f)
		if err != nil {
			return nil, errNotPartable // kustomize says what is wrong with the file
		}
		for _, doc := range documents(data) {
			if n > 0 {
				part.WriteString("\n---\n")
			}
			part.Write(doc)
			if n++; n == partSize {
				texts, n = append(texts, part.String()), 0
				part.Reset()
			}
		}
	}
	if n > 0 {
		texts = append(texts, part.String())
	}
	if len(texts) < 2 {
		return nil, errNotPartable
	}
	return texts, nil
}

// documentSeparator is kyaml's (kio.ByteReader's): a line that starts with "---", after the
// stream's first line; kustomize refuses one with anything but a comment after the dashes.
var documentSeparator = regexp.MustCompile(`\n---.*\n`)

// documents cuts a YAML stream into its documents where kustomize cuts it (kio.ByteReader),
// without the separators: joined again by plain separators, kustomize reads the same documents
// from them. Documents of white space alone are left out, as kustomize leaves them.
func documents(data []byte) [][]byte {
	var docs [][]byte
	prev := 0
	for _, at := range documentSeparator.FindAllIndex(data, -1) {
		docs = appendDocument(docs, data[prev:at[0]])
		prev = at[1]
	}
	return appendDocument(docs, data[prev:])
}

func appendDocument(docs [][]byte, doc []byte) [][]byte {
	if len(bytes.TrimSpace(doc)) == 0 {
		return docs
	}
	return append(docs, doc)
}

// hasList says whether a part holds a List, whose items kustomize puts at its file's end, out
// of the documents' order. A kind ending in List is written with those letters, or through an
// escape in a quoted scalar: a part with neither cannot hold one, and is not parsed here.
func hasList(text string) (bool, error) {
	if !strings.Contains(text, "List") && !strings.Contains(text, "\\") {
		return false, nil
	}
	nodes, err := kio.FromBytes([]byte(text))
	if err != nil {
		return false, err
	}
	for _, n := range nodes {
		if strings.HasSuffix(n.GetKind(), "List") {
			return true, nil
		}
	}
	return false, nil
}

// partKustomization is d's kustomization without its images, whose one resource is part.yaml:
// the same for every part.
func partKustomization(d *deferred) (string, error) {
	k, err := yaml.Parse(string(d.stripped))
	if err != nil {
		return "", errNotPartable
	}
	if err := k.PipeE(yaml.SetField("resources", yaml.NewListRNode("part.yaml"))); err != nil {
		return "", errNotPartable
	}
	text, err := k.String()
	if err != nil {
		return "", errNotPartable
	}
	return text, nil
}

// renderPart renders one part's documents with the part's kustomization, d's images applied
// after.
func renderPart(d *deferred, kustomization, text string) ([]*resource.Resource, error) {
	if list, err := hasList(text); list || err != nil {
		return nil, errNotPartable // rendered whole: kustomize's order, or its words
	}
	mem := filesys.MakeFsInMemory()
	for name, data := range map[string]string{"kustomization.yaml": kustomization, "part.yaml": text} {
		if err := mem.WriteFile(filepath.Join("/part", name), []byte(data)); err != nil {
			return nil, fmt.Errorf("render in parts: %w", err)
		}
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, "/part")
	if err != nil {
		return nil, errNotPartable // rendered whole, kustomize's error names the user's files
	}
	if err := d.applyImages(m); err != nil {
		return nil, err
	}
	return m.Resources(), nil
}

// distinct says whether no two objects of the parts share an ID; where two do, Render renders
// whole, so that kustomize refuses them in its own words.
func distinct(all []*resource.Resource) bool {
	seen := make(map[resid.ResId]bool, len(all))
	for _, r := range all {
		id := r.CurId()
		if seen[id] {
			return false
		}
		seen[id] = true
	}
	return true
}
