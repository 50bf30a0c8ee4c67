package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/toa-deploy/toa-deploy/fault"
	"github.com/toa-deploy/toa-deploy/internal/keychain"
)

// Scheme opens an artifact's reference on toa-apply's command line, as Flux writes it.
const Scheme = "oci://"

// Limits bound what a pull reads and writes.
type Limits struct {
	Manifest int64 // bytes of the manifest
	Layer    int64 // bytes of the compressed layer
	Unpacked int64 // bytes of all files unpacked
	Files    int   // entries of the tar
}

// DefaultLimits fit any kustomization toa-push writes with room to spare: its files are YAML.
var DefaultLimits = Limits{Manifest: 4 << 20, Layer: 64 << 20, Unpacked: 256 << 20, Files: 10000}

// Registry is how the registry is reached: Docker's credentials and credential helpers
// (keychain.Default, as toa-push), plain HTTP only on loopback or with Insecure, a private
// CA from CAFile.
type Registry struct {
	Insecure bool
	CAFile   string
	Keychain authn.Keychain // keychain.Default (Docker's, its file checked first) when nil
	// Transport replaces the connection to the registry, for tests; nil is http's, shaped by
	// Insecure and CAFile.
	Transport http.RoundTripper
}

// ParseReference reads REF[@DIGEST], with or without oci://. A reference by digest is what is
// pulled, and verified against; a tag alone is resolved when pulled.
func (r Registry) ParseReference(s string) (name.Reference, error) {
	s = strings.TrimPrefix(s, Scheme)
	var opts []name.Option
	if r.Insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.ParseReference(s, opts...)
	if err != nil {
		return nil, &fault.Input{Message: fmt.Sprintf("%q is not an artifact's reference: %v", s, err),
			Hint: "give oci://REGISTRY/REPOSITORY:TAG, optionally @sha256:DIGEST, as toa-push --artifact wrote it"}
	}
	return ref, nil
}

func (r Registry) options(ctx context.Context) ([]remote.Option, error) {
	kc := r.Keychain
	if kc == nil {
		kc = keychain.Default
	}
	transport := r.Transport
	if transport == nil {
		t, err := r.transport()
		if err != nil {
			return nil, err
		}
		transport = t
	}
	return []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc), remote.WithTransport(transport),
		remote.WithUserAgent("toa-apply")}, nil
}

// transport connects within seconds, and trusts CAFile or, with Insecure, any certificate.
func (r Registry) transport() (http.RoundTripper, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ResponseHeaderTimeout = 30 * time.Second
	if r.CAFile == "" && !r.Insecure {
		return t, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: r.Insecure} // the user asked for it with --insecure
	if r.CAFile != "" {
		data, err := os.ReadFile(r.CAFile)
		if err != nil {
			return nil, &fault.Input{File: r.CAFile, Key: "--ca-file", Message: "cannot be read: " + err.Error()}
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(data) {
			return nil, &fault.Input{File: r.CAFile, Key: "--ca-file", Message: "holds no PEM certificate"}
		}
		cfg.RootCAs = pool
	}
	t.TLSClientConfig = cfg
	return t, nil
}

// Pulled is an artifact read from a registry: its reference by digest, its annotations, and
// its layer's bytes (checked against their digest).
type Pulled struct {
	Reference   name.Digest
	Annotations map[string]string
	Content     []byte // the tar+gzip
}

// Pull reads the artifact ref names: its manifest (at most limits.Manifest bytes, its digest the
// one ref gives, if any), which must be Flux's, and its one layer (at most limits.Layer bytes,
// checked against its digest). Nothing is written.
func (r Registry) Pull(ctx context.Context, ref name.Reference, limits Limits) (*Pulled, error) {
	opts, err := r.options(ctx)
	if err != nil {
		return nil, err
	}
	head, err := remote.Head(ref, opts...)
	if err != nil {
		return nil, registryError(ref, err, "read the artifact")
	}
	if head.Size > limits.Manifest {
		return nil, fmt.Errorf("the artifact %s: its manifest is %d bytes, more than the %d an artifact's may be", ref, head.Size, limits.Manifest)
	}
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return nil, registryError(ref, err, "read the artifact")
	}
	if int64(len(desc.Manifest)) > limits.Manifest {
		return nil, fmt.Errorf("the artifact %s: its manifest is %d bytes, more than the %d an artifact's may be", ref, len(desc.Manifest), limits.Manifest)
	}
	digest := v1.Hash{Algorithm: "sha256", Hex: sha256Hex(desc.Manifest)}
	if d, ok := ref.(name.Digest); ok && d.DigestStr() != digest.String() {
		return nil, fmt.Errorf("the artifact %s: the registry sent a manifest of digest %s", ref, digest)
	}
	var m v1.Manifest
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		return nil, fmt.Errorf("the artifact %s: its manifest: %w", ref, err)
	}
	if err := isFluxManifest(desc.MediaType, &m); err != nil {
		return nil, fmt.Errorf("%s is not a Flux artifact: %w; give the reference toa-push --artifact (or flux push artifact) wrote", ref, err)
	}
	layer := m.Layers[0]
	if layer.Size > limits.Layer {
		return nil, fmt.Errorf("the artifact %s: its layer is %d bytes, more than the %d an artifact's may be", ref, layer.Size, limits.Layer)
	}
	content, err := r.blob(ref.Context().Digest(layer.Digest.String()), layer, opts)
	if err != nil {
		return nil, err
	}
	return &Pulled{Reference: ref.Context().Digest(digest.String()), Annotations: m.Annotations, Content: content}, nil
}

// isFluxManifest checks what makes a manifest Flux's: an OCI (or Docker) image manifest with
// Flux's config and one layer of Flux's tar+gzip.
func isFluxManifest(mt types.MediaType, m *v1.Manifest) error {
	switch {
	case mt != types.OCIManifestSchema1 && mt != types.DockerManifestSchema2:
		return fmt.Errorf("it is a %s, not an image manifest", mt)
	case m.Config.MediaType != MediaTypeConfig:
		return fmt.Errorf("its config is a %s, not %s", m.Config.MediaType, MediaTypeConfig)
	case len(m.Layers) != 1:
		return fmt.Errorf("it has %d layers, not one", len(m.Layers))
	case m.Layers[0].MediaType != MediaTypeContent:
		return fmt.Errorf("its layer is a %s, not %s", m.Layers[0].MediaType, MediaTypeContent)
	}
	return nil
}

// blob reads a blob whole, at most its size, and checks its digest.
func (r Registry) blob(ref name.Digest, desc v1.Descriptor, opts []remote.Option) ([]byte, error) {
	l, err := remote.Layer(ref, opts...)
	if err != nil {
		return nil, registryError(ref, err, "read the artifact's layer")
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, registryError(ref, err, "read the artifact's layer")
	}
	defer rc.Close()
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(rc, desc.Size+1))
	if err != nil {
		return nil, registryError(ref, err, "read the artifact's layer")
	}
	if n != desc.Size || sha256Hex(buf.Bytes()) != desc.Digest.Hex {
		return nil, fmt.Errorf("the artifact's layer %s: the registry sent %d bytes of digest sha256:%s, the manifest says %d bytes", ref, n, sha256Hex(buf.Bytes()), desc.Size)
	}
	return buf.Bytes(), nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// registryError says what was being read, and what to check when the registry refused.
func registryError(ref name.Reference, err error, what string) error {
	msg := fmt.Sprintf("%s %s: %v", what, ref, err)
	switch {
	case fault.IsInput(err): // the credentials file refused (keychain.CheckConfig): the user's to mend
		return fmt.Errorf("%s %s: %w", what, ref, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fault.TimedOut(errors.New(msg))
	case strings.Contains(err.Error(), "UNAUTHORIZED"), strings.Contains(err.Error(), "DENIED"):
		return fmt.Errorf("%s\n  log in to %s (docker login writes ~/.docker/config.json, which toa-apply reads with Docker's credential helpers)", msg, ref.Context().RegistryStr())
	case strings.Contains(err.Error(), "http: server gave HTTP response to HTTPS client"):
		return fmt.Errorf("%s\n  the registry speaks plain HTTP: give --insecure if that is meant", msg)
	}
	return errors.New(msg)
}
