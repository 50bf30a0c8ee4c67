package revision

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// The bounds of a revision's objects. Compressed, what a Secret holds (1 MiB of data, less what
// its metadata takes), the images included. Expanded, and in JSON values and objects, what a
// reader takes in: a revision of 900 KiB that expands to 64 MiB of `[{},{},...]` would be 22
// million maps, gigabytes in memory, so its values are counted as they stream, before any is
// kept. An application of 1,000 compositions (a Deployment, a Service and a ConfigMap each, an
// image pinned by digest each) takes 110 KiB of objects and 45 KiB of images, 230,000 values.
const (
	maxRevisionSize   = 900 << 10
	maxEncoded        = (maxRevisionSize + 2) / 3 * 4
	maxExpanded       = 64 << 20
	maxValues         = 1 << 20 // about 80 a Toa object: 10,000 objects take 800,000
	maxObjects        = 10000
	maxDepth          = 100
	maxImagesSize     = 256 << 10 // compressed: 10,000 images pinned by digest take about 450 KiB expanded, 150 KiB compressed
	maxEncodedImages  = (maxImagesSize + 2) / 3 * 4
	maxExpandedImages = 16 << 20
	maxImages         = 100000
)

// Check says, before anything is applied, whether a revision can hold the objects: an
// application too large to record is refused (exit 2) before it is half applied.
func Check(objects []*unstructured.Unstructured) error {
	_, _, err := packAll(objects)
	return err
}

// packAll is the objects and their images as a revision stores them, within the bounds above.
func packAll(objects []*unstructured.Unstructured) (data, images string, err error) {
	if len(objects) > maxObjects {
		return "", "", fault.BadInput(fmt.Errorf("the application has %d objects, more than a revision holds (%d): "+
			"split it into two Toa contexts", len(objects), maxObjects))
	}
	if data, err = pack(objects); err != nil {
		return "", "", err
	}
	if images, err = packImages(imagesOf(objects)); err != nil {
		return "", "", err
	}
	if n := base64.StdEncoding.DecodedLen(len(data)) + base64.StdEncoding.DecodedLen(len(images)); n > maxRevisionSize {
		return "", "", fault.BadInput(fmt.Errorf("the application's objects and images take %d KiB compressed, more than a Secret holds (%d KiB): "+
			"the revision cannot be recorded; split the application into two Toa contexts", n>>10, maxRevisionSize>>10))
	}
	return data, images, nil
}

// packImages is the images one a line, gzipped, base64 as a Secret's data is; "" for none.
func packImages(images []string) (string, error) {
	if len(images) == 0 {
		return "", nil
	}
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := io.WriteString(zw, strings.Join(images, "\n")); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	if b.Len() > maxImagesSize {
		return "", fault.BadInput(fmt.Errorf("the application's %d images take %d KiB compressed, more than a revision holds (%d KiB)",
			len(images), b.Len()>>10, maxImagesSize>>10))
	}
	return base64.StdEncoding.EncodeToString(b.Bytes()), nil
}

// unpackImages reads a revision's images within the bounds above.
func unpackImages(encoded string) ([]string, error) {
	if len(encoded) > maxEncodedImages {
		return nil, fmt.Errorf("%s takes %d KiB, more than a revision holds (%d KiB)", imagesKey, len(encoded)>>10, maxEncodedImages>>10)
	}
	raw, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", imagesKey, err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s is not gzip: %w", imagesKey, err)
	}
	text, err := io.ReadAll(io.LimitReader(zr, maxExpandedImages+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: %w", imagesKey, err)
	case len(text) > maxExpandedImages:
		return nil, fmt.Errorf("%s expands to more than %d MiB", imagesKey, maxExpandedImages>>20)
	}
	images := strings.Split(string(text), "\n")
	if len(images) > maxImages {
		return nil, fmt.Errorf("%s holds more than %d images", imagesKey, maxImages)
	}
	return images, nil
}

// pack is the objects as a JSON list, gzipped, base64 as a Secret's data is.
func pack(objects []*unstructured.Unstructured) (string, error) {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	list := make([]map[string]any, 0, len(objects))
	for _, obj := range objects {
		list = append(list, obj.Object)
	}
	if err := json.NewEncoder(zw).Encode(list); err != nil {
		return "", fmt.Errorf("encode the revision's objects: %w", err)
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	if b.Len() > maxRevisionSize {
		return "", fault.BadInput(fmt.Errorf("the application's objects take %d KiB compressed, more than a Secret holds (%d KiB): "+
			"the revision cannot be recorded; split the application into two Toa contexts", b.Len()>>10, maxRevisionSize>>10))
	}
	return base64.StdEncoding.EncodeToString(b.Bytes()), nil
}

// unpack decodes a revision's objects within the bounds above: it counts first, streaming, and
// decodes only what passed.
func unpack(encoded string) ([]*unstructured.Unstructured, error) {
	if len(encoded) > maxEncoded {
		return nil, fmt.Errorf("%s takes %d KiB, more than a revision holds (%d KiB)", revisionKey, len(encoded)>>10, maxEncoded>>10)
	}
	raw, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", revisionKey, err)
	}
	expand := func() (io.Reader, error) {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("%s is not gzip: %w", revisionKey, err)
		}
		return &boundedReader{r: zr, left: maxExpanded}, nil
	}
	r, err := expand()
	if err != nil {
		return nil, err
	}
	if err := within(r); err != nil {
		return nil, fmt.Errorf("%s: %w", revisionKey, err)
	}
	if r, err = expand(); err != nil {
		return nil, err
	}
	var list []map[string]any
	if err := json.NewDecoder(r).Decode(&list); err != nil {
		return nil, fmt.Errorf("%s: %w", revisionKey, err)
	}
	out := make([]*unstructured.Unstructured, 0, len(list))
	for _, m := range list {
		if m == nil {
			return nil, fmt.Errorf("%s: an object is null", revisionKey)
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}

// within reads a JSON list of objects token by token, keeping none, and fails past the bounds.
func within(r io.Reader) error {
	dec := json.NewDecoder(r)
	values, depth, objects := 0, 0, 0 // keys count as values
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('['), json.Delim('{'):
			if depth == 1 {
				objects++
			}
			depth++
		case json.Delim(']'), json.Delim('}'):
			depth--
			continue
		}
		values++
		switch {
		case values > maxValues:
			return fmt.Errorf("holds more than %d JSON values: not a revision toa-apply wrote", maxValues)
		case objects > maxObjects:
			return fmt.Errorf("holds more than %d objects: not a revision toa-apply wrote", maxObjects)
		case depth > maxDepth:
			return fmt.Errorf("nests deeper than %d levels: not a revision toa-apply wrote", maxDepth)
		}
	}
}

// boundedReader fails once more than left bytes are read.
type boundedReader struct {
	r    io.Reader
	left int64
}

var errExpanded = fmt.Errorf("expands to more than %d MiB", maxExpanded>>20)

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errExpanded
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n, errExpanded
	}
	return n, err
}
