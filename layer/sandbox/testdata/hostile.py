# A command that looks for the runner in every way issue 36 found open, run in the sandbox by
# TestHostile: it prints what each attempt got ("ok: ..." or "denied: ERRNO") and what it found of
# the runner's secrets (named in secrets.json, bound beside it), as one JSON object.
import ctypes
import errno
import hashlib
import json
import os
import sys

here = os.path.dirname(os.path.abspath(sys.argv[0]))
secrets = json.load(open(os.path.join(here, "secrets.json")))
results, found = {}, []


def attempt(name, f):
    try:
        r = f()
        results[name] = "ok" + ("" if r is None else ": " + str(r)[:120])
    except OSError as e:
        results[name] = "denied: " + errno.errorcode.get(e.errno, str(e.errno))
    except Exception as e:  # noqa: BLE001 - anything but success is a refusal here
        results[name] = "denied: " + type(e).__name__


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def write(path, data):
    with open(path, "w") as f:
        f.write(data)


libc = ctypes.CDLL(None, use_errno=True)


def call(name, *args):
    if getattr(libc, name)(*args) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


# the runner's files, by their path and through the init
attempt("the runner's file", lambda: read(secrets["path"]))
attempt("/proc/1/root", lambda: os.listdir("/proc/1/root"))
attempt("/proc/1/root/<the runner's file>", lambda: read("/proc/1/root" + secrets["path"]))
attempt("/proc/1/cwd", lambda: os.listdir("/proc/1/cwd"))
attempt("/proc/1/environ", lambda: read("/proc/1/environ", "rb"))
attempt("/proc/1/fd links", lambda: [os.readlink("/proc/1/fd/" + f) for f in os.listdir("/proc/1/fd")])
attempt("/proc/1/fd open", lambda: [read("/proc/1/fd/" + f, "rb")[:1] for f in os.listdir("/proc/1/fd")])
attempt("/proc/1/map_files", lambda: os.listdir("/proc/1/map_files"))
attempt("ptrace the init", lambda: call("ptrace", 16, 1, None, None))  # PTRACE_ATTACH

# every process's command line and environment: the parents' secrets
for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:
    if not pid.isdigit():
        continue
    for what in ("cmdline", "environ"):
        try:
            data = read("/proc/%s/%s" % (pid, what), "rb")
        except OSError:
            continue
        for key in ("env", "arg", "content"):
            if secrets[key].encode() in data:
                found.append("/proc/%s/%s holds the %s secret" % (pid, what, key))

# the file system, for the runner's file by name
for top, dirs, files in os.walk("/"):
    if top == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
    if secrets["name"] in files or secrets["name"] in dirs:
        found.append("%s/%s" % (top, secrets["name"]))

# the kernel's knobs and the mounts
attempt("write /proc/sys/kernel/hostname", lambda: write("/proc/sys/kernel/hostname", "hostile"))
attempt("write /proc/sys/kernel/core_pattern", lambda: write("/proc/sys/kernel/core_pattern", "|/tmp/hostile"))
attempt("write /proc/sysrq-trigger", lambda: write("/proc/sysrq-trigger", "h"))
attempt("read /proc/kcore", lambda: len(read("/proc/kcore", "rb")[:16]))
attempt("read /proc/keys", lambda: len(read("/proc/keys")))
attempt("sethostname", lambda: call("sethostname", b"hostile", 7))
attempt("mount a tmpfs", lambda: call("mount", b"tmpfs", b"/tmp", b"tmpfs", 0, None))
attempt("remount /proc/sys read-write", lambda: call("mount", None, b"/proc/sys", None, 32 | 4096, None))  # MS_REMOUNT|MS_BIND
attempt("unmount /proc/sys", lambda: call("umount2", b"/proc/sys", 2))  # MNT_DETACH
attempt("a user namespace", lambda: call("unshare", 0x10000000))  # CLONE_NEWUSER
attempt("a mount namespace", lambda: call("unshare", 0x00020000))  # CLONE_NEWNS
attempt("write the read-only bind", lambda: write(os.path.join(here, "written"), "x"))
attempt("/etc/shadow", lambda: hashlib.sha256(read("/etc/shadow", "rb")).hexdigest())

# what the command holds: its descriptors (0, 1, 2 and the one that lists them), and how /proc's
# knobs are mounted (read-only or masked), where there is a /proc
facts = {}
try:
    facts["descriptors"] = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
    mounts = {}
    for line in read("/proc/self/mountinfo").splitlines():
        fields = line.split()
        mounts[fields[4]] = fields[5]  # mount point: its options
    facts["proc mounts"] = {p: mounts.get(p, "not mounted") for p in
                            ("/proc/sys", "/proc/bus", "/proc/irq", "/proc/fs", "/proc/keys", "/proc/timer_list", "/proc/interrupts")
                            if os.path.exists(p)}
except OSError as e:
    facts["no /proc"] = errno.errorcode.get(e.errno, str(e.errno))

# a file in the writable bind, whose owner on the runner the test reads
write("/toa-out/made", "by the hostile command\n")
print(json.dumps({"results": results, "found": found, "uid": os.getuid(), "facts": facts}))
