// Package rollout puts an application's objects on a cluster and waits until they have rolled
// out: server-side apply in DESIGN.md's order, a kubectl-compatible ApplySet inventory that
// prunes what the application no longer has, the adoption of objects a Helm release made, and one
// watch loop that ends when every workload of the apply (Deployments, StatefulSets, DaemonSets,
// Jobs, custom resources with the standard conditions) has rolled out and every pod it replaced
// is gone, or as soon as a failure is certain. Every entry point takes the run's one client
// (cluster.Client).
//
// Whether an object is done, and whether a pod has failed, are pure functions of objects in a
// package of their own (status, as kstatus is beside cli-utils' apply); the loop in wait.go only
// feeds them what the watches see, and explain.go adds the Events a report needs.
package rollout
