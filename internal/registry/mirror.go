package registry

import (
	"fmt"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Mirror redirects base images: a reference that begins with From (a registry host, or a host and
// a path) is read from To (a host, or a host and a path) instead, with the rest of its
// repository, its tag and its digest kept. `--mirror ghcr.io=mirror.internal:5000/ghcr` reads
// ghcr.io/toa-io/runtime:1.0.0 from mirror.internal:5000/ghcr/toa-io/runtime:1.0.0.
// Docker Hub is docker.io: its short names are read as the registry names them
// (node:20 is docker.io/library/node:20).
type Mirror struct {
	From string // as the user wrote it
	To   string

	fromHost, fromPath string // the host as go-containerregistry names it (index.docker.io)
}

// String spells the mirror as the flag takes it: FROM=TO.
func (m *Mirror) String() string { return m.From + "=" + m.To }

// Mirrors are the mirrors of one run. The longest From that matches a reference wins.
type Mirrors []*Mirror

// ParseMirrors reads FROM=TO specs, as --mirror and TOA_MIRRORS give them. A later spec with the
// same FROM replaces an earlier one, so that a flag overrides the environment.
func ParseMirrors(specs ...string) (Mirrors, error) {
	var out Mirrors
	for _, spec := range specs {
		spec = strings.TrimSpace(spec)
		if spec == "" {
			continue
		}
		m, err := parseMirror(spec)
		if err != nil {
			return nil, err
		}
		replaced := false
		for i, o := range out {
			if o.fromHost == m.fromHost && o.fromPath == m.fromPath {
				out[i], replaced = m, true
			}
		}
		if !replaced {
			out = append(out, m)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].fromPath) > len(out[j].fromPath) })
	return out, nil
}

func parseMirror(spec string) (*Mirror, error) {
	from, to, ok := strings.Cut(spec, "=")
	from, to = strings.TrimSuffix(strings.TrimSpace(from), "/"), strings.TrimSuffix(strings.TrimSpace(to), "/")
	if !ok || from == "" || to == "" {
		return nil, fmt.Errorf("mirror '%s' is not FROM=TO, like ghcr.io=mirror.internal:5000/ghcr", spec)
	}
	m := &Mirror{From: from, To: to}
	host, path, _ := strings.Cut(from, "/")
	if !hostLike(host) {
		return nil, fmt.Errorf("mirror '%s': FROM begins with a registry host, like ghcr.io or docker.io/library, not '%s'", spec, host)
	}
	reg, err := name.NewRegistry(host)
	if err != nil {
		return nil, fmt.Errorf("mirror '%s': '%s' is not a registry host: %w", spec, host, err)
	}
	m.fromHost, m.fromPath = reg.RegistryStr(), path
	toHost, toPath, _ := strings.Cut(to, "/")
	if !hostLike(toHost) {
		return nil, fmt.Errorf("mirror '%s': TO begins with a registry host, like mirror.internal:5000, not '%s'", spec, toHost)
	}
	if _, err := name.NewRegistry(toHost); err != nil {
		return nil, fmt.Errorf("mirror '%s': '%s' is not a registry host: %w", spec, toHost, err)
	}
	if toPath != "" {
		if _, err := name.NewRepository(to); err != nil {
			return nil, fmt.Errorf("mirror '%s': '%s' is not a registry and repository path: %w", spec, to, err)
		}
	}
	return m, nil
}

// hostLike is Docker's rule for the first part of a reference: a host has a dot or a port, or is
// localhost.
func hostLike(s string) bool {
	return strings.ContainsAny(s, ".:") || s == "localhost"
}

// Redirect returns where ref is read from: the mirror's reference and the mirror, or ref itself
// and nil when no mirror matches it.
func (ms Mirrors) Redirect(ref string) (string, *Mirror, error) {
	if len(ms) == 0 {
		return ref, nil, nil
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", nil, fmt.Errorf("'%s' is not an image reference: %w", ref, err)
	}
	host, repo := r.Context().RegistryStr(), r.Context().RepositoryStr()
	for _, m := range ms {
		if host != m.fromHost {
			continue
		}
		rest := repo
		if m.fromPath != "" {
			if repo != m.fromPath && !strings.HasPrefix(repo, m.fromPath+"/") {
				continue
			}
			rest = strings.TrimPrefix(strings.TrimPrefix(repo, m.fromPath), "/")
		}
		source := m.To
		if rest != "" {
			source += "/" + rest
		}
		if _, isDigest := r.(name.Digest); isDigest {
			source += "@" + r.Identifier()
		} else {
			source += ":" + r.Identifier()
		}
		if _, err := name.ParseReference(source, name.Insecure); err != nil || !strings.Contains(strings.SplitN(source, "@", 2)[0], "/") {
			return "", nil, fmt.Errorf("the mirror %s turns %s into '%s', which names no repository: give TO a path, like %s/%s", m, ref, source, m.To, repo)
		}
		return source, m, nil
	}
	return ref, nil, nil
}
