package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// The API server's audit log (testdata/controlplane/audit-policy.yaml: one line per request of
// every client that is not the control plane itself) counts each tool's requests, as the server
// saw them: client-side retries included, the controllers' work left out.

// auditLog is the API server's audit log, $TOA_TEST_STATE/logs/audit.log, rotated at 100 MB into
// audit-<time>.log beside it.
type auditLog struct{ path string }

// auditMark is where the log ended when a command began.
type auditMark struct {
	ino    uint64
	offset int64
	at     time.Time
}

// auditEvent is what the counts read of an audit line.
type auditEvent struct {
	AuditID   string `json:"auditID"`
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	URI       string `json:"requestURI"`
	ObjectRef *struct {
		Resource  string `json:"resource"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"objectRef"`
	Status *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	Received time.Time `json:"requestReceivedTimestamp"`
}

func (l auditLog) mark() (auditMark, error) {
	info, err := os.Stat(l.path)
	if err != nil {
		return auditMark{}, err
	}
	return auditMark{ino: info.Sys().(*syscall.Stat_t).Ino, offset: info.Size(), at: time.Now()}, nil
}

// since are the requests logged after m whose user agent starts with agent, of namespace ns or
// of no namespace (discovery, cluster-scoped kinds), each once (a watch is logged when it starts
// and when it ends).
func (l auditLog) since(m auditMark, agent, ns string) ([]auditEvent, error) {
	// the server writes an event when the response completes: give the last ones a moment
	time.Sleep(time.Second)
	var files []string
	if info, err := os.Stat(l.path); err == nil && info.Sys().(*syscall.Stat_t).Ino != m.ino {
		// rotated since the mark: the rest of the old file is the newest audit-*.log
		old, _ := filepath.Glob(strings.TrimSuffix(l.path, ".log") + "-*.log")
		sort.Strings(old)
		if len(old) > 0 {
			files = append(files, old[len(old)-1])
		}
		files = append(files, l.path)
	} else {
		files = []string{l.path}
	}
	seen := map[string]bool{}
	var out []auditEvent
	for i, f := range files {
		offset := m.offset
		if i > 0 {
			offset = 0
		}
		if err := l.scan(f, offset, func(e auditEvent) {
			if seen[e.AuditID] || e.Received.Before(m.at.Add(-time.Second)) || !strings.HasPrefix(strings.ToLower(e.UserAgent), strings.ToLower(agent)) {
				return
			}
			if e.ObjectRef != nil && e.ObjectRef.Namespace != "" && e.ObjectRef.Namespace != ns {
				return
			}
			seen[e.AuditID] = true
			out = append(out, e)
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (l auditLog) scan(path string, offset int64, f func(auditEvent)) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	if _, err := file.Seek(offset, io.SeekStart); err != nil {
		return err
	}
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e auditEvent
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.AuditID != "" {
			f(e)
		}
	}
	return sc.Err()
}

// breakdown counts events by verb and resource, as "  120 × patch deployments", most first.
func breakdown(events []auditEvent) []string {
	counts := map[string]int{}
	for _, e := range events {
		what := e.URI
		if e.ObjectRef != nil && e.ObjectRef.Resource != "" {
			what = e.ObjectRef.Resource
			if e.ObjectRef.Name != "" {
				what += "/NAME"
			}
		} else if i := strings.IndexByte(what, '?'); i >= 0 {
			what = what[:i]
		}
		verb := e.Verb
		counts[fmt.Sprintf("%-6s %s", verb, what)]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if counts[keys[i]] != counts[keys[j]] {
			return counts[keys[i]] > counts[keys[j]]
		}
		return keys[i] < keys[j]
	})
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%6d × %s", counts[k], k))
	}
	return out
}
