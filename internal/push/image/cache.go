package image

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// BaseCache keeps what each base was last resolved to, under <cache>/bases, so that a plan can be
// made with the base's registry out of reach (toa-push --plan, as Toa's `export deployment`
// works offline). A base's tag may have moved since: whoever plans from the cache says how old
// the answer is.
type BaseCache struct {
	dir string
}

// NewBaseCache keeps resolved bases under dir/bases.
func NewBaseCache(dir string) *BaseCache { return &BaseCache{dir: fsys.Bases.Dir(dir)} }

// Dir is the cache's folder, for messages.
func (c *BaseCache) Dir() string { return c.dir }

// cachedBase is what a plan reads of a Base: every field but where it is read from (the mirrors
// of the run that reads it say that) and the error.
type cachedBase struct {
	Ref       string            `json:"ref"`
	Digest    string            `json:"digest"`
	Platforms map[string]string `json:"platforms"`
	Docker    bool              `json:"docker,omitempty"`
	Resolved  time.Time         `json:"resolved"`
}

func (c *BaseCache) path(ref string) string {
	sum := sha256.Sum256([]byte(ref))
	return filepath.Join(c.dir, hex.EncodeToString(sum[:])+".json")
}

// Store keeps a resolved base, with the time it was resolved.
func (c *BaseCache) Store(b *Base, resolved time.Time) error {
	if b.Err != nil {
		return fmt.Errorf("%s was not resolved", b.Ref)
	}
	data, err := json.Marshal(cachedBase{Ref: b.Ref, Digest: b.Digest, Platforms: b.Platforms, Docker: b.Docker, Resolved: resolved.UTC()})
	if err != nil {
		return err
	}
	return fsys.WriteFile(c.path(b.Ref), data, 0o644)
}

// Load returns the base as it was last resolved, and when; nil when the cache has no usable
// answer for ref.
func (c *BaseCache) Load(ref string) (*Base, time.Time) {
	data, ok := fsys.Bases.Read(c.path(ref))
	if !ok {
		return nil, time.Time{}
	}
	var cb cachedBase
	if json.Unmarshal(data, &cb) != nil || cb.Ref != ref || cb.Digest == "" || len(cb.Platforms) == 0 {
		return nil, time.Time{}
	}
	return &Base{Ref: ref, Source: ref, Digest: cb.Digest, Platforms: cb.Platforms, Docker: cb.Docker}, cb.Resolved
}
