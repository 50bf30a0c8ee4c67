package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	yamlv2 "go.yaml.in/yaml/v2"
	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/types"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
	"github.com/toa-deploy/toa-deploy/internal/kinds"
)

// ContextLabel is the label every object of an application carries: the Toa context's name.
const ContextLabel = "toa/context"

// KustomizationFile is the name of the kustomization in the folder.
const KustomizationFile = "kustomization.yaml"

// header opens the kustomization toa-push writes; a folder whose kustomization starts with it is
// toa-push's to replace.
const header = "# Written by toa-push"

// Kustomization returns the files of the application's kustomization: a file per kind of object
// (deployments.yaml, services.yaml, ...) in the order they are applied, and kustomization.yaml
// naming them, pinning the images (by digest where it is known, else by tag; an image with
// neither is left out) and labelling every object with `toa/context: <contextName>` without
// touching selectors, which are immutable on a Deployment.
func Kustomization(objects []Object, images []types.Image, contextName string) (map[string][]byte, error) {
	files, err := MarshalObjects(objects)
	if err != nil {
		return nil, err
	}
	return files.Kustomization(images, contextName)
}

// ObjectFiles are the objects of a kustomization written out, a file per kind, before the
// images' digests are known: they name images by repository alone, and kustomization.yaml pins
// them. toa-push marshals them while the images are pushed.
type ObjectFiles struct {
	files map[string][]byte
	kinds []string // a file each, in the order they are applied
}

// MarshalObjects writes each object as kubectl prints it, into the file of its kind.
func MarshalObjects(objects []Object) (*ObjectFiles, error) {
	o := &ObjectFiles{files: map[string][]byte{}}
	for _, obj := range objects {
		kind := obj.GetObjectKind().GroupVersionKind().Kind
		if kind == "" {
			return nil, fmt.Errorf("object %s has no kind", obj.GetName())
		}
		data, err := marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("write %s %s: %w", kind, obj.GetName(), err)
		}
		name := fileName(kind)
		if _, seen := o.files[name]; seen {
			o.files[name] = append(append(o.files[name], "---\n"...), data...)
		} else {
			o.files[name] = data
			o.kinds = append(o.kinds, kind)
		}
	}
	slices.SortStableFunc(o.kinds, func(a, b string) int { return kinds.Stage(a) - kinds.Stage(b) })
	return o, nil
}

// Kustomization returns the objects' files and kustomization.yaml naming them, pinning images
// and labelling every object with the context (see the function Kustomization). o is unchanged.
func (o *ObjectFiles) Kustomization(images []types.Image, contextName string) (map[string][]byte, error) {
	k := types.Kustomization{
		TypeMeta: types.TypeMeta{APIVersion: types.KustomizationVersion, Kind: types.KustomizationKind},
		Labels:   []types.Label{{Pairs: map[string]string{ContextLabel: contextName}, IncludeSelectors: false}},
	}
	for _, kind := range o.kinds {
		k.Resources = append(k.Resources, fileName(kind))
	}
	seen := map[string]bool{}
	for _, img := range images {
		if img.Name == "" || seen[img.Name] || (img.Digest == "" && img.NewTag == "") {
			continue
		}
		seen[img.Name] = true
		e := types.Image{Name: img.Name, Digest: img.Digest}
		if img.Digest == "" {
			e.NewTag = img.NewTag
		}
		k.Images = append(k.Images, e)
	}
	data, err := encodeKustomization(&k)
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", KustomizationFile, err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s for the Toa context '%s'. toa-push replaces this folder whole:\n", header, contextName)
	b.WriteString("# change the application, or overlay this folder from one beside it, rather than edit it.\n")
	b.Write(data)
	files := maps.Clone(o.files)
	files[KustomizationFile] = b.Bytes()
	return files, nil
}

// encodeKustomization writes k as YAML in the order people write kustomizations in (apiVersion
// and kind first, the resources before what is done to them), each label's includeSelectors
// written out even when false: the README tells users to keep it false in their overlays, and
// the file they copy from should show it.
func encodeKustomization(k *types.Kustomization) ([]byte, error) {
	var doc yaml.Node
	if err := doc.Encode(k); err != nil {
		return nil, err
	}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value != "labels" {
			continue
		}
		for _, label := range doc.Content[i+1].Content {
			if !hasKey(label, "includeSelectors") {
				label.Content = append(label.Content,
					&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "includeSelectors"},
					&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "false"})
			}
		}
	}
	sortKeys(&doc, []string{"apiVersion", "kind", "labels", "resources"})
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// sortKeys puts the keys of a mapping named in first before the others, in that order; the
// others keep theirs.
func sortKeys(mapping *yaml.Node, first []string) {
	type pair struct{ key, value *yaml.Node }
	pairs := make([]pair, 0, len(mapping.Content)/2)
	for i := 0; i+1 < len(mapping.Content); i += 2 {
		pairs = append(pairs, pair{mapping.Content[i], mapping.Content[i+1]})
	}
	rank := func(p pair) int {
		if i := slices.Index(first, p.key.Value); i >= 0 {
			return i
		}
		return len(first)
	}
	slices.SortStableFunc(pairs, func(a, b pair) int { return rank(a) - rank(b) })
	mapping.Content = mapping.Content[:0]
	for _, p := range pairs {
		mapping.Content = append(mapping.Content, p.key, p.value)
	}
}

func hasKey(mapping *yaml.Node, key string) bool {
	for i := 0; i+1 < len(mapping.Content); i += 2 {
		if mapping.Content[i].Value == key {
			return true
		}
	}
	return false
}

// fileName is the file a kind of object goes to: its plural, as kubectl spells resources.
func fileName(kind string) string {
	k := strings.ToLower(kind)
	switch {
	case strings.HasSuffix(k, "s"):
		k += "es"
	case strings.HasSuffix(k, "y"):
		k = strings.TrimSuffix(k, "y") + "ies"
	default:
		k += "s"
	}
	return k + ".yaml"
}

// marshal writes an object as kubectl prints it, without the fields a typed object cannot leave
// out (creationTimestamp: null, status, resources: {}).
// It makes the bytes sigs.k8s.io/yaml's Marshal of the unstructured object made, by a shorter
// way: encoding/json's map (numbers kept as written) straight into the YAML encoder that
// sigs.k8s.io/yaml calls, rather than runtime's unstructured converter (whose reflection cache a
// process of a handful of objects builds for each) and a JSON text that YAML's parser reads back.
func marshal(obj runtime.Object) ([]byte, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	delete(m, "status") // what the cluster reports, never what is applied
	prune(m)
	return yamlv2.Marshal(m)
}

func prune(m map[string]any) {
	for k, v := range m {
		switch v := v.(type) {
		case nil:
			delete(m, k)
		case map[string]any:
			prune(v)
			if len(v) == 0 && k == "resources" {
				delete(m, k)
			}
		case []any:
			for _, item := range v {
				if im, ok := item.(map[string]any); ok {
					prune(im)
				}
			}
		}
	}
}

// ReadKustomization reads the files of a kustomization toa-push wrote (a flat folder, the one
// KustomizationFiles made) and its kustomization.yaml. A folder toa-push did not write, or one
// holding anything but files, is a *fault.Input.
func ReadKustomization(dir string) (map[string][]byte, *types.Kustomization, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, &fault.Input{File: dir, Message: "holds no kustomization toa-push wrote: " + err.Error(), Err: err}
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			return nil, nil, &fault.Input{File: filepath.Join(dir, e.Name()), Message: "is not a file, and toa-push writes only files into a kustomization"}
		}
		data, err := fsys.ReadFile(filepath.Join(dir, e.Name()), fsys.MaxLockSize)
		if err != nil {
			return nil, nil, fmt.Errorf("read the kustomization in %s: %w", dir, err)
		}
		files[e.Name()] = data
	}
	data, ok := files[KustomizationFile]
	if !ok || !bytes.HasPrefix(data, []byte(header)) {
		return nil, nil, &fault.Input{File: filepath.Join(dir, KustomizationFile), Message: "is not a kustomization toa-push wrote"}
	}
	var k types.Kustomization
	if err := sigsyaml.Unmarshal(data, &k); err != nil {
		return nil, nil, &fault.Input{File: filepath.Join(dir, KustomizationFile), Message: err.Error(), Err: err}
	}
	return files, &k, nil
}

// CheckKustomizationDir refuses, before any work, a folder WriteKustomization would refuse: one
// that is not a folder, or holds files toa-push did not write. A missing folder is fine.
func CheckKustomizationDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	_, err = replaceable(abs)
	return err
}

// WriteKustomization writes the files into dir, replacing what an earlier write left there. The
// files are written into a folder beside dir first and moved into place when all are written,
// so dir is never half written. A dir that holds anything else is left alone: the
// *fault.Input says so.
func WriteKustomization(dir string, files map[string][]byte) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if _, err := replaceable(abs); err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	err = fsys.ReplaceDir(abs, 0o755, func(tmp string) error {
		for _, name := range names {
			if err := writeFile(filepath.Join(tmp, name), files[name]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write the kustomization: %w", err)
	}
	return nil
}

// replaceable says whether dir exists, and refuses a dir that is not an earlier kustomization of
// toa-push's or an empty folder.
func replaceable(dir string) (bool, error) {
	info, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, &fault.Input{File: dir, Message: "cannot be read: " + err.Error(), Err: err,
			Hint: "give --kustomization a folder toa-push can write"}
	}
	refuse := func(what string) error {
		return &fault.Input{File: dir, Message: what + ": toa-push writes the kustomization there, and would replace it",
			Hint: "give --kustomization a folder of its own, like `deployment`, or remove this one"}
	}
	if !info.IsDir() {
		return false, refuse("is not a folder")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, &fault.Input{File: dir, Message: "cannot be read: " + err.Error(), Err: err,
			Hint: "give --kustomization a folder toa-push can write"}
	}
	if len(entries) == 0 {
		return true, nil
	}
	// read within a bound and without blocking: a link to /dev/zero or a named pipe there is
	// refused by name, never read without end
	data, err := fsys.ReadFile(filepath.Join(dir, KustomizationFile), fsys.MaxYAMLSize)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	var k types.Kustomization
	if err != nil || !bytes.HasPrefix(data, []byte(header)) || sigsyaml.Unmarshal(data, &k) != nil {
		return false, refuse("holds files toa-push did not write")
	}
	written := map[string]bool{KustomizationFile: true}
	for _, r := range k.Resources {
		written[r] = true
	}
	var others []string
	for _, e := range entries {
		switch {
		case e.IsDir():
			others = append(others, e.Name()+"/")
		case !written[e.Name()] || !e.Type().IsRegular():
			others = append(others, e.Name())
		}
	}
	if len(others) > 0 {
		return false, refuse("holds files toa-push did not write (" + strings.Join(others, ", ") + ")")
	}
	return true, nil
}

func writeFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
