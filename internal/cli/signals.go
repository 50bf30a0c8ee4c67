package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// stopGrace is how long a run stopped by a second interrupt or a SIGTERM has to return on its
// own (removing its temporary files) before the process ends regardless.
const stopGrace = 500 * time.Millisecond

// SignalContext is ctx cancelled by the first SIGINT or SIGTERM, so that the run stops where it
// can and cleans up. A second SIGINT, or a SIGTERM, also ends the process within stopGrace (exit
// 1) whatever the run is blocked on (a named pipe, a credential helper that never answers, a
// read the context does not reach): a user who presses Ctrl-C twice, or a CI runner that sends
// SIGTERM, means it. Tags are written last, so no tag is left on an unfinished image. stop
// releases the signals.
func SignalContext(ctx context.Context, command string) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		interrupts := 0
		for {
			select {
			case <-done:
				return
			case s := <-signals:
				cancel()
				if s == os.Interrupt {
					interrupts++
				}
				if s == syscall.SIGTERM || interrupts > 1 {
					name := "a second interrupt"
					if s == syscall.SIGTERM {
						name = "SIGTERM"
					}
					time.AfterFunc(stopGrace, func() {
						fmt.Fprintf(os.Stderr, "error: %s stopped by %s, with its work unfinished (no tag is written on an unfinished image)\n", command, name)
						os.Exit(ExitFailed)
					})
				}
			}
		}
	}()
	return ctx, func() {
		signal.Stop(signals)
		close(done)
		cancel()
	}
}
