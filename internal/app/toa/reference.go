package toa

import (
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// pathComponent is one part of a repository's path as the OCI distribution specification
// allows it: lowercase letters and digits, joined by '.', '_', '__' or hyphens.
var pathComponent = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`)

const (
	registryBaseHint = "write a registry's host, with its port and a path if need be, in lowercase, like localhost:5000 or registry.example.com/acme"
	imageHint        = "write an image reference, like node:20-alpine or registry.example.com/acme/base:1.0"
)

// registryBase reads the prefix of every image's repository: a registry host and an optional
// path. It is checked here, where the context is read, rather than by the first registry call.
func (f field) registryBase() (string, error) {
	s, err := f.str()
	if err != nil {
		return "", err
	}
	repo, err := name.NewRepository(strings.TrimSuffix(s, "/") + "/toa")
	if err != nil || !validPath(repo.RepositoryStr()) {
		return "", f.fail(registryBaseHint, "'%s' is not a valid registry to push to", s)
	}
	return s, nil
}

// image reads a reference to a base image: a repository with a tag or a digest.
func (f field) image() (string, error) {
	s, err := f.str()
	if err != nil {
		return "", err
	}
	ref, err := name.ParseReference(s)
	if err != nil || !validPath(ref.Context().RepositoryStr()) {
		return "", f.fail(imageHint, "'%s' is not a valid image reference", s)
	}
	return s, nil
}

// optImage reads key of the mapping as an image reference, "" when it is absent.
func (f field) optImage(key string) (string, error) {
	c, ok := f.child(key)
	if !ok {
		return "", nil
	}
	return c.image()
}

func validPath(repository string) bool {
	for _, part := range strings.Split(repository, "/") {
		if !pathComponent.MatchString(part) {
			return false
		}
	}
	return true
}
