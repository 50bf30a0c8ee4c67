package sandbox

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/containerseccomp"
)

// Each CPU's probe is an ELF of that CPU that exits 0: read by debug/elf, and run natively or
// by QEMU's user-mode emulator of it where the runner has it (qemu-user-static), not through
// binfmt_misc.
func TestProbeCPUs(t *testing.T) {
	machines := map[string]elf.Machine{"arm64": elf.EM_AARCH64, "amd64": elf.EM_X86_64, "arm": elf.EM_ARM, "386": elf.EM_386,
		"riscv64": elf.EM_RISCV, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390}
	for arch := range qemuNames {
		t.Run(arch, func(t *testing.T) {
			cpu, ok := probeCPUs[arch]
			if !ok {
				t.Fatalf("no probe for %s, which qemuNames names", arch)
			}
			file := filepath.Join(t.TempDir(), "probe")
			if err := os.WriteFile(file, cpu.elf(), 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := elf.Open(file)
			if err != nil {
				t.Fatalf("debug/elf: %v", err)
			}
			defer f.Close()
			order := binary.ByteOrder(binary.LittleEndian)
			if arch == "s390x" {
				order = binary.BigEndian
			}
			if f.Machine != machines[arch] || f.ByteOrder != order || (f.Class == elf.ELFCLASS64) != cpu.is64 || f.Type != elf.ET_EXEC {
				t.Errorf("%s: %s %s %s %s", arch, f.Machine, f.ByteOrder, f.Class, f.Type)
			}
			if len(f.Progs) != 1 || f.Progs[0].Type != elf.PT_LOAD || f.Entry < f.Progs[0].Vaddr || f.Entry >= f.Progs[0].Vaddr+f.Progs[0].Filesz {
				t.Errorf("%s: the entry %#x is not in its one segment: %+v", arch, f.Entry, f.Progs)
			}
			runner := file
			var args []string
			if arch != runtime.GOARCH {
				runner = "/usr/bin/qemu-" + qemuNames[arch] + "-static"
				if _, err := os.Stat(runner); err != nil {
					t.Skipf("no %s to run the probe with", runner)
				}
				args = []string{file}
			}
			if out, err := exec.Command(runner, args...).CombinedOutput(); err != nil {
				t.Errorf("the probe of %s: %v %s", arch, err, out)
			}
		})
	}
}

// Where binfmt_misc cannot be read, a registered emulator with the F flag is found by running
// the probe chrooted in an empty folder; a CPU no emulator is registered for is refused, with
// what to run.
func TestProbeEmulator(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the probe chroots as root here; as a user it needs a user namespace")
	}
	binfmt := "/proc/sys/fs/binfmt_misc"
	if !binfmtMounted(binfmt) {
		t.Skipf("%s is not mounted here: what is registered cannot be known to the test", binfmt)
	}
	for arch, qemu := range qemuNames {
		if arch == runtime.GOARCH || (runtime.GOARCH == "amd64" && arch == "386") { // Check's own CPUs
			continue
		}
		t.Run(arch, func(t *testing.T) {
			data, readErr := os.ReadFile(filepath.Join(binfmt, "qemu-"+qemu))
			entry := string(data)
			_, flags, _ := strings.Cut(entry, "flags: ")
			flags, _, _ = strings.Cut(flags, "\n")
			want := "no emulator for " + arch + " is registered with binfmt_misc"
			switch {
			case readErr == nil && strings.HasPrefix(entry, "enabled") && strings.Contains(flags, "F"):
				want = ""
			case readErr == nil && strings.HasPrefix(entry, "enabled"):
				want = "the emulator for " + arch + " is registered without the F flag"
			}
			err := probeEmulator("linux/"+arch, arch, "register it")
			t.Logf("%s (flags %q): %v", arch, flags, err)
			var runner *RunnerError
			switch {
			case want == "" && err != nil:
				t.Errorf("registered with the F flag, and the probe says %v", err)
			case want != "" && (!errors.As(err, &runner) || !strings.Contains(err.Error(), want) ||
				!strings.Contains(err.Error(), "/proc/sys/fs/binfmt_misc is not mounted here, as in a container")):
				t.Errorf("err = %v, want a RunnerError saying %q", err, want)
			}
		})
	}
}

const probeHelperEnv = "TOA_SANDBOX_PROBE_HELPER"

// The probe as a user (chrooted in a user namespace of its own) and, as a container's job runs
// it, under a seccomp filter that refuses namespaces: as root it chroots still; as a user it
// runs the probe in the runner's own root. Each finds the runner's arm64 emulator.
func TestProbeEmulatorAs(t *testing.T) {
	if arch := os.Getenv(probeHelperEnv); arch != "" {
		fmt.Printf("PROBE %v\n", probeEmulator("linux/"+arch, arch, "register it"))
		return
	}
	needRoot(t, "it runs the probe as another user")
	foreign := map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
	data, err := os.ReadFile("/proc/sys/fs/binfmt_misc/qemu-" + qemuNames[foreign])
	if err != nil || !strings.HasPrefix(string(data), "enabled") {
		t.Skipf("no emulator for %s is registered here", foreign)
	}
	for _, who := range []runAs{{uid: testUID}, {uid: 0, profile: containerseccomp.DenyNamespaces}, {uid: testUID, profile: containerseccomp.DenyNamespaces}} {
		t.Run(who.String(), func(t *testing.T) {
			argv := []string{"-test.run=^TestProbeEmulatorAs$", "-test.count=1"}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			var cmd *exec.Cmd
			if who.profile != "" {
				cmd = containerseccomp.Command(ctx, who.profile, "/proc/self/exe", argv...) // its environment set
			} else {
				cmd = exec.CommandContext(ctx, "/proc/self/exe", argv...)
				cmd.Env = os.Environ()
			}
			cmd.Env = append(cmd.Env, probeHelperEnv+"="+foreign)
			if who.uid != 0 {
				home := userDir(t, who.uid)
				cmd.Env = append(cmd.Env, "HOME="+home, "TMPDIR="+home)
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(who.uid), Gid: uint32(who.uid), Groups: []uint32{}}}
			}
			cmd.Dir = "/"
			out, err := cmd.CombinedOutput()
			if !strings.Contains(string(out), "PROBE <nil>") {
				t.Errorf("the probe of %s as %s: %v\n%s", foreign, who, err, out)
			}
		})
	}
}
