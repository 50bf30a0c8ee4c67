package attest

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// The CycloneDX 1.6 BOM, as its JSON schema (CycloneDX/specification, schema/bom-1.6.schema.json)
// names its fields; only what toa-push fills in.
type cdxBOM struct {
	BOMFormat    string          `json:"bomFormat"`
	SpecVersion  string          `json:"specVersion"`
	SerialNumber string          `json:"serialNumber"`
	Version      int             `json:"version"`
	Metadata     cdxMetadata     `json:"metadata"`
	Components   []cdxComponent  `json:"components"`
	Dependencies []cdxDependency `json:"dependencies"`
}

type cdxMetadata struct {
	Timestamp string       `json:"timestamp"`
	Tools     cdxTools     `json:"tools"`
	Component cdxComponent `json:"component"`
}

type cdxTools struct {
	Components []cdxComponent `json:"components"`
}

type cdxComponent struct {
	Type        string        `json:"type"`
	BOMRef      string        `json:"bom-ref,omitempty"`
	Group       string        `json:"group,omitempty"`
	Name        string        `json:"name"`
	Version     string        `json:"version,omitempty"`
	Description string        `json:"description,omitempty"`
	Hashes      []cdxHash     `json:"hashes,omitempty"`
	Licenses    []cdxLicense  `json:"licenses,omitempty"`
	PURL        string        `json:"purl,omitempty"`
	ExternalRef []cdxExternal `json:"externalReferences,omitempty"`
	Properties  []cdxProperty `json:"properties,omitempty"`
}

type cdxHash struct {
	Alg     string `json:"alg"`
	Content string `json:"content"`
}

type cdxLicense struct {
	Expression string `json:"expression"`
}

type cdxExternal struct {
	Type string `json:"type"`
	URL  string `json:"url"`
}

type cdxProperty struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type cdxDependency struct {
	Ref       string   `json:"ref"`
	DependsOn []string `json:"dependsOn,omitempty"`
}

// cdxAlg names hash algorithms as CycloneDX does.
var cdxAlg = map[string]string{"SHA1": "SHA-1", "SHA256": "SHA-256", "SHA384": "SHA-384", "SHA512": "SHA-512"}

// CycloneDX is the image's SBOM as a CycloneDX 1.6 JSON BOM, with what SPDX says (see SPDX):
// the image is the BOM's metadata component, its base and components and npm packages are
// components, and what depends on what is in dependencies; every component is in the BOM
// itself, none behind a BOM-Link.
func (img *Image) CycloneDX(b Builder, created time.Time) ([]byte, error) {
	if img.Digest == "" || img.Repository == "" {
		return nil, fmt.Errorf("an SBOM needs the image's repository and digest")
	}
	bom := cdxBOM{
		BOMFormat:    "CycloneDX",
		SpecVersion:  "1.6",
		SerialNumber: img.cdxSerial(),
		Version:      1,
		Metadata: cdxMetadata{
			Timestamp: created.UTC().Format(time.RFC3339),
			Tools:     cdxTools{Components: []cdxComponent{{Type: "application", Name: b.Name, Version: b.Version}}},
			Component: cdxComponent{
				Type: "container", BOMRef: "image", Name: img.Repository, Version: img.Tag,
				Description: "the " + img.Platform + " image of " + img.Repository + ":" + img.Tag,
				Hashes:      digestHash(img.Digest),
				PURL:        purlOCI(img.Repository, img.Digest, img.Tag, img.Platform),
				Properties:  []cdxProperty{{"toa:platform", img.Platform}, {"toa:digest", img.Digest}},
			},
		},
		Components: []cdxComponent{},
	}
	if img.Dependencies {
		bom.Metadata.Component.Description = img.sharedComment()
	}
	deps := map[string][]string{}
	if img.Base.Digest != "" {
		repo := img.Base.Repository()
		bom.Components = append(bom.Components, cdxComponent{
			Type: "container", BOMRef: "base", Name: img.Base.Reference, Version: img.Base.Digest,
			Description: "the base image, for " + img.Platform,
			Hashes:      digestHash(img.Base.Digest),
			PURL:        purlOCI(repo, img.Base.Digest, "", img.Platform),
		})
		deps["image"] = append(deps["image"], "base")
	}
	ref := func(owner, path string) string { return "npm:" + ownerName(owner) + ":" + path }
	for _, c := range img.Components {
		r := "component:" + c.Label
		comp := cdxComponent{Type: "application", BOMRef: r, Name: c.ID, Version: img.componentVersion(c),
			Description: "Toa component " + c.ID + ", in /composition/" + c.Label}
		if c.Package != "" {
			comp.Properties = []cdxProperty{{"toa:package", c.Package + " " + c.PackageVersion}}
			comp.PURL = purlNPM(c.Package, c.PackageVersion) // what a scanner finds at its package.json
		}
		bom.Components = append(bom.Components, comp)
		deps["image"] = append(deps["image"], r)
		deps[r] = []string{}
		for _, d := range c.Direct {
			deps[r] = append(deps[r], ref(c.Label, d))
		}
	}
	for _, in := range img.installs() {
		for _, p := range in.Install.Packages {
			r := ref(in.Owner, p.Path)
			bom.Components = append(bom.Components, cdxNPM(r, p, in))
			switch {
			case in.Owner == "":
				deps["image"] = append(deps["image"], r)
			case strings.HasPrefix(in.Owner, basePrefix) && img.Base.Digest != "":
				deps["base"] = append(deps["base"], r)
			}
			deps[r] = []string{}
			for _, d := range p.Dependencies {
				deps[r] = append(deps[r], ref(in.Owner, d))
			}
		}
	}
	refs := make([]string, 0, len(deps))
	for r := range deps {
		refs = append(refs, r)
	}
	sort.Strings(refs)
	for _, r := range refs {
		bom.Dependencies = append(bom.Dependencies, cdxDependency{Ref: r, DependsOn: deps[r]})
	}
	return marshal(bom)
}

func cdxNPM(ref string, p Package, in ownedInstall) cdxComponent {
	group, name := "", p.Name
	if strings.HasPrefix(name, "@") {
		if i := strings.IndexByte(name, '/'); i > 0 {
			group, name = name[:i], name[i+1:]
		}
	}
	out := cdxComponent{Type: "library", BOMRef: ref, Group: group, Name: name, Version: p.Version,
		PURL:       purlNPM(p.Name, p.Version),
		Properties: []cdxProperty{{"toa:installed-at", "/" + in.Install.Root + "/" + p.Path}}}
	if strings.HasPrefix(in.Owner, basePrefix) {
		out.Properties = append(out.Properties, cdxProperty{"toa:in", "the base image"})
	}
	for _, c := range checksums(p.Integrity) {
		out.Hashes = append(out.Hashes, cdxHash{cdxAlg[c.Algorithm], c.Hex})
	}
	if l := spdxLicense(p.License); l != "" {
		out.Licenses = []cdxLicense{{Expression: l}}
	}
	if p.Resolved != "" {
		out.ExternalRef = []cdxExternal{{Type: "distribution", URL: p.Resolved}}
	}
	return out
}

func digestHash(digest string) []cdxHash {
	alg, hex, ok := strings.Cut(digest, ":")
	if !ok || alg != "sha256" {
		return nil
	}
	return []cdxHash{{"SHA-256", hex}}
}
