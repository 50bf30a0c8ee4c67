package attest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Image is what an SBOM describes: one platform's image of one of the application's images.
type Image struct {
	Repository string // "registry.internal/shop/composition-front"
	Tag        string // "1a2b3c4d"
	Digest     string // the platform image's manifest digest
	Platform   string // "linux/arm64"
	Base       Base
	Components []Component
	// Global is what `npm i -g` lines of registry.build.run installed, or nil.
	Global *Install
	// Dependencies says the image is a dependencies image (deps-<hash>): its document is the
	// one every image built on it carries, so it says nothing that the code changes (the
	// components' versions, which are their code's hash when undeclared).
	Dependencies bool
}

// spdxNamespace is the SPDX document's namespace: unique per image, its digest names it (SPDX
// 2.3 §6.5).
func (img *Image) spdxNamespace() string {
	return "https://spdx.org/spdxdocs/toa-push/" + img.Repository + "/" + strings.Replace(img.Digest, ":", "-", 1)
}

// cdxSerial is the CycloneDX BOM's serial number: the same image, the same serial.
func (img *Image) cdxSerial() string {
	return "urn:uuid:" + deterministicUUID(img.Repository+"@"+img.Digest)
}

// Base is the image an image is built on.
type Base struct {
	Reference string // as the context names it: "ghcr.io/toa-io/runtime:1.0.0-alpha.289"
	Digest    string // its manifest for the platform
	// Installed are the npm packages in the base's layers, by the folder their node_modules is
	// in ("usr/local/lib": npm itself in node images, a runtime installed globally): a scanner
	// that reads the SBOM alone sees them too.
	Installed []*Install
}

// Repository is the base's repository as its reference names it, without tag or digest:
// "ghcr.io/toa-io/runtime", "node" for "node:20".
func (b Base) Repository() string {
	repo := b.Reference
	if i := strings.IndexByte(repo, '@'); i >= 0 {
		repo = repo[:i]
	}
	if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
		repo = repo[:i]
	}
	return repo
}

// Component is a Toa component of an image, with what npm installed for it.
type Component struct {
	ID      string // "shop.orders"
	Label   string // "shop-orders": its folder under /composition
	Version string // the declared version, else a hash of its files
	// Package and PackageVersion are its package.json's name and version, "" without one.
	Package, PackageVersion string
	// Installed is what npm installed into its node_modules for the platform, or nil.
	Installed *Install
	// Direct are the Paths of the packages its package.json names, as installed.
	Direct []string
}

// SBOM is the image's SBOM in the format.
func (img *Image) SBOM(f Format, b Builder, created time.Time) ([]byte, error) {
	switch f {
	case SPDX, "":
		return img.SPDX(b, created)
	case CycloneDX:
		return img.CycloneDX(b, created)
	}
	return nil, fmt.Errorf("no SBOM format %q: spdx, cyclonedx or none", f)
}

// purlOCI is the package URL of an image by digest (purl-spec, types: oci).
func purlOCI(repository, digest, tag, platform string) string {
	name := repository
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	q := url.Values{}
	q.Set("repository_url", repository)
	if tag != "" {
		q.Set("tag", tag)
	}
	if platform != "" {
		parts := strings.Split(platform, "/")
		if len(parts) > 1 {
			q.Set("arch", parts[1])
		}
		if len(parts) > 2 {
			q.Set("variant", parts[2])
		}
		q.Set("os", parts[0])
	}
	return "pkg:oci/" + strings.ToLower(name) + "@" + url.PathEscape(digest) + "?" + q.Encode()
}

// where says where an install's package is, for a comment.
func (in ownedInstall) where(p Package) string {
	at := "/" + in.Install.Root + "/" + p.Path
	if strings.HasPrefix(in.Owner, basePrefix) {
		return "in the base image at " + at
	}
	return "installed by npm at " + at
}

// purlNPM is the package URL of an npm package (purl-spec, types: npm): the scope's @ is
// percent-encoded, the version left out when there is none.
func purlNPM(name, version string) string {
	name = strings.Replace(name, "@", "%40", 1)
	if version == "" { // a component's package.json may have none
		return "pkg:npm/" + name
	}
	return "pkg:npm/" + name + "@" + url.PathEscape(version)
}

// checksum is one hash of an npm integrity string: "sha512-<base64>" as ("SHA512", hex).
type checksum struct {
	Algorithm string
	Hex       string
}

// checksums reads an SRI string (npm's integrity: one or more "<alg>-<base64>", space
// separated) into hex digests; what it cannot read is left out.
func checksums(integrity string) []checksum {
	var out []checksum
	for _, part := range strings.Fields(integrity) {
		alg, b64, ok := strings.Cut(part, "-")
		if !ok {
			continue
		}
		if i := strings.IndexByte(b64, '?'); i >= 0 { // SRI options
			b64 = b64[:i]
		}
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			continue
		}
		switch alg {
		case "sha1", "sha256", "sha384", "sha512":
			out = append(out, checksum{Algorithm: strings.ToUpper(alg), Hex: hex.EncodeToString(raw)})
		}
	}
	return out
}

// licenseExpression matches what reads as an SPDX license expression: identifiers and
// LicenseRefs joined by AND, OR, WITH and parentheses. Anything else ("SEE LICENSE IN ...",
// "UNLICENSED") is not one, and is reported as NOASSERTION.
var licenseExpression = regexp.MustCompile(`^\(?\s*[A-Za-z0-9.+-]+(\s*\)?\s+(AND|OR|WITH)\s+\(?\s*[A-Za-z0-9.+-]+)*\s*\)?$`)

func spdxLicense(l string) string {
	if l == "" || strings.EqualFold(l, "UNLICENSED") || !licenseExpression.MatchString(l) {
		return ""
	}
	return l
}

// ownedInstall is an install with the component it belongs to.
type ownedInstall struct {
	Owner   string // the component's label, "" for the global installs, "base/<root>" for the base's
	Install *Install
}

// basePrefix opens the owner of the base's installs: no component's label has a slash.
const basePrefix = "base/"

// installs are every install of the image: the base's first, then the global one, then the
// components'.
func (img *Image) installs() []ownedInstall {
	var out []ownedInstall
	for _, in := range img.Base.Installed {
		out = append(out, ownedInstall{basePrefix + in.Root, in})
	}
	if img.Global != nil {
		out = append(out, ownedInstall{"", img.Global})
	}
	for _, c := range img.Components {
		if c.Installed != nil {
			out = append(out, ownedInstall{c.Label, c.Installed})
		}
	}
	return out
}

// deterministicUUID is a UUID (version 5 layout, SHA-256 based) named by s: the same image, the
// same serial number.
func deterministicUUID(s string) string {
	sum := sha256.Sum256([]byte(s))
	b := sum[:16]
	b[6] = (b[6] & 0x0f) | 0x50
	b[8] = (b[8] & 0x3f) | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// componentVersion is what a document says of a component's version: nothing in a dependencies
// image's document, which every image built on it carries whatever its code (an undeclared
// version is a hash of the component's files).
func (img *Image) componentVersion(c Component) string {
	if img.Dependencies {
		return ""
	}
	return c.Version
}

// sharedComment says, in a dependencies image's document, which images carry it.
func (img *Image) sharedComment() string {
	if !img.Dependencies {
		return ""
	}
	return "every package of " + img.Repository + ":" + img.Tag + " for " + img.Platform +
		", and so of every image of " + img.Repository + " built on it, which carries this document as its SBOM: " +
		"their own layers are their components' sources, named in their provenance"
}
