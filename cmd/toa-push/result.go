package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/toa-deploy/toa-deploy/image"
	"github.com/toa-deploy/toa-deploy/toa"
)

type pushedJSON struct {
	*image.Pushed
	Reference string `json:"reference"`
}

// writePushJSON lists every image with its digest, whether it was built, and the bytes sent.
func writePushJSON(w io.Writer, app *toa.Application, result *image.Result, kustomization string) error {
	out := struct {
		Context       string       `json:"context"`
		Environment   string       `json:"environment"`
		Images        []pushedJSON `json:"images"`
		BytesSent     int64        `json:"bytesSent"`
		Kustomization string       `json:"kustomization"`
	}{Context: app.Name, Environment: app.Environment, Images: []pushedJSON{}, Kustomization: kustomization}
	for _, p := range result.Images {
		out.Images = append(out.Images, pushedJSON{Pushed: p, Reference: p.Reference()})
		out.BytesSent += p.BytesSent
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func writePushText(w io.Writer, result *image.Result, kustomization string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	var total int64
	for _, p := range result.Images {
		what := "exists"
		switch {
		case p.DepsBuilt:
			what = "built with its dependencies"
		case p.Built:
			what = "built"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s, %s sent\n", p.Name, p.Reference(), what, humanBytes(p.BytesSent))
		total += p.BytesSent
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%s sent in all; the kustomization is in %s\n", humanBytes(total), kustomization)
	return err
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
