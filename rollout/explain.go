package rollout

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/toa-deploy/toa-deploy/rollout/status"
)

// maxEvents is how many of a pod's Events a report keeps, the latest.
const maxEvents = 10

// explainTime bounds the requests that explain a failure or a timeout: the wait's own deadline
// may have passed already.
const explainTime = 10 * time.Second

// reportPods reports on pods, with the Events the API server has for each; a pod whose Events
// cannot be read is reported without them.
func reportPods(ctx context.Context, cs kubernetes.Interface, pods []*corev1.Pod) []status.PodReport {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), explainTime)
	defer cancel()
	out := make([]status.PodReport, 0, len(pods))
	for _, p := range pods {
		r := status.PodReport{Name: p.Name, Phase: string(p.Status.Phase), Terminating: p.DeletionTimestamp != nil,
			Containers: status.ContainerReports(p), Events: []status.EventReport{}}
		if events, err := podEvents(ctx, cs, p); err == nil {
			r.Events = events
		}
		out = append(out, r)
	}
	return out
}

// podEvents are the latest Events of a pod, oldest first.
func podEvents(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod) ([]status.EventReport, error) {
	selector := fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.kind", "Pod"),
		fields.OneTermEqualSelector("involvedObject.name", p.Name)).String()
	list, err := cs.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		return nil, err
	}
	out := []status.EventReport{}
	for _, e := range list.Items {
		if e.InvolvedObject.Name != p.Name || (e.InvolvedObject.UID != "" && e.InvolvedObject.UID != p.UID) {
			continue
		}
		out = append(out, status.EventReportOf(e))
	}
	slices.SortStableFunc(out, func(a, b status.EventReport) int { return a.LastSeen.Compare(b.LastSeen) })
	if len(out) > maxEvents {
		out = out[len(out)-maxEvents:]
	}
	return out, nil
}
