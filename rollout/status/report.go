package status

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// PodReport is what a pod says about why it is not ready: each container's state and last
// state, and the pod's recent Events, as `kubectl describe pod` shows them.
type PodReport struct {
	Name        string            `json:"name"`
	Phase       string            `json:"phase"`
	Terminating bool              `json:"terminating,omitempty"`
	Containers  []ContainerReport `json:"containers"`
	Events      []EventReport     `json:"events"`
}

// ContainerReport is one container's state, and how it last ended when it has run before.
type ContainerReport struct {
	Name      string      `json:"name"`
	Ready     bool        `json:"ready"`
	Restarts  int32       `json:"restarts"`
	State     string      `json:"state"` // waiting, running or terminated
	Reason    string      `json:"reason,omitempty"`
	Message   string      `json:"message,omitempty"`
	LastState *Terminated `json:"lastState,omitempty"`
}

// Terminated is how a container ended.
type Terminated struct {
	ExitCode   int32     `json:"exitCode"`
	Reason     string    `json:"reason,omitempty"`
	Message    string    `json:"message,omitempty"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
}

// EventReport is one of a pod's Events.
type EventReport struct {
	Type     string    `json:"type"`
	Reason   string    `json:"reason"`
	Message  string    `json:"message"`
	Count    int32     `json:"count"`
	LastSeen time.Time `json:"lastSeen"`
}

// maxPods is how many pods of a workload a timeout explains.
const maxPods = 3

// ContainerReports are the states of a pod's containers, init containers first.
func ContainerReports(p *corev1.Pod) []ContainerReport {
	var out []ContainerReport
	for _, c := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		r := ContainerReport{Name: c.Name, Ready: c.Ready, Restarts: c.RestartCount}
		switch s := c.State; {
		case s.Waiting != nil:
			r.State, r.Reason, r.Message = "waiting", s.Waiting.Reason, s.Waiting.Message
		case s.Running != nil:
			r.State = "running"
		case s.Terminated != nil:
			r.State, r.Reason, r.Message = "terminated", s.Terminated.Reason, s.Terminated.Message
		}
		if t := c.LastTerminationState.Terminated; t != nil {
			r.LastState = &Terminated{ExitCode: t.ExitCode, Reason: t.Reason, Message: strings.TrimSpace(t.Message),
				FinishedAt: t.FinishedAt.Time}
		}
		out = append(out, r)
	}
	return out
}

// EventReportOf is what an Event says of a pod, as kubectl describe shows it.
func EventReportOf(e corev1.Event) EventReport {
	return EventReport{Type: e.Type, Reason: e.Reason, Message: strings.TrimSpace(e.Message), Count: eventCount(e), LastSeen: lastSeen(e)}
}

func eventCount(e corev1.Event) int32 {
	switch {
	case e.Series != nil:
		return e.Series.Count
	case e.Count > 0:
		return e.Count
	}
	return 1
}

func lastSeen(e corev1.Event) time.Time {
	switch {
	case e.Series != nil:
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// Unready are the pods of a workload that hold its rollout up: not Ready, or terminating; the
// first few by name, which a timeout explains.
func Unready(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range sortedPods(pods) {
		if p.DeletionTimestamp != nil || !podReady(p) {
			out = append(out, p)
		}
	}
	return out[:min(len(out), maxPods)]
}

func podReady(p *corev1.Pod) bool {
	i := slices.IndexFunc(p.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodReady })
	return i >= 0 && p.Status.Conditions[i].Status == corev1.ConditionTrue
}

// WritePods writes pod reports as text, indented, as a user reads them under an error.
func WritePods(b *strings.Builder, pods []PodReport, now time.Time) {
	for _, p := range pods {
		state := p.Phase
		if p.Terminating {
			state += ", terminating"
		}
		fmt.Fprintf(b, "  pod %s (%s)\n", p.Name, state)
		for _, c := range p.Containers {
			fmt.Fprintf(b, "    container %s: %s", c.Name, c.State)
			if c.Reason != "" {
				fmt.Fprintf(b, " (%s)", c.Reason)
			}
			fmt.Fprintf(b, ", ready %v, %s", c.Ready, count(int(c.Restarts), "restart"))
			if c.Message != "" {
				fmt.Fprintf(b, ": %s", oneLine(c.Message))
			}
			b.WriteByte('\n')
			if t := c.LastState; t != nil {
				fmt.Fprintf(b, "      last state: terminated, exit code %d", t.ExitCode)
				if t.Reason != "" {
					fmt.Fprintf(b, " (%s)", t.Reason)
				}
				if !t.FinishedAt.IsZero() {
					fmt.Fprintf(b, ", %s ago", age(now.Sub(t.FinishedAt)))
				}
				if t.Message != "" {
					fmt.Fprintf(b, ": %s", oneLine(t.Message))
				}
				b.WriteByte('\n')
			}
		}
		if len(p.Events) == 0 {
			b.WriteString("    no events\n")
			continue
		}
		b.WriteString("    events (last seen, type, reason, count, message):\n")
		for _, e := range p.Events {
			fmt.Fprintf(b, "      %5s ago  %-7s  %s  x%d  %s\n", age(now.Sub(e.LastSeen)), e.Type, e.Reason, e.Count, oneLine(e.Message))
		}
	}
}

// age is a duration as kubectl prints ages: 5s, 3m, 2h.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	}
	return fmt.Sprintf("%dh", int(d.Hours()))
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
