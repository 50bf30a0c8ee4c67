package main

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/layer/sandbox"
)

// ciJobScript is the CI job: what its container is (the seccomp mode, the capabilities, whether
// the kernel lets it make a user namespace), that toa-push runs in the image, then toa-push on a
// writable copy of the checkout (a CI job's workspace), its -o json after a line of its own.
const ciJobScript = `set -u
echo "--- the job's container"
grep -E '^(Uid|Gid|CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status
echo "user.max_user_namespaces: $(cat /proc/sys/user/max_user_namespaces)"
python3 -c '
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
made = libc.unshare(0x10000000) == 0  # CLONE_NEWUSER: the kernel asks no capability for it
print("unshare(CLONE_NEWUSER):", "made" if made else os.strerror(ctypes.get_errno()))
'
[ "${PROBE_ONLY:-}" = 1 ] && exit 0
if ! toa-push --help >/work/toa-push-help 2>&1; then
	echo "toa-push does not run in this image:"
	cat /work/toa-push-help
	exit 97
fi
mkdir -p "$HOME" "$TOA_CACHE" && cp -R /app/native /work/native && cd /work/native || exit 98
echo "--- toa-push"
toa-push -o json --path . -k deployment >/work/out.json
code=$?
echo "--- toa-push -o json"
cat /work/out.json
exit $code
`

// TestCIJob runs toa-push as a CI job in a pod on the control plane's real node, as GitLab's
// Kubernetes executor, Tekton or a Jenkins agent runs it: containerd's default seccomp profile
// (RuntimeDefault), the default capabilities, hostNetwork to reach the test registry on
// loopback. The application (testdata/apps/native) has a postinstall, a native addon and
// build.run lines, for linux/amd64 and linux/arm64 (under QEMU) on the Debian bases. The profile
// refuses a user namespace (the same container unconfined makes one): as a non-root user the job
// exits 1 with the three ways out before anything is installed or pushed; as root it pushes,
// its scripts and lines chrooted in a private copy of the base as an unprivileged id (the
// sandbox's notice in the pod's log), and each platform's image loads its addon with its own
// node.
func TestCIJob(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs a registry, the Debian bases and the control plane's real node")
	}
	if os.Getenv("TOA_TEST_NO_CLUSTER") == "1" {
		t.Skip("TOA_TEST_NO_CLUSTER=1: no control plane")
	}
	kubeconfig := harness.Kubeconfig(t)
	harness.RealNode(t, kubeconfig)
	addr := harness.Registry(t)
	harness.PushDebianBase(t, addr)
	app := copyApp(t, "native", addr)
	start := time.Now()
	image := harness.PushCIJobImage(t, addr, binary, map[string]string{"/app/native": app})
	t.Logf("the CI job's image %s pushed in %s", image, time.Since(start).Round(time.Millisecond))
	namespace := harness.Namespace(t, kubeconfig)

	ok := t.Run("1 the default profile refuses a user namespace, which the same container unconfined makes", func(t *testing.T) {
		confined := harness.RunPod(t, kubeconfig, namespace, ciJobPod("probe-default", image, corev1.SeccompProfileTypeRuntimeDefault, 0, true), 5*time.Minute)
		unconfined := harness.RunPod(t, kubeconfig, namespace, ciJobPod("probe-unconfined", image, corev1.SeccompProfileTypeUnconfined, 0, true), 2*time.Minute)
		t.Logf("RuntimeDefault (started %s after its creation):\n%s", confined.Pulled.Round(time.Millisecond), confined.Log)
		t.Logf("Unconfined:\n%s", unconfined.Log)
		if confined.ExitCode != 0 || unconfined.ExitCode != 0 {
			t.Fatalf("the probes exited %d and %d", confined.ExitCode, unconfined.ExitCode)
		}
		for _, want := range []string{"Seccomp:\t2", "unshare(CLONE_NEWUSER): Operation not permitted"} {
			if !strings.Contains(confined.Log, want) {
				t.Errorf("under RuntimeDefault the probe did not say %q", want)
			}
		}
		for _, want := range []string{"Seccomp:\t0", "unshare(CLONE_NEWUSER): made"} {
			if !strings.Contains(unconfined.Log, want) {
				t.Errorf("unconfined the probe did not say %q", want)
			}
		}
		// the same capabilities, without CAP_SYS_ADMIN (21): the profile alone refuses
		eff := capLine(confined.Log, "CapEff")
		if eff == "" || eff != capLine(unconfined.Log, "CapEff") {
			t.Errorf("the two containers' capabilities differ: %q, %q", eff, capLine(unconfined.Log, "CapEff"))
		}
		if v, err := strconv.ParseUint(eff, 16, 64); err != nil || v&(1<<21) != 0 {
			t.Errorf("the job's capabilities %q: want the default set, without CAP_SYS_ADMIN", eff)
		}
	})
	if !ok {
		return
	}

	ok = t.Run("2 as a user it exits 1 with the three ways out, before anything is installed or pushed", func(t *testing.T) {
		job := harness.RunPod(t, kubeconfig, namespace, ciJobPod("as-a-user", image, corev1.SeccompProfileTypeRuntimeDefault, 4242, false), 3*time.Minute)
		t.Logf("exit %d (%s), started %s after its creation, ran %s:\n%s", job.ExitCode, job.Reason,
			job.Pulled.Round(time.Millisecond), job.Ran.Round(time.Millisecond), job.Log)
		if job.ExitCode != 1 {
			t.Errorf("the job exited %d, want 1", job.ExitCode)
		}
		for _, want := range []string{"Uid:\t4242", "it does not let toa-push make user namespaces (a seccomp filter refuses them",
			"toa-push runs as user 4242, not root", "run the job as root in its container", "allow user namespaces", "--scripts-on-runner"} {
			if !strings.Contains(job.Log, want) {
				t.Errorf("the job's log does not say %q", want)
			}
		}
		if strings.Contains(job.Log, "installing dependencies") {
			t.Error("npm ran before the refusal")
		}
		if job.Ran > time.Minute {
			t.Errorf("the refusal took %s", job.Ran)
		}
		for _, r := range repositories(t, addr) {
			if !strings.HasPrefix(r, "bases/") && r != harness.CIJobImageRef {
				t.Errorf("the refused job wrote %s to the registry", r)
			}
		}
	})
	if !ok {
		return
	}

	t.Run("3 as root it pushes amd64 and arm64 chrooted, and the images load their addon", func(t *testing.T) {
		job := harness.RunPod(t, kubeconfig, namespace, ciJobPod("as-root", image, corev1.SeccompProfileTypeRuntimeDefault, 0, false), 8*time.Minute)
		t.Logf("exit %d (%s), started %s after its creation, ran %s:\n%s", job.ExitCode, job.Reason,
			job.Pulled.Round(time.Millisecond), job.Ran.Round(time.Millisecond), job.Log)
		if job.ExitCode != 0 {
			t.Fatalf("the job exited %d, want 0", job.ExitCode)
		}
		for _, platform := range []string{"linux/amd64", "linux/arm64"} {
			want := "runs chrooted in a private copy of the base for " + platform + " as the unprivileged user 100000, without namespaces"
			if !strings.Contains(job.Log, want) {
				t.Errorf("the job's log does not say %q", want)
			}
		}
		if !strings.Contains(job.Log, "it does not let toa-push make user namespaces (a seccomp filter refuses them") {
			t.Error("the job's log does not say the seccomp filter refused the namespaces")
		}
		_, js, found := strings.Cut(job.Log, "--- toa-push -o json\n")
		var out pushOutput
		if err := json.Unmarshal([]byte(js), &out); !found || err != nil {
			t.Fatalf("toa-push -o json in the pod's log: %v", err)
		}
		var ref string
		for _, img := range out.Images {
			if strings.Contains(img.Name, "addon") {
				ref = img.Reference
			}
		}
		if ref == "" {
			t.Fatalf("no image of the composition addon in %+v", out.Images)
		}
		for _, c := range []struct {
			platform string
			machine  elf.Machine
			node     string
		}{
			{"linux/amd64", elf.EM_X86_64, "linux/x64 v18."},
			{"linux/arm64", elf.EM_AARCH64, "linux/arm64 v18."},
		} {
			t.Run(c.platform, func(t *testing.T) { checkNativeImage(t, ref, c.platform, c.machine, c.node) })
		}
	})
}

// ciJobPod is the CI job's pod: restartPolicy Never on the real node, the host's network, the
// seccomp profile given, the default capabilities; as root (uid 0) or as uid and its group; a
// writable emptyDir for its workspace, home and cache. probeOnly stops it after the probe of its
// container.
func ciJobPod(name, image string, profile corev1.SeccompProfileType, uid int64, probeOnly bool) *corev1.Pod {
	grace, deadline, noToken := int64(5), int64(10*60), false
	sc := &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: profile}}
	if uid != 0 {
		nonRoot := true
		sc.RunAsUser, sc.RunAsGroup, sc.RunAsNonRoot = &uid, &uid, &nonRoot
	}
	env := []corev1.EnvVar{{Name: "HOME", Value: "/work/home"}, {Name: "TOA_CACHE", Value: "/work/cache"}, {Name: "CI", Value: "true"}}
	if probeOnly {
		env = append(env, corev1.EnvVar{Name: "PROBE_ONLY", Value: "1"})
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"toa-test/ci-job": name}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			HostNetwork:                   true,
			SecurityContext:               sc,
			AutomountServiceAccountToken:  &noToken,
			TerminationGracePeriodSeconds: &grace,
			ActiveDeadlineSeconds:         &deadline,
			Containers: []corev1.Container{{
				Name:            "job",
				Image:           image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{"/bin/sh", "-c", ciJobScript},
				Env:             env,
				WorkingDir:      "/work",
				VolumeMounts:    []corev1.VolumeMount{{Name: "work", MountPath: "/work"}},
			}},
			Volumes: []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	harness.OnRealNode(&pod.Spec)
	return pod
}

// capLine is the value of a line "name:\tvalue" of /proc/self/status in a log.
func capLine(log, name string) string {
	for _, line := range strings.Split(log, "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// checkNativeImage unpacks the addon's image of platform and checks what the job built in its
// base: the addon an ELF of its CPU, the postinstall's marker of the base's node, build.run's
// file; and that the image's own node loads the addon, inside the image's root.
func checkNativeImage(t *testing.T, ref, platform string, machine elf.Machine, node string) {
	rootfs, _ := harness.Unpacked(t, ref, platform)
	modules := filepath.Join(rootfs, "composition", "native-addon", "node_modules")
	f, err := elf.Open(filepath.Join(modules, "toa-test-native", "build", "Release", "addon.node"))
	if err != nil {
		t.Fatalf("the addon: %v", err)
	}
	f.Close()
	if f.Machine != machine {
		t.Errorf("addon.node is for %s, want %s", f.Machine, machine)
	}
	marker, err := os.ReadFile(filepath.Join(modules, "toa-test-marker", "marker.txt"))
	if err != nil || !strings.HasPrefix(string(marker), node) {
		t.Errorf("the postinstall's marker: %q, %v; want %q...", marker, err, node)
	}
	if data, err := os.ReadFile(filepath.Join(rootfs, "etc", "toa-run-test")); err != nil || string(data) != "test\n" {
		t.Errorf("/etc/toa-run-test: %q, %v", data, err)
	}
	upper := filepath.Join(t.TempDir(), "upper")
	if err := os.Mkdir(upper, 0o755); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	start := time.Now()
	err = sandbox.Run(t.Context(), sandbox.Command{Root: rootfs, Upper: upper, Platform: platform,
		Args: []string{"node", "-e", "require('toa-test-native'); console.log(process.arch, 'loaded')"},
		Env:  []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, Dir: "/composition/native-addon", Stdout: &out, Stderr: &out})
	t.Logf("node -e require in the image: %s, %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(out.String()))
	if err != nil || !strings.Contains(out.String(), "loaded") {
		t.Errorf("node -e require: %v\n%s", err, out.String())
	}
}
