package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// peakLimit is the most memory a run fed a hostile file may take (issue 26).
const peakLimit = 300 << 20

// measured is a toa-push run with what the user meets: the exit code, stdout, stderr, how long it
// took and its peak resident memory (the process and the children it waited for). A run that
// passes within is killed, and the test fails.
type measured struct {
	code           int
	stdout, stderr string
	took           time.Duration
	peak           int64 // bytes
}

// launcherVariable makes the test binary a launcher of toa-push that writes its peak memory to
// the file the variable names. The peak the kernel reports for a child counts the memory of the
// process it was forked from (the test process, hundreds of MiB after some tests): the launcher,
// small after its exec, forks toa-push afresh.
const launcherVariable = "TOA_TEST_PEAK_FILE"

func launch() int {
	peakFile := os.Getenv(launcherVariable)
	os.Unsetenv(launcherVariable)
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	if cmd.ProcessState == nil {
		fmt.Fprintln(os.Stderr, err)
		return 125
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		os.WriteFile(peakFile, []byte(fmt.Sprint(ru.Maxrss<<10)), 0o644)
	}
	return cmd.ProcessState.ExitCode()
}

func runMeasured(t *testing.T, dir string, within time.Duration, args ...string) measured {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	peakFile := filepath.Join(t.TempDir(), "peak")
	cmd := exec.CommandContext(ctx, self, append([]string{binary}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TOA_ENV=", "CI=true", launcherVariable+"="+peakFile)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	m := measured{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("toa-push ran past %s and was killed:\n%s", within, m.stderr)
	}
	if exit, ok := err.(*exec.ExitError); ok {
		m.code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("run toa-push: %v", err)
	}
	data, err := os.ReadFile(peakFile)
	if err != nil {
		t.Fatalf("the launcher measured nothing: %v\n%s", err, m.stderr)
	}
	fmt.Sscan(string(data), &m.peak)
	if m.peak > peakLimit {
		t.Errorf("peak memory %d MiB, more than %d MiB", m.peak>>20, peakLimit>>20)
	}
	if strings.Contains(m.stderr, "goroutine ") || strings.Contains(m.stderr, "panic") {
		t.Errorf("a stack trace reached the user:\n%s", m.stderr)
	}
	return m
}

// noTags fails the test when the registry holds any tag of the application's repositories: a
// refused run pushes nothing, and no run leaves a tag on an incomplete image.
func noTags(t *testing.T, registry string, repos ...string) {
	t.Helper()
	for _, repo := range repos {
		r, err := name.NewRepository(registry+"/"+repo, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if tags, err := remote.List(r); err == nil && len(tags) > 0 {
			t.Errorf("%s has tags %v", repo, tags)
		}
	}
}

// packTarball writes a package tarball as `npm pack` makes it: package/package.json and
// package/index.js, gzipped.
func packTarball(t *testing.T, path, name, index string) {
	t.Helper()
	var buf bytes.Buffer
	z := gzip.NewWriter(&buf)
	tw := tar.NewWriter(z)
	for file, body := range map[string]string{
		"package/package.json": `{"name": "` + name + `", "version": "1.0.0", "main": "index.js"}`,
		"package/index.js":     index,
	} {
		if err := tw.WriteHeader(&tar.Header{Name: file, Mode: 0o644, Size: int64(len(body)), ModTime: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	z.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// localsApp copies testdata/apps/locals, packs its tarball and writes its lockfile with npm,
// offline (the packages are all on the disk).
func localsApp(t *testing.T, registry string) (dir, component string) {
	t.Helper()
	dir = copyApp(t, "locals", registry)
	component = filepath.Join(dir, "components", "shop.vendored")
	packTarball(t, filepath.Join(component, "x-1.0.0.tgz"), "x", "module.exports = 1\n")
	npm := exec.Command("npm", "install", "--package-lock-only", "--offline", "--no-audit", "--no-fund", "--install-links")
	npm.Dir = component
	npm.Env = append(os.Environ(), "npm_config_cache="+t.TempDir())
	if out, err := npm.CombinedOutput(); err != nil {
		t.Fatalf("npm install --package-lock-only: %v\n%s", err, out)
	}
	return dir, component
}

func setDependency(t *testing.T, component, dep, spec string) {
	t.Helper()
	path := filepath.Join(component, "package.json")
	var pkg map[string]any
	data, _ := os.ReadFile(path)
	if err := json.Unmarshal(data, &pkg); err != nil {
		t.Fatal(err)
	}
	pkg["dependencies"] = map[string]any{dep: spec}
	data, _ = json.Marshal(pkg)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(component, "package-lock.json"))
}

// TestLocalPackages: a `file:` tarball beside the package.json installs (npm ci found it under
// the staging folder joined with the component's absolute path before); a `file:` folder edited
// in place gives a new dependencies image and tag; a `file:` dependency on /dev/zero, a named
// pipe or a tarball past 256 MiB is bad input naming the package.json and the key, at once,
// within 300 MiB, pushing nothing.
func TestLocalPackages(t *testing.T) {
	registry := harness.MemoryRegistry(t)
	harness.PushRandomBase(t, registry+"/bases/node:test", "linux/amd64")
	t.Setenv("TOA_CACHE", t.TempDir())

	t.Run("installs and covers the contents", func(t *testing.T) {
		dir, _ := localsApp(t, registry)
		k := filepath.Join(dir, "deployment")
		m := runMeasured(t, dir, 5*time.Minute, "-o", "json", "--path", dir, "-k", k)
		if m.code != 0 {
			t.Fatalf("exit %d:\n%s", m.code, m.stderr)
		}
		var first pushOutput
		if err := json.Unmarshal([]byte(m.stdout), &first); err != nil || len(first.Images) != 1 || !first.Images[0].DepsBuilt {
			t.Fatalf("%v: %s", err, m.stdout)
		}
		// the vendored folder edited in place: another dependencies image, another tag
		if err := os.WriteFile(filepath.Join(dir, "vendor", "y", "index.js"), []byte("module.exports = 3\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		m = runMeasured(t, dir, 5*time.Minute, "-o", "json", "--path", dir, "-k", k)
		if m.code != 0 {
			t.Fatalf("exit %d:\n%s", m.code, m.stderr)
		}
		var second pushOutput
		if err := json.Unmarshal([]byte(m.stdout), &second); err != nil || len(second.Images) != 1 {
			t.Fatalf("%v: %s", err, m.stdout)
		}
		if second.Images[0].Tag == first.Images[0].Tag || !second.Images[0].DepsBuilt {
			t.Errorf("a local package edited in place: tag %s then %s, dependencies built %v", first.Images[0].Tag, second.Images[0].Tag, second.Images[0].DepsBuilt)
		}
	})

	for _, c := range []struct {
		name  string
		make  func(t *testing.T, path string)
		words string
	}{
		{"dev-zero", func(t *testing.T, path string) {
			if err := os.Symlink("/dev/zero", path); err != nil {
				t.Fatal(err)
			}
		}, `links to /dev/zero, which is a device, not a package's folder or tarball`},
		{"fifo", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}, `is a named pipe (FIFO), not a package's folder or tarball`},
		{"too-large", func(t *testing.T, path string) {
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			f.Truncate(300 << 20) // sparse: no disk used
			f.Close()
		}, `a tarball of 300 MiB, more than the 256 MiB toa-deploy reads of one`},
	} {
		t.Run(c.name, func(t *testing.T) {
			registry := harness.MemoryRegistry(t) // of its own: nothing may be pushed to it
			harness.PushRandomBase(t, registry+"/bases/node:test", "linux/amd64")
			dir := copyApp(t, "locals", registry)
			component := filepath.Join(dir, "components", "shop.vendored")
			c.make(t, filepath.Join(dir, "vendor", "odd.tgz"))
			setDependency(t, component, "odd", "file:../../vendor/odd.tgz")
			for _, args := range [][]string{{"--plan"}, {"--timeout", "20s"}} {
				m := runMeasured(t, dir, 30*time.Second, append([]string{"--path", dir, "-k", filepath.Join(dir, "deployment")}, args...)...)
				want := `package.json: dependencies.odd: is "file:../../vendor/odd.tgz", and `
				if m.code != 2 || !strings.Contains(m.stderr, want) || !strings.Contains(m.stderr, c.words) {
					t.Errorf("%v: exit %d, want 2 with %q and %q:\n%s", args, m.code, want, c.words, m.stderr)
				}
				if m.took > 10*time.Second {
					t.Errorf("%v: took %s", args, m.took)
				}
				t.Logf("%v: exit %d in %s, peak %d MiB", args, m.code, m.took.Round(time.Millisecond), m.peak>>20)
			}
			noTags(t, registry, "shop/composition-front")
		})
	}
}

// TestKustomizationFolderRefused: a -k folder holding a file toa-push did not write is refused
// before any work, naming it (it was emptied silently, exit 0); a kustomization.yaml there that
// links to /dev/zero or is a named pipe is refused by name, never read. Nothing is pushed.
func TestKustomizationFolderRefused(t *testing.T) {
	t.Setenv("TOA_CACHE", t.TempDir())
	for _, c := range []struct {
		name  string
		make  func(t *testing.T, k string)
		words string
	}{
		{"foreign file", func(t *testing.T, k string) {
			os.WriteFile(filepath.Join(k, "kustomization.yaml"), []byte("# Written by toa-push for the Toa context 'shop'.\nresources: [deployments.yaml]\n"), 0o644)
			os.WriteFile(filepath.Join(k, "deployments.yaml"), []byte("kind: Deployment\n"), 0o644)
			os.WriteFile(filepath.Join(k, "notes.txt"), []byte("mine\n"), 0o644)
		}, "deployment: holds files toa-push did not write (notes.txt): toa-push writes the kustomization there, and would replace it"},
		{"dev-zero", func(t *testing.T, k string) {
			os.Symlink("/dev/zero", filepath.Join(k, "kustomization.yaml"))
		}, "deployment/kustomization.yaml: links to /dev/zero, which is a device, not a regular file"},
		{"fifo", func(t *testing.T, k string) {
			syscall.Mkfifo(filepath.Join(k, "kustomization.yaml"), 0o644)
		}, "deployment/kustomization.yaml: is a named pipe (FIFO), not a regular file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			registry := harness.MemoryRegistry(t)
			harness.PushRandomBase(t, registry+"/bases/node:test", "linux/amd64")
			dir, _ := localsApp(t, registry)
			k := filepath.Join(dir, "deployment")
			os.Mkdir(k, 0o755)
			c.make(t, k)
			for _, args := range [][]string{{"--plan"}, {"--timeout", "20s"}} {
				m := runMeasured(t, dir, 30*time.Second, append([]string{"--path", dir, "-k", k}, args...)...)
				if m.code != 2 || !strings.Contains(m.stderr, c.words) {
					t.Errorf("%v: exit %d, want 2 with %q:\n%s", args, m.code, c.words, m.stderr)
				}
				if m.took > 10*time.Second {
					t.Errorf("%v: took %s", args, m.took)
				}
				t.Logf("%v: exit %d in %s, peak %d MiB", args, m.code, m.took.Round(time.Millisecond), m.peak>>20)
			}
			if c.name == "foreign file" {
				if _, err := os.Stat(filepath.Join(k, "notes.txt")); err != nil {
					t.Errorf("the user's file is gone: %v", err)
				}
			}
			noTags(t, registry, "shop/composition-front")
		})
	}
}

// TestRetagKeepsTags: the same base under another name (registry.build.image changed, the same
// digests) gives the same tags, and nothing is built again (README: a retag keeps them).
func TestRetagKeepsTags(t *testing.T) {
	registry := harness.MemoryRegistry(t)
	harness.PushRandomBase(t, registry+"/bases/node:test", "linux/amd64")
	from, _ := name.ParseReference(registry+"/bases/node:test", name.Insecure)
	to, _ := name.ParseReference(registry+"/mirror/node:renamed", name.Insecure)
	idx, err := remote.Index(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(to, idx); err != nil {
		t.Fatal(err)
	}
	dir, _ := localsApp(t, registry)
	cache := t.TempDir()
	first := push(t, dir, cache)
	context := filepath.Join(dir, "context.toa.yaml")
	data, _ := os.ReadFile(context)
	os.WriteFile(context, []byte(strings.ReplaceAll(string(data), "/bases/node:test", "/mirror/node:renamed")), 0o644)
	second := pushUnread(t, dir, cache).out
	if len(first.Images) != 1 || len(second.Images) != 1 {
		t.Fatalf("images: %v, %v", first.Images, second.Images)
	}
	if first.Images[0].Tag != second.Images[0].Tag || second.Images[0].Built {
		t.Errorf("the same base renamed: tag %s then %s, built again %v", first.Images[0].Tag, second.Images[0].Tag, second.Images[0].Built)
	}
}

// TestLayoutBlobsBounded: --from-oci-layout reads no index, manifest or config past 4 MiB, none
// that is not its digest, and never waits on a named pipe: a 2 GB index blob (declared so, or
// declared small), and a FIFO in its place, are bad input naming the blob, within 300 MiB.
func TestLayoutBlobsBounded(t *testing.T) {
	t.Setenv("TOA_CACHE", t.TempDir())
	const hex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	sparse := func(t *testing.T, path string) {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		f.Truncate(2 << 30) // sparse: no disk used
		f.Close()
	}
	for _, c := range []struct {
		name     string
		declared int64
		make     func(t *testing.T, path string)
		words    string
	}{
		{"2 GB declared", 2 << 30, sparse, "is declared 2147483648 bytes, more than the 4 MiB toa-push reads of a manifest or config"},
		{"2 GB declared small", 300, sparse, "is 2 GiB, more than the 4 MiB toa-deploy reads"},
		{"fifo", 300, func(t *testing.T, path string) { syscall.Mkfifo(path, 0o644) }, "is a named pipe (FIFO), not a regular file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			registry := harness.MemoryRegistry(t)
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755)
			os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion": "1.0.0"}`), 0o644)
			index := map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
				"manifests": []any{map[string]any{"mediaType": "application/vnd.oci.image.index.v1+json", "digest": "sha256:" + hex,
					"size": c.declared, "annotations": map[string]string{"io.containerd.image.name": registry + "/shop/composition-front:1a2b3c4d",
						"org.opencontainers.image.ref.name": "1a2b3c4d"}}}}
			data, _ := json.Marshal(index)
			os.WriteFile(filepath.Join(dir, "index.json"), data, 0o644)
			c.make(t, filepath.Join(dir, "blobs", "sha256", hex))
			os.Mkdir(filepath.Join(dir, "kustomization"), 0o755)
			os.WriteFile(filepath.Join(dir, "kustomization", "kustomization.yaml"),
				[]byte("# Written by toa-push for the Toa context 'shop'.\napiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nimages:\n- name: "+registry+"/shop/composition-front\n  digest: sha256:"+hex+"\n"), 0o644)
			m := runMeasured(t, dir, 30*time.Second, "--from-oci-layout", dir, "-k", filepath.Join(t.TempDir(), "deployment"))
			if m.code != 2 || !strings.Contains(m.stderr, "blobs/sha256/"+hex) || !strings.Contains(m.stderr, c.words) {
				t.Errorf("exit %d, want 2 naming the blob with %q:\n%s", m.code, c.words, m.stderr)
			}
			if m.took > 10*time.Second {
				t.Errorf("took %s", m.took)
			}
			t.Logf("exit %d in %s, peak %d MiB", m.code, m.took.Round(time.Millisecond), m.peak>>20)
			noTags(t, registry, "shop/composition-front")
		})
	}
}

// TestNamedFilesBounded: the files named by --sign-key and --ca-file are read as every file of
// the user's is: a named pipe or a link to /dev/zero is refused by name at once.
func TestNamedFilesBounded(t *testing.T) {
	t.Setenv("TOA_CACHE", t.TempDir())
	registry := harness.MemoryRegistry(t)
	harness.PushRandomBase(t, registry+"/bases/node:test", "linux/amd64")
	dir, _ := localsApp(t, registry)
	fifo := filepath.Join(t.TempDir(), "key.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		flag, file, words string
	}{
		{"--sign-key", fifo, "key.pem: is a named pipe (FIFO), not a regular file"},
		{"--ca-file", zero, "ca.pem: links to /dev/zero, which is a device, not a regular file"},
	} {
		m := runMeasured(t, dir, 30*time.Second, "--path", dir, "-k", filepath.Join(dir, "deployment"), c.flag, c.file)
		if m.code != 2 || !strings.Contains(m.stderr, c.words) || m.took > 10*time.Second {
			t.Errorf("%s: exit %d in %s, want 2 with %q:\n%s", c.flag, m.code, m.took, c.words, m.stderr)
		}
		t.Logf("%s: exit %d in %s, peak %d MiB", c.flag, m.code, m.took.Round(time.Millisecond), m.peak>>20)
	}
	noTags(t, registry, "shop/composition-front")
}

// TestOddCacheFilesAreAbsent: a cache file that is a named pipe or a link to /dev/zero is no
// entry: a push neither waits on it nor reads it without end, and succeeds.
func TestOddCacheFilesAreAbsent(t *testing.T) {
	registry := harness.MemoryRegistry(t)
	harness.PushRandomBase(t, registry+"/bases/node:test", "linux/amd64")
	dir, _ := localsApp(t, registry)
	cache := t.TempDir()
	t.Setenv("TOA_CACHE", cache)
	sum := sha256.Sum256([]byte(registry + "/bases/node:test"))
	fifo := func(path string) {
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := syscall.Mkfifo(path, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	zero := func(path string) {
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.Symlink("/dev/zero", path); err != nil {
			t.Fatal(err)
		}
	}
	fifo(filepath.Join(cache, "runner.json"))
	zero(filepath.Join(cache, "bases", hex.EncodeToString(sum[:])+".json"))
	fifo(filepath.Join(cache, "registries", strings.NewReplacer(":", "_", "/", "_").Replace(registry)+".blobs"))
	m := runMeasured(t, dir, 2*time.Minute, "--path", dir, "-k", filepath.Join(dir, "deployment"))
	if m.code != 0 || m.took > time.Minute {
		t.Errorf("exit %d in %s, want 0:\n%s", m.code, m.took, m.stderr)
	}
	t.Logf("exit %d in %s, peak %d MiB", m.code, m.took.Round(time.Millisecond), m.peak>>20)
}
