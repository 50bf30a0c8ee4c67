// Command pause is the real node's sandbox image: the process that holds a
// pod's namespaces, as registry.k8s.io/pause does, built here because the
// tests pull nothing from outside. It waits for SIGTERM or SIGINT and exits 0.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
