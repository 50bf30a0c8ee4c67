package attest

import (
	"crypto/sha1"
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
	// Shared, when set, is the SBOM of the dependencies image the image is built on: the
	// packages are listed there, and this one refers to it for them.
	Shared *SharedSBOM
}

// SharedSBOM is the SBOM of a dependencies image, as the SBOMs of the images built on it refer
// to it: SPDX's externalDocumentRefs (its namespace and SHA-1) and CycloneDX's BOM-Link (its
// serial number and version) with the document's SHA-256.
type SharedSBOM struct {
	Namespace string // SPDX: its documentNamespace
	Serial    string // CycloneDX: its serialNumber, "urn:uuid:..."
	SHA1      string // of the document's bytes, hex
	SHA256    string
}

// sharedRefID is the SPDX document reference of the dependencies' SBOM.
const sharedRefID = "DocumentRef-dependencies"

// SharedOf describes doc, the dependencies' SBOM of img (made by img.SBOM), for the images that
// refer to it.
func SharedOf(img *Image, doc []byte) *SharedSBOM {
	s1, s256 := sha1.Sum(doc), sha256.Sum256(doc)
	return &SharedSBOM{Namespace: img.spdxNamespace(), Serial: img.cdxSerial(), SHA1: hex.EncodeToString(s1[:]),
		SHA256: hex.EncodeToString(s256[:])}
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

// purlNPM is the package URL of an npm package (purl-spec, types: npm): the scope's @ is
// percent-encoded.
func purlNPM(name, version string) string {
	name = strings.Replace(name, "@", "%40", 1)
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
	Owner   string // the component's label, "" for the global installs
	Install *Install
}

// installs are every install of the image: the global one first, then the components'.
func (img *Image) installs() []ownedInstall {
	var out []ownedInstall
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
