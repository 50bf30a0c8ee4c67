package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/toa-deploy/toa-deploy/internal/app/lockfile"
	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/layer"
)

// Service is an extension's service whose image toa-push builds: the extension's installed
// package, served by the runtime (`toa serve .`), as Toa's service.Dockerfile builds it.
type Service struct {
	Name      string // the image's name: "extension-<group>-<name>"
	Reference string // the package that declares it
	Dir       string // the package's installed folder
	Version   string // the service's version, as the package declares it
}

// ServiceFolder is where a service's package is in its image: /composition/service, the
// working folder of `toa serve .`. Toa's image has it at /service; the layers toa-push makes put
// what they hold under /composition, and the runtime serves the folder it is started in.
const ServiceFolder = layer.Root + "/service"

// ServiceBase is the base of every service image: registry.build.image, else the runtime image
// of the context's runtime version (a service's build knows no composition image).
func ServiceBase(app *toa.Application) string {
	if app.Registry.Build.Image != "" {
		return app.Registry.Build.Image
	}
	return DefaultBase + ":" + app.Runtime.Version
}

// serviceImage names the image of a service: the repository
// `<registry.base>/<context>/extension-<group>-<name>`, tagged as Toa tags images, by the
// runtime's version and the image's version. The image's version covers what the build reads
// rather than the service's version alone: the package's files, the base's digests, the runner's
// node and npm, and the npm registry and proxy, so that a changed package or base is a new tag.
func serviceImage(app *toa.Application, s Service, opts PlanOptions, warnings *[]string) (*Image, error) {
	img := &Image{
		Name:       s.Name,
		Repository: path.Join(app.Registry.Base, app.Name, s.Name),
		Service:    &s,
		Base:       ServiceBase(app),
		BaseFrom:   "the services' base",
	}
	base, ok := img.takeBase(app, opts)
	if !ok {
		return img, nil
	}
	platforms, err := base.Select(app, warnings)
	if err != nil {
		return nil, err
	}
	img.Platforms = platforms
	files, err := toa.HashFiles(s.Dir)
	if err != nil {
		return nil, fmt.Errorf("%s: hash the files of %s: %w", s.Name, s.Dir, err)
	}
	h := sha256.New()
	for _, in := range []string{s.Version, files, base.Pairs(platforms), "node " + opts.Toolchain.Node,
		"npm " + opts.Toolchain.Npm, app.Runtime.Registry, app.Runtime.Proxy} {
		io.WriteString(h, in)
		h.Write([]byte{0})
	}
	img.Version = hex.EncodeToString(h.Sum(nil))[:8]
	img.Tag = Tag(app.Runtime.Version, img.Version)
	return img, nil
}

// serviceComponent is the package as the layer package makes layers of a component: its files
// at ServiceFolder, and its production dependencies installed by npm beside them.
func serviceComponent(s *Service) (*toa.Component, error) {
	dir, err := filepath.EvalSymlinks(s.Dir) // `npm install` links a file: dependency
	if err != nil {
		return nil, fmt.Errorf("%s: the package %s: %w", s.Name, s.Reference, err)
	}
	c := &toa.Component{Path: dir, Locator: toa.Locator{ID: s.Reference, Label: path.Base(ServiceFolder)}, Lockfile: lockfile.Find(dir)}
	p := filepath.Join(dir, "package.json")
	if _, err := os.Stat(p); err == nil {
		c.PackageJSON = p
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return c, nil
}

// buildService builds a service's image for each platform, the daemonless way compositions are
// built: its base, the package's dependencies, the package, and `toa serve .` in its folder.
func (b *builder) buildService(ctx context.Context, img *Image, pushed *Pushed) error {
	src := b.opts.Registries.Counted() // the base, read from its registry or its mirror
	var sent Sent
	defer func() {
		_, requests := src.Sent()
		pushed.BytesSent, pushed.Requests = sent.Bytes, sent.Requests+requests
	}()
	c, err := serviceComponent(img.Service)
	if err != nil {
		return err
	}
	sources, err := b.opts.Layers.Sources([]*toa.Component{c})
	if err != nil {
		return fmt.Errorf("%s: write the package %s: %w", img.Name, img.Service.Reference, err)
	}
	var images []v1.Image
	var targets []Target
	for _, platform := range img.Platforms {
		base, target, err := b.base(ctx, src, img, platform)
		if err != nil {
			return err
		}
		b.opts.Events(Event{img.Name, "installing the dependencies of " + img.Service.Reference + " for " + platform})
		var adds []mutate.Addendum
		deps, err := b.opts.Layers.Dependencies(ctx, c, target, dependencyBudget(base, 0, 1))
		if err != nil {
			return fmt.Errorf("%s: install the dependencies of %s for %s: %w", img.Name, img.Service.Reference, platform, err)
		}
		adds = append(adds, dependencyAddenda(deps, img.Service.Reference, b.created)...)
		adds = append(adds, addendum(sources, img.Service.Reference, b.created))
		out, err := mutate.Append(base, adds...)
		if err != nil {
			return err
		}
		cfg, err := out.ConfigFile()
		if err != nil {
			return fmt.Errorf("%s: read the config of the base: %w", img.Name, err)
		}
		cfg = cfg.DeepCopy()
		cfg.Config.Env = setEnv(cfg.Config.Env, "NODE_ENV", "production")
		cfg.Config.WorkingDir = "/" + ServiceFolder
		// the base's USER stays, as 289's service Dockerfile, which sets none, kept it
		cfg.Config.Cmd = []string{"toa", "serve", "."}
		if out, err = mutate.ConfigFile(out, cfg); err != nil {
			return err
		}
		if out, err = mutate.CreatedAt(out, b.created); err != nil {
			return err
		}
		if out, err = withoutLayerTimes(out); err != nil {
			return err
		}
		images = append(images, out)
		targets = append(targets, target)
	}
	idx, err := index(images, targets, nil)
	if err != nil {
		return err
	}
	if err := b.attach(ctx, img, idx, images, nil, targets, pushed, &sent); err != nil {
		return err
	}
	return b.publish(ctx, img, idx, pushed, &sent)
}
