package extension

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// maxAnswer bounds one answer of the bridge program: the declarations of every package of an
// application are kilobytes; a runaway package is not read into memory whole.
const maxAnswer = 64 << 20

// bridge is the node process that runs the bridge program (node.js) for one Resolve: started on
// the first question, asked every question of the run in turn, ended by close.
type bridge struct {
	node, root string
	output     io.Writer // where what the packages print goes

	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	pipe   *os.File
	stderr *tail
	failed error
}

// exchange writes one request and reads its answer, starting node first if it is not running.
func (b *bridge) exchange(ctx context.Context, request []byte) ([]byte, error) {
	if b.failed != nil {
		return nil, b.failed
	}
	if b.cmd == nil {
		if err := b.start(ctx); err != nil {
			b.failed = err
			return nil, err
		}
	}
	if _, err := b.in.Write(append(request, '\n')); err != nil {
		return nil, b.fail(err)
	}
	line, err := b.readLine()
	if err != nil {
		return nil, b.fail(err)
	}
	return line, nil
}

func (b *bridge) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := b.out.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxAnswer {
			return nil, fmt.Errorf("an answer of more than %d MiB", maxAnswer>>20)
		}
		if err == nil {
			return bytes.TrimSuffix(line, []byte("\n")), nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

func (b *bridge) start(ctx context.Context) error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("ask the extensions what they deploy: %w", err)
	}
	cmd := exec.CommandContext(ctx, b.node, "-e", program)
	cmd.Dir = b.root
	b.stderr = &tail{max: 64 << 10}
	cmd.Stdout = b.output
	cmd.Stderr = io.MultiWriter(b.output, b.stderr)
	cmd.ExtraFiles = []*os.File{pw}
	in, err := cmd.StdinPipe()
	if err != nil {
		pr.Close()
		pw.Close()
		return fmt.Errorf("ask the extensions what they deploy: %w", err)
	}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		if errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("ask the extensions what they deploy: %s is not on PATH: toa-push runs node to read the application's extension packages", b.node)
		}
		return fmt.Errorf("ask the extensions what they deploy: %w", err)
	}
	pw.Close()
	b.cmd, b.in, b.pipe, b.out = cmd, in, pr, bufio.NewReaderSize(pr, 64<<10)
	return nil
}

// fail ends the process after a broken exchange, and says what node said.
func (b *bridge) fail(err error) error {
	b.in.Close()
	waitErr := b.cmd.Wait()
	b.pipe.Close()
	if waitErr == nil {
		waitErr = err
	}
	b.failed = fmt.Errorf("ask the extensions what they deploy: node failed (%v):\n%s", waitErr, indent(b.stderr.String()))
	return b.failed
}

// close ends the process: its standard input ends, and it exits.
func (b *bridge) close() {
	if b.cmd == nil || b.failed != nil {
		return
	}
	b.in.Close()
	b.cmd.Wait()
	b.pipe.Close()
	b.failed = errors.New("the bridge is closed")
}

// tail keeps the last max bytes written to it: node's last words, for a message.
type tail struct {
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tail) String() string { return string(t.buf) }

// exchanged is one request of a run and the answer it got. Masked is the request with the
// components' computed versions blanked; when the packages read no version while answering
// (VersionRead false), the answer holds for any version, so a code change (which changes only its
// component's version) replays it.
type exchanged struct {
	Request     []byte `json:"request"`
	Answer      []byte `json:"answer"`
	Masked      []byte `json:"masked"`
	VersionRead bool   `json:"versionRead"`
}

// versionUnread is how the bridge program ends an answer given without reading any component's
// version (it appends the flag last).
var versionUnread = []byte(`,"versionRead":false}`)

// conversation is what Resolve asks the packages, through a bridge, or from a conversation
// recorded by an earlier run (the cache) for as long as the questions are the same: a question
// the recording does not have, or has another answer to, goes to node from there on. The bridge
// program keeps nothing between requests but loaded modules, so a question may be its first.
type conversation struct {
	bridge *bridge
	// lookup finds an earlier run's conversation that began with the same (masked) request; nil
	// for none
	lookup func(first []byte) []exchanged
	// mask blanks the components' computed versions in a request
	mask     func(request []byte) []byte
	replay   []exchanged // an earlier run's, valid while this run asks the same
	recorded []exchanged // this run's
	live     bool        // whether node answered any of them
}

func (c *conversation) ask(ctx context.Context, request []byte) ([]byte, error) {
	i := len(c.recorded)
	masked := request
	if c.mask != nil {
		masked = c.mask(request)
	}
	if i == 0 && c.lookup != nil {
		c.replay = c.lookup(masked)
	}
	if !c.live && i < len(c.replay) && c.replay[i].answers(request, masked) {
		c.recorded = append(c.recorded, exchanged{request, c.replay[i].Answer, masked, c.replay[i].VersionRead})
		return c.replay[i].Answer, nil
	}
	c.live = true
	answer, err := c.bridge.exchange(ctx, request)
	if err != nil {
		return nil, err
	}
	read := !bytes.HasSuffix(answer, versionUnread)
	c.recorded = append(c.recorded, exchanged{request, answer, masked, read})
	return answer, nil
}

// answers is true when the recorded answer holds for the request: the same request, or one that
// differs only in versions the packages did not read.
func (e exchanged) answers(request, masked []byte) bool {
	return bytes.Equal(e.Request, request) || (!e.VersionRead && bytes.Equal(e.Masked, masked))
}

// versionMask blanks in a request the computed version of every component versions lists (a
// version declared in the manifest is left: changing it changes the manifest too).
func versionMask(versions func() []string) func([]byte) []byte {
	return func(request []byte) []byte {
		for _, v := range versions() {
			request = bytes.ReplaceAll(request, []byte(`"version":"`+v+`"`), []byte(`"version":"~"`))
		}
		return request
	}
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}
