package attest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// The SPDX 2.3 document, as the spec's JSON schema (spdx/spdx-spec, schemas/spdx-schema.json at
// v2.3) names its fields; only what toa-push fills in.
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Comment  string   `json:"comment,omitempty"`
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	SPDXID                string            `json:"SPDXID"`
	Name                  string            `json:"name"`
	VersionInfo           string            `json:"versionInfo,omitempty"`
	DownloadLocation      string            `json:"downloadLocation"`
	FilesAnalyzed         bool              `json:"filesAnalyzed"`
	Checksums             []spdxChecksum    `json:"checksums,omitempty"`
	LicenseConcluded      string            `json:"licenseConcluded"`
	LicenseDeclared       string            `json:"licenseDeclared"`
	CopyrightText         string            `json:"copyrightText"`
	PrimaryPackagePurpose string            `json:"primaryPackagePurpose,omitempty"`
	ExternalRefs          []spdxExternalRef `json:"externalRefs,omitempty"`
	Comment               string            `json:"comment,omitempty"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	SPDXElementID      string `json:"spdxElementId"`
	RelationshipType   string `json:"relationshipType"`
	RelatedSPDXElement string `json:"relatedSpdxElement"`
}

const noAssertion = "NOASSERTION"

// idUnsafe is what SPDX identifiers cannot hold: they are SPDXRef- and [A-Za-z0-9.-]+.
var idUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

func spdxID(parts ...string) string {
	var clean []string
	for _, p := range parts {
		if p = strings.Trim(idUnsafe.ReplaceAllString(p, "-"), "-"); p != "" {
			clean = append(clean, p)
		}
	}
	return "SPDXRef-" + strings.Join(clean, "-")
}

// SPDX is the image's SBOM as an SPDX 2.3 JSON document: the image (by digest), its base (by
// digest), its components and, for each, the npm packages installed into its node_modules with
// their versions, where npm fetched them, their integrity as checksums and their declared
// licenses; `npm i -g` packages belong to the image itself. Relationships: the document
// DESCRIBES the image, which is a DESCENDANT_OF its base and CONTAINS its components and
// packages; a component DEPENDS_ON what its package.json names, a package on what it requires.
// Every package is in the document itself: readers (syft, Trivy, Dependency-Track) follow no
// reference to another document.
func (img *Image) SPDX(b Builder, created time.Time) ([]byte, error) {
	if img.Digest == "" || img.Repository == "" {
		return nil, fmt.Errorf("an SBOM needs the image's repository and digest")
	}
	imageID := spdxID("Image")
	doc := spdxDocument{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              img.Repository + ":" + img.Tag + " " + img.Platform,
		DocumentNamespace: img.spdxNamespace(),
		CreationInfo: spdxCreationInfo{
			Comment:  img.sharedComment(),
			Created:  created.UTC().Format(time.RFC3339),
			Creators: []string{"Tool: " + b.Name + "-" + b.Version},
		},
	}
	rel := func(from, typ, to string) {
		doc.Relationships = append(doc.Relationships, spdxRelationship{from, typ, to})
	}
	doc.Packages = append(doc.Packages, spdxPackage{
		SPDXID: imageID, Name: img.Repository, VersionInfo: img.Tag, DownloadLocation: noAssertion,
		Checksums:        digestChecksum(img.Digest),
		LicenseConcluded: noAssertion, LicenseDeclared: noAssertion, CopyrightText: noAssertion,
		PrimaryPackagePurpose: "CONTAINER",
		// no comment: "the <platform> image of <repository>:<tag>" is the document's name
		ExternalRefs: []spdxExternalRef{purlRef(purlOCI(img.Repository, img.Digest, img.Tag, img.Platform))},
	})
	rel("SPDXRef-DOCUMENT", "DESCRIBES", imageID)
	if img.Base.Digest != "" {
		baseID := spdxID("Base")
		repo := img.Base.Repository()
		doc.Packages = append(doc.Packages, spdxPackage{
			SPDXID: baseID, Name: img.Base.Reference, VersionInfo: img.Base.Digest, DownloadLocation: noAssertion,
			Checksums:        digestChecksum(img.Base.Digest),
			LicenseConcluded: noAssertion, LicenseDeclared: noAssertion, CopyrightText: noAssertion,
			PrimaryPackagePurpose: "CONTAINER",
			ExternalRefs:          []spdxExternalRef{purlRef(purlOCI(repo, img.Base.Digest, "", img.Platform))},
			Comment:               "the base image, for " + img.Platform,
		})
		rel(imageID, "DESCENDANT_OF", baseID)
	}
	ids := map[string]string{} // owner + "\x00" + path → SPDX id
	taken := map[string]bool{}
	for _, in := range img.installs() {
		for _, p := range in.Install.Packages {
			id := spdxID("Package", ownerName(in.Owner), p.Path)
			// "@a/b" and "a-b" read the same once cleaned: the later one gets a number
			for n := 2; taken[id]; n++ {
				id = spdxID("Package", ownerName(in.Owner), p.Path, fmt.Sprint(n))
			}
			taken[id] = true
			ids[in.Owner+"\x00"+p.Path] = id
		}
	}
	for _, c := range img.Components {
		id := spdxID("Component", c.Label)
		pkg := spdxPackage{
			SPDXID: id, Name: c.ID, VersionInfo: img.componentVersion(c), DownloadLocation: noAssertion,
			LicenseConcluded: noAssertion, LicenseDeclared: noAssertion, CopyrightText: noAssertion,
			PrimaryPackagePurpose: "APPLICATION",
			Comment:               "Toa component " + c.ID + ", in /composition/" + c.Label,
		}
		if c.Package != "" {
			pkg.Comment += "; package.json: " + c.Package + " " + c.PackageVersion
			// what a scanner of the image finds at /composition/<label>/package.json
			pkg.ExternalRefs = []spdxExternalRef{purlRef(purlNPM(c.Package, c.PackageVersion))}
		}
		doc.Packages = append(doc.Packages, pkg)
		rel(imageID, "CONTAINS", id)
		for _, d := range c.Direct {
			rel(id, "DEPENDS_ON", ids[c.Label+"\x00"+d])
		}
	}
	for _, in := range img.installs() {
		for _, p := range in.Install.Packages {
			id := ids[in.Owner+"\x00"+p.Path]
			doc.Packages = append(doc.Packages, spdxNPM(id, p, in))
			rel(imageID, "CONTAINS", id)
			for _, d := range p.Dependencies {
				rel(id, "DEPENDS_ON", ids[in.Owner+"\x00"+d])
			}
		}
	}
	return marshal(doc)
}

func ownerName(owner string) string {
	if owner == "" {
		return "global"
	}
	return owner
}

func spdxNPM(id string, p Package, in ownedInstall) spdxPackage {
	out := spdxPackage{
		SPDXID: id, Name: p.Name, VersionInfo: p.Version, DownloadLocation: noAssertion,
		LicenseConcluded: noAssertion, LicenseDeclared: noAssertion, CopyrightText: noAssertion,
		PrimaryPackagePurpose: "LIBRARY",
		ExternalRefs:          []spdxExternalRef{purlRef(purlNPM(p.Name, p.Version))},
		Comment:               in.where(p),
	}
	if p.Resolved != "" {
		out.DownloadLocation = p.Resolved
	}
	if l := spdxLicense(p.License); l != "" {
		out.LicenseDeclared = l
	}
	for _, c := range checksums(p.Integrity) {
		out.Checksums = append(out.Checksums, spdxChecksum{c.Algorithm, c.Hex})
	}
	return out
}

func digestChecksum(digest string) []spdxChecksum {
	alg, hex, ok := strings.Cut(digest, ":")
	if !ok || alg != "sha256" {
		return nil
	}
	return []spdxChecksum{{"SHA256", hex}}
}

func purlRef(purl string) spdxExternalRef {
	return spdxExternalRef{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: purl}
}

// marshal is compact JSON with a final newline, '<', '>' and '&' written as themselves (a purl's
// query reads as one); fields in the order of the structs and maps sorted, so the same document
// has the same bytes. Not indented: every image's SBOM and provenance is sent again on a code
// change, and indentation was a fifth of their bytes; `jq .` shows them indented.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // Encode ends with the newline
		return nil, err
	}
	return buf.Bytes(), nil
}
