// Package kustomize renders a kustomization, toa-push's or a user's overlay of it, in memory with
// kustomize's own API, and sorts objects into the order they are applied in (Sort, by the order
// of internal/kinds, which toa-push also writes in). It is toa-apply's side: what writes the
// kustomization is toa-push's, in the manifest package, and this package imports nothing of the
// push side.
package kustomize

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/kinds"
)

// Render renders the kustomization in dir of fs, as `kubectl kustomize dir` does, and returns
// its objects in the order they are applied (see Sort). fs is OnDisk() for a user's folder and
// filesys.MakeFsInMemory() in tests. A kustomization kustomize refuses is a *fault.Input: the
// user's input. Rendering ends when ctx does (a *fault.Timeout): kustomize takes no context. The
// remote resources an overlay names are fetched with a client of this render's (remoteFiles,
// WithHTTPClient), bounded to MaxRemoteSize, within ctx.
func Render(ctx context.Context, fs filesys.FileSystem, dir string, opts ...Option) ([]*unstructured.Unstructured, error) {
	o := options{}
	for _, opt := range opts {
		opt(&o)
	}
	if o.client == nil {
		o.client = RemoteClient()
	}
	m, err := render(ctx, fs, dir, o, true)
	if errors.Is(err, errNotDeferrable) {
		m, err = render(ctx, fs, dir, o, false)
	}
	if err != nil {
		return nil, err
	}
	return objectsOf(m, dir)
}

// objectsOf are the rendered objects, in the order they are applied. They are converted on
// every core: at 1,000 compositions the conversion was a tenth of a render's processor, after
// the parts.
func objectsOf(rendered []*resource.Resource, dir string) ([]*unstructured.Unstructured, error) {
	out := make([]*unstructured.Unstructured, len(rendered))
	workers := max(1, runtime.GOMAXPROCS(0))
	var g errgroup.Group
	for w := range workers {
		g.Go(func() error {
			for i := w; i < len(rendered); i += workers {
				obj, err := objectOf(rendered[i], dir)
				if err != nil {
					return err
				}
				out[i] = obj
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	Sort(out)
	return out, nil
}

// objectOf converts a rendered resource through JSON, so that numbers are int64 and float64 as
// client-go expects them.
func objectOf(r *resource.Resource, dir string) (*unstructured.Unstructured, error) {
	data, err := r.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("render %s: %s: %w", dir, r.CurId(), err)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("render %s: %s: %w", dir, r.CurId(), err)
	}
	return obj, nil
}

// render runs kustomize on dir, with the kustomization's images applied after it where they
// may be (deferImages) and defer allows, and its objects rendered in parts where they may be
// (renderInParts).
func render(ctx context.Context, fs filesys.FileSystem, dir string, o options, deferral bool) ([]*resource.Resource, error) {
	type rendered struct {
		m   []*resource.Resource
		err error
	}
	remote := newRemoteFiles(ctx, fs, o.client)
	d, deferred := deferImages(fs, dir)
	if deferred && deferral {
		remote.override(d.path, d.stripped)
	}
	done := make(chan rendered, 1)
	go func() { // left behind when ctx ends first: the command exits with the timeout
		if deferred && deferral {
			res, err := renderInParts(ctx, fs, d, cmp.Or(o.partSize, defaultPartSize))
			if !errors.Is(err, errNotPartable) {
				done <- rendered{res, err}
				return
			}
		}
		m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(remote, dir)
		if err == nil && deferred && deferral {
			err = d.applyImages(m)
		}
		var res []*resource.Resource
		if err == nil {
			res = m.Resources()
		}
		done <- rendered{res, err}
	}()
	select {
	case r := <-done:
		if errors.Is(r.err, errNotDeferrable) {
			return nil, r.err
		}
		if ctx.Err() != nil && r.err != nil { // a fetch the context ended
			return nil, timedOut(ctx, dir)
		}
		if err := remote.failed(); err != nil {
			return nil, &fault.Input{File: dir, Message: err.Error()}
		}
		if r.err != nil { // kustomize keeps only the words of the errors it wraps, OnDisk's too
			return nil, &fault.Input{File: dir, Message: "kustomize: " + r.err.Error()}
		}
		return r.m, nil
	case <-ctx.Done():
		return nil, timedOut(ctx, dir)
	}
}

func timedOut(ctx context.Context, dir string) error {
	return fault.TimedOut(fmt.Errorf("render %s: kustomize did not finish (%w): does it name a remote resource (a URL, a git repository) that does not answer?", dir, context.Cause(ctx)))
}

// YAML writes objects as one YAML stream, `---` between them, keys sorted as kubectl prints them.
func YAML(objects []*unstructured.Unstructured) ([]byte, error) {
	var b bytes.Buffer
	for i, obj := range objects {
		data, err := sigsyaml.Marshal(obj.Object)
		if err != nil {
			return nil, fmt.Errorf("print %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(data)
	}
	return b.Bytes(), nil
}

// Sort puts objects in the order they are applied (DESIGN.md "Apply and wait"): Namespaces and
// CRDs, then ServiceAccounts, RBAC, ConfigMaps and Secrets, then what workloads need besides
// (claims, policies, quotas), then Services, then workloads, then Ingress, then anything else,
// like a CRD's objects. Objects of one rank keep their order.
func Sort(objects []*unstructured.Unstructured) {
	slices.SortStableFunc(objects, func(a, b *unstructured.Unstructured) int {
		return kinds.Stage(a.GetKind()) - kinds.Stage(b.GetKind())
	})
}
