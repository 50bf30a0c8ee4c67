package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// Item 6 (issue 15): the first push of N compositions whose base is on another registry than
// the target, as with Toa's default (ghcr.io/toa-io/runtime as the base, the team's registry as
// the target): the bytes sent against the distinct blobs the pushed images hold, the uploads and
// mounts, the requests, and the pings of each registry.

var firstPushSizes = []int{10, 50}

func (b *bench) firstPushes() error {
	baseAddr, baseRec := harness.RegistryWithLog(b.t) // the base's registry, not the target
	base, err := pushThreePlatformBase(baseAddr)
	if err != nil {
		return err
	}
	type row struct {
		n                          int
		s                          sample
		distinct                   int64
		blobs, basePings, baseGets int
		baseBytes                  int64
		targetPings, blobHeads     int
	}
	var rows []row
	for _, n := range firstPushSizes {
		dir := filepath.Join(b.work, fmt.Sprintf("first-%d", n))
		app := filepath.Join(dir, "app")
		ctxName := fmt.Sprintf("first%d", n)
		if err := b.manyCompositions(app, ctxName, base, n); err != nil {
			return err
		}
		cache := filepath.Join(dir, "cache") // cold: no layer, no memory of an earlier push
		os.MkdirAll(cache, 0o755)
		os.Symlink(b.npmCache, filepath.Join(cache, "npm"))
		fmt.Fprintf(os.Stderr, "bench: the first push of %d compositions × 3 platforms, the base on another registry\n", n)
		baseRec.Reset()
		s, err := b.measure(app, []string{"TOA_CACHE=" + cache}, fmt.Sprintf("first-%d", n),
			b.toaPush, "-o", "json", "--path", app, "-k", filepath.Join(dir, "deployment"))
		if err != nil {
			return err
		}
		out, err := parsePush(s.stdout)
		if err != nil {
			return err
		}
		if len(out.Images) != n {
			return fmt.Errorf("the application of %d compositions has %d images", n, len(out.Images))
		}
		var repos []string
		for _, img := range out.Images {
			repos = append(repos, img.Repository)
		}
		blobs, err := distinctBlobs(repos)
		if err != nil {
			return err
		}
		r := row{n: n, s: s, blobs: len(blobs)}
		for _, size := range blobs {
			r.distinct += size
		}
		for _, q := range s.log {
			switch {
			case q.Method == http.MethodGet && q.Path == "/v2/":
				r.targetPings++
			case q.Method == http.MethodHead && containsBlobs(q.Path):
				r.blobHeads++
			}
		}
		for _, q := range baseRec.Requests() {
			switch {
			case q.Method == http.MethodGet && q.Path == "/v2/":
				r.basePings++
			case q.IsBlobGet():
				r.baseGets++
				r.baseBytes += q.ResponseBytes
			}
		}
		rows = append(rows, r)
	}
	fmt.Printf("\n### 6. First push with the base on another registry\n\n")
	fmt.Printf("bench/firstpush.go writes applications of N components without dependencies, each its own composition, for three platforms, " +
		"on the three-platform test base of item 3 kept in a second registry (as Toa's default base is on ghcr.io, not the team's registry), " +
		"and pushes each once with a cold cache. _Distinct blobs_ are the configs and layers of every image the push left in the target " +
		"registry, each counted once; _sent_ is every request body the target registry received.\n\n")
	fmt.Println("| compositions | wall | sent | distinct blobs | sent / distinct | blob uploads | mounts | blob HEADs | requests | pings (target, base) | read from the base's registry |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Printf("| %d | %s | %s | %s in %d | %.3f× | %d | %d | %d | %d | %d, %d | %s in %d GETs |\n", r.n, secs(r.s.wall.Seconds()),
			size(float64(r.s.sent)), size(float64(r.distinct)), r.blobs, float64(r.s.sent)/float64(r.distinct), r.s.uploads, r.s.mounts,
			r.blobHeads, r.s.requests, r.targetPings, r.basePings, size(float64(r.baseBytes)), r.baseGets)
	}
	fmt.Println()
	for _, r := range rows {
		ratio := float64(r.s.sent) / float64(r.distinct)
		fmt.Printf("- First push of %d compositions: sent %.3f× the distinct blobs (target ≤ 1.05×): %s; one ping per registry: %s.\n",
			r.n, ratio, verdict(ratio <= 1.05), verdict(r.targetPings == 1 && r.basePings == 1))
	}
	return nil
}

func containsBlobs(path string) bool {
	return len(path) > 0 && filepath.Base(filepath.Dir(path)) == "blobs"
}

// distinctBlobs reads every tag of the repositories (the images and their dependencies images)
// and returns the size of each distinct config and layer they hold.
func distinctBlobs(repos []string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, repo := range repos {
		r, err := name.NewRepository(repo, name.Insecure)
		if err != nil {
			return nil, err
		}
		tags, err := remote.List(r)
		if err != nil {
			return nil, err
		}
		for _, tag := range tags {
			idx, err := remote.Index(r.Tag(tag))
			if err != nil {
				return nil, err
			}
			m, err := idx.IndexManifest()
			if err != nil {
				return nil, err
			}
			for _, d := range m.Manifests {
				img, err := idx.Image(d.Digest)
				if err != nil {
					return nil, err
				}
				im, err := img.Manifest()
				if err != nil {
					return nil, err
				}
				for _, blob := range append([]v1.Descriptor{im.Config}, im.Layers...) {
					out[blob.Digest.String()] = blob.Size
				}
			}
		}
	}
	return out, nil
}
