package kustomize

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"

	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// MaxRemoteSize is the most toa-apply reads of a remote resource a kustomization names (a URL in
// `resources:`), as of a local file (MaxFileSize).
const MaxRemoteSize = MaxFileSize

// maxRedirects is how many redirects a remote resource may take, as Go's default client.
const maxRedirects = 10

// RemoteClient is the client Render fetches remote resources with unless given one
// (WithHTTPClient): a transport of its own (the environment's proxy, as Go's default), at most
// maxRedirects redirects. Its time is Render's context.
func RemoteClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= maxRedirects {
				return fmt.Errorf("%s: more than %d redirects", via[0].URL.Redacted(), maxRedirects)
			}
			return nil
		},
	}
}

// Option changes how Render renders.
type Option func(*options)

type options struct {
	client   *http.Client
	partSize int // documents in a part of renderInParts; 0: defaultPartSize
}

// WithHTTPClient sets the client remote resources are fetched with. Default: RemoteClient().
func WithHTTPClient(c *http.Client) Option { return func(o *options) { o.client = c } }

// remoteFiles is the file system Render gives kustomize: fs, except that a kustomization's
// remote resources (http and https URLs in `resources:`) are fetched here, with the render's
// client and context, bounded to MaxRemoteSize, and handed to kustomize as files beside the
// kustomization. kustomize's own loader would fetch them with a new http.Client{} (Go's default
// transport), read the whole body with no bound, and takes no client of ours nor a context.
// A URL kustomize reads as a git repository (its "//", "_git/" or ".git") is left to kustomize,
// which clones it with git.
type remoteFiles struct {
	filesys.FileSystem
	ctx    context.Context
	client *http.Client

	mu       sync.Mutex
	fetched  map[string][]byte // absolute path of a file that stands for a URL → its body
	replaced map[string][]byte // absolute path of a kustomization → what kustomize reads instead (deferImages)
	err      error             // the first fetch that failed: kustomize keeps no error of a kustomization's read
}

// override has kustomize read data for the file at path.
func (r *remoteFiles) override(path string, data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.replaced == nil {
		r.replaced = map[string][]byte{}
	}
	r.replaced[filepath.Clean(path)] = data
}

func (r *remoteFiles) replacement(path string) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	data, ok := r.replaced[filepath.Clean(path)]
	return data, ok
}

func newRemoteFiles(ctx context.Context, fs filesys.FileSystem, client *http.Client) *remoteFiles {
	return &remoteFiles{FileSystem: fs, ctx: ctx, client: client, fetched: map[string][]byte{}}
}

func (r *remoteFiles) body(path string) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	data, ok := r.fetched[filepath.Clean(path)]
	return data, ok
}

func (r *remoteFiles) ReadFile(path string) ([]byte, error) {
	if data, ok := r.body(path); ok {
		return data, nil
	}
	data, err := r.FileSystem.ReadFile(path)
	if replaced, ok := r.replacement(path); ok && err == nil {
		data = replaced
	}
	if err != nil || !isKustomization(path) {
		return data, err
	}
	return r.fetchResources(path, data)
}

func (r *remoteFiles) Exists(path string) bool {
	if _, ok := r.body(path); ok {
		return true
	}
	return r.FileSystem.Exists(path)
}

func (r *remoteFiles) CleanedAbs(path string) (filesys.ConfirmedDir, string, error) {
	if _, ok := r.body(path); ok {
		dir, _, err := r.FileSystem.CleanedAbs(filepath.Dir(path))
		return dir, filepath.Base(path), err
	}
	return r.FileSystem.CleanedAbs(path)
}

// failed is the first fetch that failed, if any.
func (r *remoteFiles) failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func isKustomization(path string) bool {
	for _, name := range konfig.RecognizedKustomizationFileNames() {
		if filepath.Base(path) == name {
			return true
		}
	}
	return false
}

// fetchResources fetches the remote resources of the kustomization file at path, and returns
// the kustomization with each such URL replaced by the name of the file that holds its body.
// A kustomization with none is returned as it was read.
func (r *remoteFiles) fetchResources(path string, data []byte) ([]byte, error) {
	if !strings.Contains(string(data), "http") {
		return data, nil
	}
	doc, err := yaml.Parse(string(data))
	if err != nil {
		return data, nil // kustomize says what is wrong with it
	}
	resources := doc.Field("resources")
	if resources == nil || resources.Value.YNode().Kind != yaml.SequenceNode {
		return data, nil
	}
	changed := false
	for _, entry := range resources.Value.YNode().Content {
		if entry.Kind != yaml.ScalarNode || !isRemoteFile(entry.Value) || isGitRepository(entry.Value) {
			continue
		}
		sum := sha256.Sum256([]byte(entry.Value))
		name := ".toa-remote-" + hex.EncodeToString(sum[:6]) + ".yaml"
		file := filepath.Join(filepath.Dir(filepath.Clean(path)), name)
		if _, ok := r.body(file); !ok { // kustomize may read a kustomization more than once
			body, err := r.fetch(entry.Value)
			if err != nil {
				r.mu.Lock()
				if r.err == nil {
					r.err = err
				}
				r.mu.Unlock()
				return nil, err
			}
			r.mu.Lock()
			r.fetched[file] = body
			r.mu.Unlock()
		}
		entry.Value, entry.Style = name, 0
		changed = true
	}
	if !changed {
		return data, nil
	}
	out, err := doc.String()
	if err != nil {
		return nil, fmt.Errorf("%s: write its remote resources' names: %w", path, err)
	}
	return []byte(out), nil
}

// fetch reads the body of a remote resource: at most MaxRemoteSize, within the render's time.
func (r *remoteFiles) fetch(rawURL string) ([]byte, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("remote resource %s: %w", rawURL, err)
	}
	name := u.Redacted()
	req, err := http.NewRequestWithContext(r.ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("remote resource %s: %w", name, err)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch the remote resource %s: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("fetch the remote resource %s: status code %d (%s)", name, resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	if resp.ContentLength > MaxRemoteSize {
		return nil, tooLargeRemote(name, MaxRemoteSize)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxRemoteSize+1))
	if err != nil {
		return nil, fmt.Errorf("fetch the remote resource %s: %w", name, err)
	}
	if len(body) > MaxRemoteSize {
		return nil, tooLargeRemote(name, MaxRemoteSize)
	}
	return body, nil
}

// isRemoteFile is kustomize's test of a resource it fetches over HTTP.
func isRemoteFile(path string) bool {
	u, err := url.Parse(path)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https")
}

// isGitRepository is kustomize's test of a URL that names a git repository (internal/git's
// repo spec): its path holds "_git/", a "//" that ends the repository, or ".git".
func isGitRepository(rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil {
		return false
	}
	p := u.Host + u.Path
	return strings.Contains(p, "_git/") || strings.Contains(p, "//") || strings.Contains(p, ".git")
}

func tooLargeRemote(url string, limit int64) error {
	return fmt.Errorf("%s is larger than the %d MiB toa-apply reads of a remote resource", url, limit>>20)
}
