// Package layer makes the bytes that become image layers: deterministic tar streams of a
// component's sources, of the node_modules npm installs on the runner for one platform, and of
// npm's global installs. It knows files and npm, and nothing of registries.
package layer

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Toolchain is what runs the install on the runner. Its versions are inputs of the dependencies
// hash: another npm may install another tree.
type Toolchain struct {
	Node string // "20.20.2"
	Npm  string // "11.19.1"
}

// DetectToolchain asks the runner's node and npm for their versions.
func DetectToolchain(ctx context.Context) (Toolchain, error) {
	node, err := version(ctx, "node")
	if err != nil {
		return Toolchain{}, err
	}
	npm, err := version(ctx, "npm")
	if err != nil {
		return Toolchain{}, err
	}
	return Toolchain{Node: strings.TrimPrefix(node, "v"), Npm: npm}, nil
}

func version(ctx context.Context, tool string) (string, error) {
	path, err := exec.LookPath(tool)
	if err != nil {
		return "", fmt.Errorf("%s is not on PATH: toa-push installs the dependencies with the runner's node and npm; install Node.js", tool)
	}
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("run %s --version: %w", tool, err)
	}
	return strings.TrimSpace(string(out)), nil
}
