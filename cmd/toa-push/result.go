package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/toa-deploy/toa-deploy/internal/push/image"
	"github.com/toa-deploy/toa-deploy/internal/push/pipeline"
)

type pushedJSON struct {
	*image.Pushed
	Reference string `json:"reference"`
}

// writePushJSON lists every image with its digest, whether it was built, and the bytes sent.
func writePushJSON(w io.Writer, o *pipeline.Report) error {
	out := struct {
		Context       string       `json:"context"`
		Environment   string       `json:"environment"`
		Images        []pushedJSON `json:"images"`
		BytesSent     int64        `json:"bytesSent"`
		Kustomization string       `json:"kustomization"`
		Layout        string       `json:"ociLayout,omitempty"`
		FromLayout    string       `json:"fromOCILayout,omitempty"`

		Artifact *pipeline.ArtifactReport `json:"artifact,omitempty"`
	}{Context: o.Context, Environment: o.Environment, Images: []pushedJSON{}, Kustomization: o.Kustomization,
		Layout: o.Layout, FromLayout: o.FromLayout, Artifact: o.Artifact}
	for _, p := range o.Result.Images {
		out.Images = append(out.Images, pushedJSON{Pushed: p, Reference: p.Reference()})
		out.BytesSent += p.BytesSent
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func writePushText(w io.Writer, o *pipeline.Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	sent := "sent"
	if o.Layout != "" {
		sent = "written"
	}
	var total int64
	for _, p := range o.Result.Images {
		what := "exists"
		switch {
		case p.DepsBuilt:
			what = "built with its dependencies"
		case p.Built:
			what = "built"
		case p.Copied:
			what = "pushed from the layout"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s, %s %s%s\n", p.Name, p.Reference(), what, humanBytes(p.BytesSent), sent, attached(p.Attachments))
		total += p.BytesSent
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	where := ""
	if o.Layout != "" {
		where = " to the OCI layout " + o.Layout
	}
	if _, err := fmt.Fprintf(w, "%s %s in all%s; the kustomization is in %s\n", humanBytes(total), sent, where, o.Kustomization); err != nil {
		return err
	}
	if a := o.Artifact; a != nil {
		signed := ""
		if a.Signature != "" {
			signed = ", signed"
		}
		_, err := fmt.Fprintf(w, "the kustomization is the artifact %s@%s%s\n", a.Reference, a.Digest, signed)
		return err
	}
	return nil
}

// attached says what was attached to an image: ", with 2 SBOMs, provenance, 6 signatures".
func attached(list []image.Attachment) string {
	count := map[string]int{}
	for _, a := range list {
		count[a.Kind]++
	}
	var parts []string
	for _, k := range []struct{ kind, one, many string }{{"sbom", "an SBOM", "%d SBOMs"}, {"provenance", "provenance", "provenance ×%d"},
		{"signature", "a signature", "%d signatures"}, {"referrer", "a referrer", "%d referrers"}} {
		switch n := count[k.kind]; {
		case n == 1:
			parts = append(parts, k.one)
		case n > 1:
			parts = append(parts, fmt.Sprintf(k.many, n))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return ", with " + strings.Join(parts, ", ")
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
