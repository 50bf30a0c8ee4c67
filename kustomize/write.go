// Package kustomize hands the application's objects over as a kustomization: a plain folder that
// toa-apply, `kubectl apply -k`, Argo CD and Flux all read. Write puts the objects, an images
// entry per image and the `toa/context` label (which leaves selectors alone) into a folder, all
// at once; Render renders any kustomization, ours or a user's overlay of it, in memory with
// kustomize's own API, in the order objects are applied.
package kustomize

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/runtime"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/toa-deploy/toa-deploy/fault"
	"github.com/toa-deploy/toa-deploy/manifest"
)

// Image pins one image of the objects: the repository their containers name, and the digest it
// was pushed with or, where it is not pushed yet, its tag.
type Image struct {
	Name   string // the repository, as the containers name it
	Digest string // "sha256:..." when the registry has it
	NewTag string // the tag, when the digest is not known
}

// ContextLabel is the label every object of an application carries: the Toa context's name.
const ContextLabel = "toa/context"

// KustomizationFile is the name of the kustomization in the folder.
const KustomizationFile = "kustomization.yaml"

// header opens the kustomization Write writes; a folder whose kustomization starts with it is
// ours to replace.
const header = "# Written by toa-push"

// Files returns the files of the kustomization: a file per kind of object (deployments.yaml,
// services.yaml, ...) in the order they are applied, and kustomization.yaml naming them, pinning
// the images and labelling every object with `toa/context: <contextName>` without touching
// selectors, which are immutable on a Deployment.
func Files(objects []manifest.Object, images []Image, contextName string) (map[string][]byte, error) {
	files := map[string][]byte{}
	var kinds []string
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
		if _, seen := files[name]; seen {
			files[name] = append(append(files[name], "---\n"...), data...)
		} else {
			files[name] = data
			kinds = append(kinds, kind)
		}
	}
	slices.SortStableFunc(kinds, func(a, b string) int { return Stage(a) - Stage(b) })

	k := kustomization{
		APIVersion: "kustomize.config.k8s.io/v1beta1",
		Kind:       "Kustomization",
		Labels:     []label{{Pairs: map[string]string{ContextLabel: contextName}, IncludeSelectors: false}},
		Resources:  []string{},
	}
	for _, kind := range kinds {
		k.Resources = append(k.Resources, fileName(kind))
	}
	seen := map[string]bool{}
	for _, img := range images {
		if img.Name == "" || seen[img.Name] || (img.Digest == "" && img.NewTag == "") {
			continue
		}
		seen[img.Name] = true
		e := imageEntry{Name: img.Name, Digest: img.Digest}
		if img.Digest == "" {
			e.NewTag = img.NewTag
		}
		k.Images = append(k.Images, e)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s for the Toa context '%s'. toa-push replaces this folder whole:\n", header, contextName)
	b.WriteString("# change the application, or overlay this folder from one beside it, rather than edit it.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(k); err != nil {
		return nil, fmt.Errorf("write %s: %w", KustomizationFile, err)
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	files[KustomizationFile] = b.Bytes()
	return files, nil
}

type kustomization struct {
	APIVersion string       `yaml:"apiVersion"`
	Kind       string       `yaml:"kind"`
	Labels     []label      `yaml:"labels"`
	Resources  []string     `yaml:"resources"`
	Images     []imageEntry `yaml:"images,omitempty"`
}

type label struct {
	Pairs            map[string]string `yaml:"pairs"`
	IncludeSelectors bool              `yaml:"includeSelectors"`
}

type imageEntry struct {
	Name   string `yaml:"name"`
	NewTag string `yaml:"newTag,omitempty"`
	Digest string `yaml:"digest,omitempty"`
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
func marshal(obj runtime.Object) ([]byte, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	delete(m, "status") // what the cluster reports, never what is applied
	prune(m)
	return sigsyaml.Marshal(m)
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

// Write writes the kustomization of the objects into dir, replacing what an earlier Write left
// there. The files are written into a folder beside dir first and moved into place when all are
// written, so dir is never half written. A dir that holds anything else is left alone: the error
// says so.
func Write(dir string, objects []manifest.Object, images []Image, contextName string) error {
	files, err := Files(objects, images, contextName)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	exists, err := replaceable(abs)
	if err != nil {
		return err
	}
	parent := filepath.Dir(abs)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("write the kustomization: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(abs)+".new-")
	if err != nil {
		return fmt.Errorf("write the kustomization: %w", err)
	}
	defer os.RemoveAll(tmp) // gone by rename when all goes well
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("write the kustomization: %w", err)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := writeFile(filepath.Join(tmp, name), files[name]); err != nil {
			return fmt.Errorf("write the kustomization: %w", err)
		}
	}
	if !exists {
		if err := os.Rename(tmp, abs); err != nil {
			return fmt.Errorf("write the kustomization: %w", err)
		}
		return nil
	}
	old := tmp + ".old"
	if err := os.Rename(abs, old); err != nil {
		return fmt.Errorf("write the kustomization: move the old one aside: %w", err)
	}
	if err := os.Rename(tmp, abs); err != nil {
		if back := os.Rename(old, abs); back != nil {
			return fmt.Errorf("write the kustomization: %w (and the old one is left at %s: %v)", err, old, back)
		}
		return fmt.Errorf("write the kustomization: %w", err)
	}
	return os.RemoveAll(old)
}

// replaceable says whether dir exists, and refuses a dir that is not an earlier kustomization of
// ours or an empty folder.
func replaceable(dir string) (bool, error) {
	info, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
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
		return false, err
	}
	if len(entries) == 0 {
		return true, nil
	}
	data, err := os.ReadFile(filepath.Join(dir, KustomizationFile))
	if err != nil || !bytes.HasPrefix(data, []byte(header)) {
		return false, refuse("holds files toa-push did not write")
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
