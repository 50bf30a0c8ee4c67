package harness

// A CI job's image and its pod on the real node: toa-push run as GitLab's Kubernetes executor,
// Tekton or a Jenkins agent runs it, in a container under the runtime's default seccomp profile
// with the default capabilities, on the real node's containerd (realnode.go).

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// CIJobImageRef is where PushCIJobImage pushes, under the registry's address.
const CIJobImageRef = "toa-test/ci-job"

// PushCIJobImage pushes, as <addr>/toa-test/ci-job, the image of a CI job that runs toa-push:
// the runner's base (PushRunnerBase: Debian with a shell and python3, the runner's node and
// npm), program at /usr/local/bin/toa-push, and each host folder of trees at its place in the
// image (a checkout: the links in it followed, as a clone holds the files). It returns the
// image's reference by digest, which the real node's containerd pulls over plain HTTP (a
// loopback registry).
func PushCIJobImage(t testing.TB, addr, program string, trees map[string]string) string {
	t.Helper()
	base, err := remote.Image(baseRef(t, PushRunnerBase(t, addr)), remote.WithContext(t.Context()),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}))
	if err != nil {
		t.Fatalf("read the runner's base: %v", err)
	}
	data, err := jobLayer(program, trees)
	if err != nil {
		t.Fatalf("the CI job's layer: %v", err)
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.Append(base, mutate.Addendum{Layer: l, History: v1.History{CreatedBy: "harness: toa-push and the job's checkout"}})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(addr+"/"+CIJobImageRef+":test", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push the CI job's image %s: %v", ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return ref.Context().Digest(digest.String()).String()
}

// jobLayer is the tar of program at usr/local/bin/toa-push and of every tree at its place.
func jobLayer(program string, trees map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	made := map[string]bool{}
	dirs := func(p string) error {
		parts := strings.Split(p, "/")
		for i := 1; i < len(parts); i++ {
			d := strings.Join(parts[:i], "/")
			if made[d] {
				continue
			}
			made[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}); err != nil {
				return err
			}
		}
		return nil
	}
	if err := dirs("usr/local/bin/toa-push"); err != nil {
		return nil, err
	}
	if err := addFile(tw, program, "usr/local/bin/toa-push"); err != nil {
		return nil, err
	}
	places := make([]string, 0, len(trees))
	for place := range trees {
		places = append(places, place)
	}
	sort.Strings(places)
	for _, place := range places {
		to := strings.Trim(place, "/")
		if err := dirs(to); err != nil {
			return nil, err
		}
		if err := addTreeFollowing(tw, trees[place], to, 0); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// addTreeFollowing writes the tree under dir into tw at name, following links (a checkout's
// linked packages become its files).
func addTreeFollowing(tw *tar.Writer, dir, name string, depth int) error {
	if depth > 8 {
		return fmt.Errorf("%s: links nested deeper than 8", dir)
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755}); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		from, to := filepath.Join(dir, e.Name()), name+"/"+e.Name()
		info, err := os.Stat(from) // follows a link
		if err != nil {
			return err
		}
		switch {
		case info.IsDir():
			if err := addTreeFollowing(tw, from, to, depth+1); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			if err := addFile(tw, from, to); err != nil {
				return err
			}
		}
	}
	return nil
}

// OnRealNode places a pod's spec on the real node: its label as the node selector, its taint
// tolerated.
func OnRealNode(spec *corev1.PodSpec) {
	spec.NodeSelector = map[string]string{RealNodeLabel: RealNodeValue}
	spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: RealNodeTaint, Operator: corev1.TolerationOpEqual,
		Value: "true", Effect: corev1.TaintEffectNoSchedule})
}

// PodRun is how a pod that ran to its end ended.
type PodRun struct {
	ExitCode int32
	Reason   string
	// Log is its first container's log, stdout and stderr as the kubelet keeps them.
	Log string
	// Pulled is when the container started after the pod was created (the image's pull, the
	// sandbox's start); Ran how long the container ran.
	Pulled, Ran time.Duration
}

// RunPod creates pod (restartPolicy Never, one container) in namespace and waits, at most
// bound, for its container to end; then it returns how it ended and its log. A pod that cannot
// start (its image not pulled, its container not made) or has not ended within bound fails the
// test with its status, events and log so far.
func RunPod(t testing.TB, kubeconfig, namespace string, pod *corev1.Pod, bound time.Duration) PodRun {
	t.Helper()
	cs := clientset(t, kubeconfig)
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	created, err := cs.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	began := time.Now()
	describe := func(p *corev1.Pod) string {
		var b strings.Builder
		fmt.Fprintf(&b, "phase %s on %q", p.Status.Phase, p.Spec.NodeName)
		for _, c := range p.Status.Conditions {
			fmt.Fprintf(&b, "; %s=%s %s", c.Type, c.Status, c.Message)
		}
		for _, c := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, "; container %s: %+v", c.Name, c.State)
		}
		// the events' bounded list: those of this pod
		evs, err := cs.CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", p.Name).String(), Limit: 50})
		if err == nil {
			for _, e := range evs.Items {
				fmt.Fprintf(&b, "\n  event %s %s: %s", e.Type, e.Reason, e.Message)
			}
		}
		if log := podLog(cs, p); log != "" {
			fmt.Fprintf(&b, "\nits log:\n%s", log)
		}
		return b.String()
	}
	for {
		p, err := cs.CoreV1().Pods(namespace).Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			t.Fatalf("get pod %s: %v", created.Name, err)
		}
		if ctx.Err() != nil {
			if p == nil || p.Name == "" {
				p = created
			}
			t.Fatalf("pod %s did not end within %s: %s", created.Name, bound, describe(p))
		}
		for _, c := range p.Status.ContainerStatuses {
			if w := c.State.Waiting; w != nil && (strings.Contains(w.Reason, "ImagePull") || strings.HasSuffix(w.Reason, "Error") ||
				w.Reason == "InvalidImageName") {
				t.Fatalf("pod %s cannot start (%s: %s): %s", p.Name, w.Reason, w.Message, describe(p))
			}
			if end := c.State.Terminated; end != nil && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) {
				return PodRun{ExitCode: end.ExitCode, Reason: end.Reason, Log: podLog(cs, p),
					Pulled: end.StartedAt.Sub(p.CreationTimestamp.Time), Ran: end.FinishedAt.Sub(end.StartedAt.Time)}
			}
		}
		if p.Status.Phase == corev1.PodFailed {
			t.Fatalf("pod %s failed without a container's end (%s): %s", p.Name, time.Since(began).Round(time.Second), describe(p))
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// podLog is a pod's first container's log, its first MiB, from the kubelet's file on this host
// (kubectl logs cannot reach the real node: the API server dials the kubelet at the node's
// address, 10.244.77.1, and it listens on 127.0.0.1 alone), else through the API server; "" where
// neither has it.
func podLog(cs *kubernetes.Clientset, p *corev1.Pod) string {
	if len(p.Spec.Containers) > 0 {
		file := filepath.Join(stateDir(), "realnode", "pod-logs", p.Namespace+"_"+p.Name+"_"+string(p.UID), p.Spec.Containers[0].Name, "0.log")
		if f, err := os.Open(file); err == nil {
			defer f.Close()
			return criLog(io.LimitReader(f, 1<<20))
		}
	}
	limit := int64(1 << 20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{LimitBytes: &limit}).DoRaw(ctx)
	if err != nil {
		return ""
	}
	return string(data)
}

// criLog is the text of a log in the CRI's format ("<time> <stream> <P|F> <text>" a line, P a
// part of a line the next continues), stdout and stderr in the order written.
func criLog(r io.Reader) string {
	data, _ := io.ReadAll(r)
	var b strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) < 3 {
			continue
		}
		text := ""
		if len(f) == 4 {
			text = f[3]
		}
		b.WriteString(text)
		if f[2] != "P" {
			b.WriteByte('\n')
		}
	}
	return b.String()
}
