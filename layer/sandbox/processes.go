package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// maxLeftovers bounds the leftovers a report names.
const maxLeftovers = 32

// processes are a sandbox's processes, as its init sees them: every process of its PID
// namespace but itself, or, the chroot way, every descendant of the init (its subreaper): not
// every process of the sandbox's id, which another run at once may share.
type processes struct {
	chroot   bool
	init     int // the init's pid, as /proc says it
	uid      int // the command's id, as /proc says it, whose tasks RLIMIT_NPROC counts
	interval time.Duration
}

func (s *spec) processes() *processes {
	if s.Mode == modeChroot {
		return &processes{chroot: true, init: os.Getpid(), uid: s.Stage.UID, interval: 250 * time.Millisecond}
	}
	return &processes{init: 1, uid: 0, interval: 100 * time.Millisecond}
}

// stat is what /proc/PID/stat says of a process.
type stat struct {
	pid, ppid, threads int
	state              byte
}

func readStat(pid int) (stat, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return stat{}, false
	}
	// the command's name is between the first ( and the last ), and may hold anything
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return stat{}, false
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 18 || len(f[0]) != 1 {
		return stat{}, false
	}
	ppid, err := strconv.Atoi(f[1])
	threads, err2 := strconv.Atoi(f[17])
	if err != nil || err2 != nil {
		return stat{}, false
	}
	return stat{pid: pid, ppid: ppid, threads: threads, state: f[0][0]}, true
}

// all is every process /proc lists but the init.
func (p *processes) all() []stat {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []stat
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == p.init {
			continue
		}
		if st, ok := readStat(pid); ok {
			out = append(out, st)
		}
	}
	return out
}

// mine is the sandbox's processes: all of its PID namespace, or the init's descendants.
func (p *processes) mine() []stat {
	all := p.all()
	if !p.chroot {
		return all
	}
	children := map[int][]stat{}
	for _, st := range all {
		children[st.ppid] = append(children[st.ppid], st)
	}
	var out []stat
	queue := []int{p.init}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// names are the sandbox's live processes, by pid and command line.
func (p *processes) names() []string {
	var out []string
	mine := p.mine()
	for _, st := range mine {
		if st.state == 'Z' {
			continue
		}
		if len(out) == maxLeftovers {
			out = append(out, fmt.Sprintf("and %d more", len(mine)-maxLeftovers))
			break
		}
		out = append(out, fmt.Sprintf("pid %d: %s", st.pid, commandLine(st.pid)))
	}
	return out
}

// commandLine is a process's argv, or its name in brackets where it has none.
func commandLine(pid int) string {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	line := strings.TrimSpace(strings.ReplaceAll(string(bytes.TrimRight(data, "\x00")), "\x00", " "))
	if line == "" {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		line = "[" + strings.TrimSpace(string(comm)) + "]"
	}
	if len(line) > 200 {
		line = line[:200] + "…"
	}
	return line
}

// killAll kills the sandbox's processes: the PID namespace's at once (kill -1 from its init),
// or each descendant of the init through a pidfd, so that a pid reused meanwhile is not hit.
func (p *processes) killAll() {
	if !p.chroot {
		_ = unix.Kill(-1, unix.SIGKILL)
		return
	}
	mine := p.mine()
	known := map[int]bool{p.init: true}
	for _, st := range mine {
		known[st.pid] = true
	}
	for _, st := range mine {
		fd, err := unix.PidfdOpen(st.pid, 0)
		if err != nil {
			continue
		}
		// the pid is the process the pidfd holds while it lives: still the init's descendant?
		if now, ok := readStat(st.pid); ok && known[now.ppid] {
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		}
		unix.Close(fd)
	}
}

// count is the tasks (processes and threads) RLIMIT_NPROC counts against the command: those of
// its id, the namespace's root (the init of a root runner is another's) or the chroot way's id.
func (p *processes) count() int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		uid, threads, ok := uidThreads(e.Name())
		if ok && uid == p.uid {
			n += threads
		}
	}
	return n
}

// uidThreads reads a process's real uid and its threads from /proc/PID/status.
func uidThreads(pid string) (uid, threads int, ok bool) {
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, 0, false
	}
	found := 0
	for _, line := range strings.Split(string(data), "\n") {
		if v, has := strings.CutPrefix(line, "Uid:"); has {
			if f := strings.Fields(v); len(f) > 0 {
				uid, _ = strconv.Atoi(f[0])
				found++
			}
		} else if v, has := strings.CutPrefix(line, "Threads:"); has {
			threads, _ = strconv.Atoi(strings.TrimSpace(v))
			found++
		}
	}
	return uid, threads, found == 2
}
