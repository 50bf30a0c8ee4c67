package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/cli"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
	"github.com/toa-deploy/toa-deploy/internal/push/attest"
	"github.com/toa-deploy/toa-deploy/internal/push/image"
	"github.com/toa-deploy/toa-deploy/internal/push/pipeline"
	"github.com/toa-deploy/toa-deploy/internal/registry"
	"github.com/toa-deploy/toa-deploy/internal/sign"
	"github.com/toa-deploy/toa-deploy/layer"
)

type pushCommand struct {
	Env             string        `arg:"" optional:"" name:"ENV" help:"Environment, as Toa's 'toa deploy [environment]'; a chain like staging:production is allowed. Default: TOA_ENV, else 'default'."`
	Path            string        `name:"path" short:"p" default:"." placeholder:"DIR" help:"The context's folder (the one with context.toa.yaml)."`
	Plan            bool          `name:"plan" help:"Print what would be built, and build and push nothing."`
	Kustomization   string        `name:"kustomization" short:"k" placeholder:"DIR" help:"Where the kustomization goes. Default: deployment; with --oci-layout, DIR/kustomization."`
	Output          cli.Output    `name:"output" short:"o" default:"text" enum:"text,json" help:"text or json."`
	Mono            bool          `name:"mono" help:"One 'mono' image and deployment, as Toa's --mono."`
	Insecure        bool          `name:"insecure" help:"Allow registries with plain HTTP or certificates that do not verify."`
	CAFile          string        `name:"ca-file" type:"existingfile" placeholder:"FILE" help:"Trust this CA for registries."`
	ResolveTimeout  time.Duration `name:"resolve-timeout" default:"20s" help:"How long resolving a base may take."`
	Timeout         time.Duration `name:"timeout" default:"1h" help:"How long the whole run may take (a Go duration: 30m, 1h30m); past it toa-push stops, leaves no tag on an unfinished image, and exits 3."`
	StallTimeout    time.Duration `name:"stall-timeout" default:"60s" help:"How long a transfer may move no byte before it fails and is retried."`
	Retries         int           `name:"retries" default:"5" help:"How often a failed request or blob transfer is tried again (a broken or stalled connection, a registry's 5xx or 429), with jittered exponential backoff that honours Retry-After."`
	Mirror          []string      `name:"mirror" placeholder:"FROM=TO" help:"Read bases whose reference begins with FROM (a registry host, or host/path) from TO instead, e.g. ghcr.io=mirror.internal:5000/ghcr for Toa's runtime image. Repeatable; adds to TOA_MIRRORS (comma-separated FROM=TO), and overrides it for the same FROM. The mirror is recorded in the images' annotations; the tags stay the same."`
	OCILayout       string        `name:"oci-layout" placeholder:"DIR" help:"Write every image of the application, base layers included, into an OCI image layout in DIR (and the kustomization into DIR/kustomization) instead of pushing: no target registry is contacted. Carry DIR to the other side and run toa-push --from-oci-layout DIR there."`
	FromOCILayout   string        `name:"from-oci-layout" placeholder:"DIR" help:"Push the images of an OCI layout written by --oci-layout to the registry they name, and write its kustomization (-k, default deployment). Needs only DIR: no context, no sources, no npm."`
	SBOM            string        `name:"sbom" aliases:"sbom-format" placeholder:"FORMAT" enum:"spdx,cyclonedx,none" default:"spdx" help:"The SBOM attached to each image built, per platform, with its provenance (in-toto, SLSA v1): spdx (SPDX 2.3 JSON), cyclonedx (CycloneDX 1.6), or none for neither. They are OCI referrers of the image (the referrers tag where the registry has no referrers API)."`
	SignKey         string        `name:"sign-key" placeholder:"FILE" help:"Sign each image built, and its SBOM and provenance, in cosign's format with this ECDSA P-256 private key (PEM; cosign's encrypted key is opened with COSIGN_PASSWORD), or env://VAR for a PEM in the environment variable VAR; default: the PEM in TOA_SIGN_KEY, if set. Nothing goes to a transparency log: verify with cosign verify --key PUBLIC-KEY --insecure-ignore-tlog=true."`
	Compression     string        `name:"compression" enum:"gzip,zstd" default:"gzip" help:"How the layers toa-push makes are compressed: gzip, which every registry and runtime reads, or zstd (tar+zstd: containerd 1.5 and later, CRI-O, podman), smaller and faster to unpack. zstd images get tags of their own; images the registry already has are left as they are."`
	ScriptsOnRunner bool          `name:"scripts-on-runner" help:"Run the install scripts of a target that is this runner's own platform, libc and Node major with npm on the runner, as toa-push did before 2026-12, where they can read the runner's files (credentials, the signing key) and what they write goes into the image. For runners that can make no sandbox (an unprivileged user without user namespaces). By default every install script and build.run line runs inside the target's base, never on the runner."`
	ScriptNetwork   string        `name:"script-network" enum:"default,none" default:"default" help:"The network of install scripts and build.run lines in the base: default (the runner's, so that packages can download their prebuilt binaries) or none (loopback only, as RUN --network=none)."`
	Verbose         bool          `name:"verbose" short:"v" help:"Log what is done, step by step."`

	Artifact         string `name:"artifact" placeholder:"REF" help:"After the images, push the kustomization as an OCI artifact in Flux's format to REF (REGISTRY/REPOSITORY:TAG), signed with --sign-key like the images: Flux's OCIRepository or toa-apply oci://REF reads it. The same kustomization gives the same digest. With --oci-layout it goes into the layout, and --from-oci-layout pushes it."`
	ArtifactSource   string `name:"artifact-source" placeholder:"URL" help:"The artifact's org.opencontainers.image.source, as flux push artifact --source (e.g. the Git remote). Default: toa:CONTEXT."`
	ArtifactRevision string `name:"artifact-revision" placeholder:"REV" help:"The artifact's org.opencontainers.image.revision, as flux push artifact --revision (e.g. main@sha1:COMMIT). Default: the environment."`
	PruneCache       bool   `name:"prune-cache" help:"Prune the caches (TOA_CACHE, else ~/.cache/toa-deploy) to TOA_CACHE_MAX (default 5GiB) now, least recently used first, and do nothing else. Every run prunes them so at its end."`
}

// Validate refuses flags that cannot go together, before any work.
func (c *pushCommand) Validate() error {
	switch {
	case c.Timeout <= 0:
		return fmt.Errorf("--timeout is %s: give a positive duration, like 30m", c.Timeout)
	case c.StallTimeout <= 0:
		return fmt.Errorf("--stall-timeout is %s: give a positive duration, like 60s", c.StallTimeout)
	case c.Retries < 0:
		return fmt.Errorf("--retries is %d: give 0 or more", c.Retries)
	}
	if c.Artifact != "" && c.Plan {
		return fmt.Errorf("--plan pushes nothing, and takes no --artifact")
	}
	if c.Artifact == "" && (c.ArtifactSource != "" || c.ArtifactRevision != "") {
		return fmt.Errorf("--artifact-source and --artifact-revision describe the --artifact: give --artifact REF too")
	}
	if _, err := fsys.CacheMax(); err != nil {
		return err
	}
	if c.FromOCILayout == "" {
		if c.OCILayout != "" && c.Kustomization != "" && filepath.Clean(c.Kustomization) == filepath.Clean(c.OCILayout) {
			return fmt.Errorf("--kustomization cannot be the --oci-layout folder itself: leave it out (the kustomization goes to %s)", filepath.Join(c.OCILayout, "kustomization"))
		}
		return nil
	}
	for flag, set := range map[string]bool{"environment argument": c.Env != "", "--plan": c.Plan, "--mono": c.Mono,
		"--oci-layout": c.OCILayout != "", "--mirror": len(c.Mirror) > 0, "--sbom " + c.SBOM: c.SBOM != string(attest.SPDX), "--sign-key": c.SignKey != "", "--artifact (the layout holds the artifact --oci-layout wrote)": c.Artifact != ""} {
		if set {
			return fmt.Errorf("--from-oci-layout pushes the layout as --oci-layout wrote it, and takes no %s: give those where the layout is written", flag)
		}
	}
	return nil
}

// mirrors are TOA_MIRRORS', then --mirror's, a flag overriding the environment for the same FROM.
func (c *pushCommand) mirrors() (registry.Mirrors, error) {
	specs := strings.Split(os.Getenv("TOA_MIRRORS"), ",")
	m, err := registry.ParseMirrors(append(specs, c.Mirror...)...)
	if err != nil {
		return nil, fault.BadInput(err)
	}
	return m, nil
}

func (c *pushCommand) environment() string {
	if c.Env != "" {
		return c.Env
	}
	if env := os.Getenv("TOA_ENV"); env != "" {
		return env
	}
	return "default"
}

// Run runs the push under --timeout: running out of it exits 3, saying what was being done.
func (c *pushCommand) Run(ctx context.Context, log *logrus.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	if c.PruneCache {
		return c.pruneCache(ctx)
	}
	started := time.Now()
	err := c.run(ctx, log)
	boundCache(ctx, log, started)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fault.TimedOut(fmt.Errorf("toa-push ran out of time (--timeout %s): %w", c.Timeout, err))
	}
	return err
}

func (c *pushCommand) run(ctx context.Context, log *logrus.Logger) error {
	display := cli.NewDisplay(os.Stderr)
	opts, err := c.options(log, display)
	if err != nil {
		return err
	}
	switch {
	case c.FromOCILayout != "":
		report, err := pipeline.PushLayout(ctx, c.FromOCILayout, opts...)
		if err != nil {
			return err
		}
		return c.writeReport(report)
	case c.Plan:
		return c.plan(ctx, opts)
	}
	report, err := pipeline.Push(ctx, c.Path, c.environment(), opts...)
	if err != nil {
		return c.explain(err)
	}
	return c.writeReport(report)
}

// plan prints the plan, also when the kustomization could not be written: the run then fails
// (exit 1, or 3 when the base's registry did not answer in time), never having written nothing
// asked for with exit 0.
func (c *pushCommand) plan(ctx context.Context, opts []pipeline.Option) error {
	report, err := pipeline.Plan(ctx, c.Path, c.environment(), opts...)
	if report == nil {
		return c.explain(err)
	}
	if c.Output == cli.JSON {
		if err := writePlanJSON(os.Stdout, report); err != nil {
			return err
		}
	} else if err := writePlanText(os.Stdout, report); err != nil {
		return err
	}
	return err
}

// options turn the flags into the pipeline's options.
func (c *pushCommand) options(log *logrus.Logger, display *cli.Display) ([]pipeline.Option, error) {
	regOpts := []registry.RegistryOption{registry.WithInsecure(c.Insecure), registry.WithCAFile(c.CAFile),
		registry.WithStallTimeout(c.StallTimeout), registry.WithRetries(c.Retries),
		registry.WithNotify(func(s string) { display.Print("warning: " + s) })}
	if dir, err := fsys.CacheRoot(); err == nil {
		regOpts = append(regOpts, registry.WithMemory(dir)) // which repository holds which blob, for the next run's mounts
	}
	if c.FromOCILayout == "" {
		mirrors, err := c.mirrors()
		if err != nil {
			return nil, err
		}
		regOpts = append(regOpts, registry.WithMirrors(mirrors))
	}
	reg, err := registry.NewRegistries(regOpts...)
	if err != nil {
		return nil, fault.BadInput(err)
	}
	opts := []pipeline.Option{
		pipeline.WithRegistries(reg),
		pipeline.WithMono(c.Mono),
		pipeline.WithKustomization(c.Kustomization),
		pipeline.WithOCILayout(c.OCILayout),
		pipeline.WithResolveTimeout(c.ResolveTimeout),
		pipeline.WithLogger(log),
		pipeline.WithWarnings(func(w string) { display.Print("warning: " + w) }),
		pipeline.WithEvents(func(e image.Event) { display.Set(e.Image, e.Message) }),
		pipeline.WithArtifact(c.Artifact, c.ArtifactSource, c.ArtifactRevision),
	}
	if c.Verbose {
		opts = append(opts, pipeline.WithExtensionOutput(os.Stderr))
	}
	network := ""
	if c.ScriptNetwork == "none" {
		network = "none"
	}
	opts = append(opts, pipeline.WithScripts(c.ScriptsOnRunner, network))
	if c.ScriptsOnRunner && !c.Plan && c.FromOCILayout == "" {
		display.Print("warning: --scripts-on-runner: the install scripts of the images built for this runner's own platform run on this runner, " +
			"where they can read its files (registry credentials, kubeconfig, the signing key) and what they write goes into the images")
	}
	if c.Compression != "" {
		compression, err := layer.ParseCompression(c.Compression)
		if err != nil {
			return nil, fault.BadInput(err)
		}
		opts = append(opts, pipeline.WithCompression(compression))
	}
	if c.FromOCILayout == "" && !c.Plan {
		attestation, err := c.attestation()
		if err != nil {
			return nil, err
		}
		opts = append(opts, attestation)
	}
	return opts, nil
}

// attestation is what --sbom and --sign-key (or TOA_SIGN_KEY) ask to attach; the key is read
// before any work, so that a bad one fails at once.
func (c *pushCommand) attestation() (pipeline.Option, error) {
	signer, err := sign.LoadKey(c.SignKey, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	return pipeline.WithAttestation(attest.Format(c.SBOM), signer), nil
}

// explain says so when ENV looks like the folder the user meant.
func (c *pushCommand) explain(err error) error {
	var e *fault.Input
	if c.Env != "" && errors.As(err, &e) && errors.Is(err, toa.ErrNoContext) {
		if info, statErr := os.Stat(filepath.Join(c.Env, toa.ContextFile)); statErr == nil && !info.IsDir() {
			e.Hint = fmt.Sprintf("'%s' is taken as the environment; to read the context in that folder, run toa-push --path %s", c.Env, c.Env)
		}
	}
	return err
}

func (c *pushCommand) writeReport(report *pipeline.Report) error {
	if c.Output == cli.JSON {
		return writePushJSON(os.Stdout, report)
	}
	return writePushText(os.Stdout, report)
}
