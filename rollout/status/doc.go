// Package status is the verdict on a workload's rollout from the objects alone, as kubectl
// rollout status and kstatus give it: whether a Deployment, StatefulSet, DaemonSet, Job or
// custom resource is done, what is awaited, and when a failure is certain (a pod that will not
// start without a change, a progress deadline passed, a Stalled condition); and the reports on
// pods that explain a failure or a timeout. Pure functions of objects and a time, no client:
// rollout's watch loop feeds them what its informers see, and tests feed them objects.
package status
