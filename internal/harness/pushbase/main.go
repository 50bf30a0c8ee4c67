// Command pushbase pushes the test base index (see internal/harness/bases.go) to a registry, for
// `make demo`, which has no test to build it in: go run ./internal/harness/pushbase ADDR.
package main

import (
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: pushbase REGISTRY (like 127.0.0.1:5000)")
		os.Exit(2)
	}
	ref := os.Args[1] + "/" + harness.BaseRepository + ":" + harness.BaseTag
	if err := push(ref); err != nil {
		fmt.Fprintf(os.Stderr, "pushbase: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(ref)
}

func push(ref string) error {
	idx, err := harness.BuildBaseIndex()
	if err != nil {
		return err
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return err
	}
	if err := remote.WriteIndex(r, idx); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}
