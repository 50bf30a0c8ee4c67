package sandbox

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Where /proc/sys/fs/binfmt_misc is not mounted (a container's /proc: runc mounts a procfs of
// its own, without binfmt_misc in it), its entries cannot be read, yet the kernel still runs a
// foreign CPU's programs through them (the host's registrations hold in its containers). There
// the emulator is found by running a program of that CPU, made here: an ELF of one segment whose
// code is exit(0), a few bytes that need nothing of a root. It runs chrooted in an empty folder,
// so that an entry without the F flag, whose emulator the kernel looks up in the root of the
// program it starts, fails as it would in the base.

// probeCPU is what makes the probe of a CPU: its ELF class, byte order, machine, flags, and the
// code of exit(0).
type probeCPU struct {
	is64    bool
	order   binary.ByteOrder
	machine uint16
	flags   uint32
	code    []byte
}

// words is instructions of 32 bits in order.
func words(order binary.ByteOrder, ins ...uint32) []byte {
	b := make([]byte, 4*len(ins))
	for n, i := range ins {
		order.PutUint32(b[4*n:], i)
	}
	return b
}

// probeCPUs are the probes of the CPUs of qemuNames, by GOARCH.
var probeCPUs = map[string]probeCPU{
	// mov x0, #0; mov x8, #93 (exit); svc #0
	"arm64": {true, binary.LittleEndian, 183, 0, words(binary.LittleEndian, 0xd2800000, 0xd2800ba8, 0xd4000001)},
	// mov eax, 60 (exit); xor edi, edi; syscall
	"amd64": {true, binary.LittleEndian, 62, 0, []byte{0xb8, 60, 0, 0, 0, 0x31, 0xff, 0x0f, 0x05}},
	// mov r0, #0; mov r7, #1 (exit); svc #0 (EABI 5)
	"arm": {false, binary.LittleEndian, 40, 0x05000000, words(binary.LittleEndian, 0xe3a00000, 0xe3a07001, 0xef000000)},
	// mov eax, 1 (exit); xor ebx, ebx; int 0x80
	"386": {false, binary.LittleEndian, 3, 0, []byte{0xb8, 1, 0, 0, 0, 0x31, 0xdb, 0xcd, 0x80}},
	// li a0, 0; li a7, 93 (exit); ecall
	"riscv64": {true, binary.LittleEndian, 243, 0, words(binary.LittleEndian, 0x00000513, 0x05d00893, 0x00000073)},
	// li r0, 1 (exit); li r3, 0; sc (ELFv2)
	"ppc64le": {true, binary.LittleEndian, 21, 2, words(binary.LittleEndian, 0x38000001, 0x38600000, 0x44000002)},
	// lghi %r2, 0; svc 1 (exit)
	"s390x": {true, binary.BigEndian, 22, 0, []byte{0xa7, 0x29, 0, 0, 0x0a, 0x01}},
}

// probeAddress is where the probe's one segment is loaded: a multiple of every page size.
const probeAddress = 0x400000

// elf is the probe's file: the ELF header, one loadable segment of the whole file, the code.
func (p probeCPU) elf() []byte {
	var b bytes.Buffer
	o := p.order
	ehsize, phsize := 52, 32
	class := byte(1)
	if p.is64 {
		ehsize, phsize, class = 64, 56, 2
	}
	data := byte(1)
	if o == binary.BigEndian {
		data = 2
	}
	codeAt := uint64(ehsize + phsize)
	size := codeAt + uint64(len(p.code))
	addr := func(v uint64) { // a field of the class's width
		if p.is64 {
			_ = binary.Write(&b, o, v)
		} else {
			_ = binary.Write(&b, o, uint32(v))
		}
	}
	b.Write([]byte{0x7f, 'E', 'L', 'F', class, data, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	_ = binary.Write(&b, o, uint16(2)) // ET_EXEC
	_ = binary.Write(&b, o, p.machine)
	_ = binary.Write(&b, o, uint32(1)) // EV_CURRENT
	addr(probeAddress + codeAt)        // the entry
	addr(uint64(ehsize))               // the program headers
	addr(0)                            // no section headers
	_ = binary.Write(&b, o, p.flags)
	_ = binary.Write(&b, o, []uint16{uint16(ehsize), uint16(phsize), 1, 0, 0, 0})
	_ = binary.Write(&b, o, uint32(1)) // PT_LOAD
	if p.is64 {
		_ = binary.Write(&b, o, uint32(5)) // R+X
		_ = binary.Write(&b, o, []uint64{0, probeAddress, probeAddress, size, size, 0x10000})
	} else {
		_ = binary.Write(&b, o, []uint32{0, probeAddress, probeAddress, uint32(size), uint32(size), 5, 0x10000})
	}
	b.Write(p.code)
	return b.Bytes()
}

// binfmtMounted reports whether dir is a mounted binfmt_misc, whose entries can be read.
func binfmtMounted(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "status"))
	return err == nil
}

// probeEmulator says whether this runner runs programs of arch inside any root: it runs the
// probe of arch chrooted in an empty folder (as root, or as a user in a user namespace of its
// own). A runner that may not chroot runs it in its own root, which says an emulator is
// registered and not whether with the F flag.
func probeEmulator(platform, arch string, register string) error {
	cpu, ok := probeCPUs[arch]
	if !ok {
		return &RunnerError{Platform: platform, Message: fmt.Sprintf("/proc/sys/fs/binfmt_misc is not mounted here, as in a container, and toa-push has no program of %s to find its emulator with", arch),
			Hint: "build this platform on a runner of its CPU, or where binfmt_misc is mounted"}
	}
	dir, err := os.MkdirTemp("", "toa-binfmt-probe-")
	if err != nil {
		return fmt.Errorf("make a folder for the probe of %s's emulator: %w", arch, err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "probe"), cpu.elf(), 0o755); err != nil {
		return fmt.Errorf("write the probe of %s's emulator: %w", arch, err)
	}
	attr := &syscall.SysProcAttr{Chroot: dir, Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() != 0 {
		attr.Cloneflags = syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	err = runProbe("/probe", attr)
	if errors.Is(err, syscall.EPERM) || (attr.Cloneflags != 0 && (errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EACCES))) {
		// no user namespace to chroot in, or a root without CAP_SYS_CHROOT (which the chroot
		// way then names): the runner's own root
		err = runProbe(filepath.Join(dir, "probe"), &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL})
	}
	why := fmt.Sprintf("/proc/sys/fs/binfmt_misc is not mounted here, as in a container, and a program of %s made to find its emulator", arch)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ENOEXEC):
		return &RunnerError{Platform: platform, Message: fmt.Sprintf("no emulator for %s is registered with binfmt_misc: %s does not run (%v)", arch, why, err), Hint: register}
	case errors.Is(err, syscall.ENOENT):
		return &RunnerError{Platform: platform,
			Message: fmt.Sprintf("the emulator for %s is registered without the F flag, so it cannot run inside the base: %s does not run in an empty root, where its emulator is looked for (%v)", arch, why, err),
			Hint:    register}
	}
	return &RunnerError{Platform: platform, Message: fmt.Sprintf("%s failed (%v)", why, err), Hint: register}
}

// runProbe runs the probe at path (in the root attr gives) with nothing in its environment, and
// waits for it, at most 30 seconds (QEMU starts in a tenth of one).
func runProbe(path string, attr *syscall.SysProcAttr) error {
	p, err := os.StartProcess(path, []string{"probe"}, &os.ProcAttr{Env: []string{}, Sys: attr})
	if err != nil {
		return err
	}
	timer := time.AfterFunc(30*time.Second, func() { _ = p.Kill() })
	defer timer.Stop()
	state, err := p.Wait()
	if err != nil {
		return err
	}
	if !state.Success() {
		return fmt.Errorf("it ended with %s, not 0", state)
	}
	return nil
}
