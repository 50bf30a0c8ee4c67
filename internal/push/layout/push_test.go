package layout

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/internal/push/image"
	"github.com/toa-deploy/toa-deploy/internal/registry"
)

// A layout an earlier toa-push wrote on a Docker base (a Docker manifest of OCI layers) is
// refused before anything is pushed, as bad input, with what to do.
func TestPushLayoutRefusesMixedFormats(t *testing.T) {
	docker := harness.FormatBase(t, types.DockerManifestSchema2, types.DockerConfigJSON, types.DockerLayer, "amd64")
	oci, _ := harness.TarLayer(map[string][]byte{"a": []byte("a")})
	mixed, _ := mutate.Append(docker, mutate.Addendum{Layer: oci, MediaType: types.OCILayer})
	l, err := Open(filepath.Join(t.TempDir(), "layout"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Write(t.Context(), "registry.internal/shop/composition-front:1a2b3c4d", harness.OneImage(types.OCIImageIndex, mixed, "amd64")); err != nil {
		t.Fatal(err)
	}
	_, err = Push(t.Context(), l, image.PushOptions{Destination: refusingDestination{t: t}})
	var input *fault.Input
	if !errors.As(err, &input) || !strings.Contains(err.Error(), "not an OCI image manifest") || !strings.Contains(err.Error(), "write the layout again") {
		t.Errorf("got %v", err)
	}
}

// refusingDestination fails the test on any question: nothing is to be pushed. (Methods it
// does not define panic.)
type refusingDestination struct {
	image.Destination
	t *testing.T
}

func (d refusingDestination) Digest(context.Context, string) (string, error) {
	d.t.Error("the destination was asked for a digest")
	return "", nil
}

func (d refusingDestination) Index(context.Context, string) (v1.ImageIndex, error) {
	d.t.Error("the destination was asked for an index")
	return nil, nil
}

func (d refusingDestination) Write(context.Context, string, v1.ImageIndex) (image.Sent, error) {
	d.t.Error("the destination was written to")
	return image.Sent{}, nil
}

// --from-oci-layout sends each distinct blob once too: the dependencies images go first, and
// their base layers are mounted into the other repositories.
func TestLayoutPushSendsEachBlobOnce(t *testing.T) {
	baseAddr, _ := harness.RegistryWithLog(t)
	baseRef := harness.PushLayeredBase(t, baseAddr)
	addr, rec := harness.RegistryWithLog(t)
	dir := harness.TwoCompositions(t, addr, baseRef)
	layoutDir := filepath.Join(t.TempDir(), "layout")
	l, err := Open(layoutDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pushTo(t, dir, baseRef, l); err != nil {
		t.Fatal(err)
	}
	rec.Reset()
	reg, _ := registry.NewRegistries()
	read, err := Read(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Push(context.Background(), read, image.PushOptions{Registries: reg}); err != nil {
		t.Fatal(err)
	}
	rec = rec.Snapshot()
	distinct := harness.DistinctBlobs(t, addr)
	var want int64
	for _, size := range distinct {
		want += size
	}
	count, sent := rec.CompletedUploads()
	t.Logf("from the layout: %d bytes sent in %d uploads and %d mounts; the distinct blobs are %d bytes", sent, len(count), len(rec.Mounts()), want)
	for d, n := range count {
		if n > 1 {
			t.Errorf("%s uploaded %d times", d, n)
		}
	}
	if sent != want {
		t.Errorf("sent %d bytes of blobs, the distinct blobs are %d bytes", sent, want)
	}
	if p := rec.Pings(); p != 1 {
		t.Errorf("%d pings, want 1", p)
	}
}
