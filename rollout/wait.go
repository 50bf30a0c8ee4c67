package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/toa-deploy/toa-deploy/fault"
)

// Status is where one Deployment of the set stands while Wait waits.
type Status struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Done      bool     `json:"done"`
	Message   string   `json:"message"`
	Pruned    bool     `json:"pruned,omitempty"` // awaited until it is gone
	Failure   *Failure `json:"-"`
	// Pods explain a Deployment still awaited when the time ran out: those not ready.
	Pods []PodReport `json:"pods,omitempty"`
}

// WaitOptions tune Wait.
type WaitOptions struct {
	// UnschedulableGrace is how long a pod may stay unschedulable before the rollout fails:
	// the scheduler retries, and a node may come. Default 30s.
	UnschedulableGrace time.Duration
	// OnStatus hears each change of a Deployment's status, and each Deployment's first.
	OnStatus func(Status)
}

// DefaultUnschedulableGrace is WaitOptions.UnschedulableGrace's default.
const DefaultUnschedulableGrace = 30 * time.Second

// target is a Deployment Wait waits for.
type target struct {
	namespace, name string
	pruned          bool // wait until it is gone
	seen            bool
	rss, pods       cache.Store
	last            Status
	reported        bool
}

// Awaiting is what a wait was still waiting for when its time ran out. Wait returns it inside a
// *fault.Timeout, so that the message says what was awaited and callers can read the list.
type Awaiting struct {
	Deployments []Status
}

func (a *Awaiting) Error() string {
	parts := make([]string, 0, len(a.Deployments))
	for _, s := range a.Deployments {
		parts = append(parts, fmt.Sprintf("deployment %s: %s", s.Name, s.Message))
	}
	return "timed out waiting for " + strings.Join(parts, "; ")
}

// Wait waits until every Deployment Apply applied has rolled out and every pod it replaced is
// gone, and every Deployment it pruned is gone with its pods. One watch loop, no polling:
// informers on the set's Deployments and, for each, on the ReplicaSets and pods its selector
// matches, feed Check at each change. A failure is returned as soon as it is certain, as a
// *Failure; the end of ctx's deadline is a *fault.Timeout around an *Awaiting.
func Wait(ctx context.Context, cfg *rest.Config, res *Result, opts WaitOptions) error {
	if len(targetsOf(res)) == 0 {
		return nil
	}
	c, err := newClient(cfg)
	if err != nil {
		return err
	}
	return waitFor(ctx, c, res, opts)
}

// targetsOf are the Deployments a result applied or pruned; none for a dry run.
func targetsOf(res *Result) []*target {
	if res == nil || res.DryRun {
		return nil
	}
	var targets []*target
	for _, a := range res.Applied {
		if a.Group == "apps" && a.Kind == "Deployment" {
			targets = append(targets, &target{namespace: a.Namespace, name: a.Name})
		}
	}
	for _, r := range res.Pruned {
		if r.Group == "apps" && r.Kind == "Deployment" {
			targets = append(targets, &target{namespace: r.Namespace, name: r.Name, pruned: true})
		}
	}
	return targets
}

func waitFor(ctx context.Context, c *client, res *Result, opts WaitOptions) error {
	if opts.UnschedulableGrace == 0 {
		opts.UnschedulableGrace = DefaultUnschedulableGrace
	}
	targets := targetsOf(res)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := watchTargets(ctx, c.cs, res, targets)
	if err != nil {
		return err
	}
	if !cache.WaitForCacheSync(ctx.Done(), w.synced...) {
		return waitEnd(ctx, targets)
	}
	err = w.loop(ctx, targets, opts)
	explain(ctx, c.cs, targets, err)
	return err
}

// explain adds to a failure the report of the failing pod, or of the Deployment's unready pods,
// and to a timeout the reports of each awaited Deployment's unready pods.
func explain(ctx context.Context, cs kubernetes.Interface, targets []*target, err error) {
	find := func(namespace, name string) *target {
		i := slices.IndexFunc(targets, func(t *target) bool { return t.namespace == namespace && t.name == name })
		if i < 0 || targets[i].pods == nil {
			return nil
		}
		return targets[i]
	}
	var f *Failure
	var a *Awaiting
	switch {
	case errors.As(err, &f):
		t := find(f.Namespace, f.Deployment)
		if t == nil {
			return
		}
		pods := items[*corev1.Pod](t.pods)
		if f.Pod != "" {
			pods = slices.DeleteFunc(pods, func(p *corev1.Pod) bool { return p.Name != f.Pod })
		} else {
			pods = unready(pods)
		}
		f.Pods = reportPods(ctx, cs, pods)
	case errors.As(err, &a):
		for i, s := range a.Deployments {
			if t := find(s.Namespace, s.Name); t != nil {
				a.Deployments[i].Pods = reportPods(ctx, cs, unready(items[*corev1.Pod](t.pods)))
			}
		}
	}
}

// watches are the informers of a wait: their stores, and a signal that any of them changed.
type watches struct {
	deployments map[string]cache.Store // by namespace
	kick        chan struct{}
	synced      []cache.InformerSynced
}

// watchTargets starts the informers of a wait, which run until ctx ends: the set's Deployments,
// one informer per namespace, and each applied Deployment's ReplicaSets and pods by its selector.
func watchTargets(ctx context.Context, cs kubernetes.Interface, res *Result, targets []*target) (*watches, error) {
	w := &watches{deployments: map[string]cache.Store{}, kick: make(chan struct{}, 1)}
	for _, t := range targets {
		if w.deployments[t.namespace] != nil {
			continue
		}
		inf := appsinformers.NewFilteredDeploymentInformer(cs, t.namespace, 0, cache.Indexers{},
			func(o *metav1.ListOptions) { o.LabelSelector = LabelPartOf + "=" + res.Set.ID })
		store, err := w.start(ctx, inf)
		if err != nil {
			return nil, err
		}
		w.deployments[t.namespace] = store
	}
	for _, t := range targets {
		if t.pruned {
			continue
		}
		selector, err := selectorOf(res, t)
		if err != nil {
			return nil, err
		}
		tweak := func(o *metav1.ListOptions) { o.LabelSelector = selector }
		if t.rss, err = w.start(ctx, appsinformers.NewFilteredReplicaSetInformer(cs, t.namespace, 0, cache.Indexers{}, tweak)); err != nil {
			return nil, err
		}
		if t.pods, err = w.start(ctx, coreinformers.NewFilteredPodInformer(cs, t.namespace, 0, cache.Indexers{}, tweak)); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// start runs an informer whose every event kicks the loop, and returns its store.
func (w *watches) start(ctx context.Context, inf cache.SharedIndexInformer) (cache.Store, error) {
	notify := func() {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	})
	if err != nil {
		return nil, err
	}
	w.synced = append(w.synced, reg.HasSynced)
	go inf.RunWithContext(ctx)
	return inf.GetStore(), nil
}

// loop checks every target at each change the informers see, and when an unschedulable pod's
// grace ends, until all are done, one fails, or ctx ends.
func (w *watches) loop(ctx context.Context, targets []*target, opts WaitOptions) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		done, recheck, err := w.checkAll(targets, time.Now(), opts)
		if err != nil || done {
			return err
		}
		if !recheck.IsZero() {
			timer.Reset(time.Until(recheck))
		}
		select {
		case <-ctx.Done():
			return waitEnd(ctx, targets)
		case <-w.kick:
		case <-timer.C:
		}
	}
}

// checkAll checks every target, reporting each change of status: all done, the earliest time to
// look again although nothing changes, or the first failure.
func (w *watches) checkAll(targets []*target, now time.Time, opts WaitOptions) (done bool, recheck time.Time, err error) {
	done = true
	for _, t := range targets {
		s, at, err := t.check(w.deployments[t.namespace], now, opts.UnschedulableGrace)
		if err != nil {
			return false, time.Time{}, err
		}
		if !t.reported || s.Done != t.last.Done || s.Message != t.last.Message {
			t.last, t.reported = s, true
			if opts.OnStatus != nil {
				opts.OnStatus(s)
			}
		}
		if s.Failure != nil {
			return false, time.Time{}, s.Failure
		}
		done = done && s.Done
		if !at.IsZero() && (recheck.IsZero() || at.Before(recheck)) {
			recheck = at
		}
	}
	return done, recheck, nil
}

// check is where a target stands in the informers' stores.
func (t *target) check(deployments cache.Store, now time.Time, grace time.Duration) (Status, time.Time, error) {
	s := Status{Namespace: t.namespace, Name: t.name, Pruned: t.pruned}
	obj, exists, err := deployments.GetByKey(t.namespace + "/" + t.name)
	if err != nil {
		return s, time.Time{}, err
	}
	if !exists {
		switch {
		case t.pruned:
			s.Done, s.Message = true, "pruned, gone with its pods"
		case t.seen:
			return s, time.Time{}, fmt.Errorf("deployment %s was deleted while its rollout was awaited", t.name)
		default:
			s.Message = "not seen yet"
		}
		return s, time.Time{}, nil
	}
	t.seen = true
	if t.pruned {
		s.Message = "pruned, waiting for it and its pods to go"
		return s, time.Time{}, nil
	}
	st := Check(obj.(*appsv1.Deployment), items[*appsv1.ReplicaSet](t.rss), items[*corev1.Pod](t.pods), now, grace)
	s.Done, s.Message, s.Failure = st.Done, st.Message, st.Failure
	if st.Failure != nil {
		s.Message = strings.TrimPrefix(st.Failure.Error(), "deployment "+t.name+": ")
	}
	return s, st.Recheck, nil
}

func items[T runtime.Object](store cache.Store) []T {
	var out []T
	for _, obj := range store.List() {
		if o, ok := obj.(T); ok {
			out = append(out, o)
		}
	}
	return out
}

// selectorOf is the pod selector of an applied Deployment, from the object the apply returned.
func selectorOf(res *Result, t *target) (string, error) {
	i := slices.IndexFunc(res.Applied, func(a Applied) bool {
		return a.Kind == "Deployment" && a.Namespace == t.namespace && a.Name == t.name && a.Object != nil
	})
	if i < 0 {
		return "", fmt.Errorf("deployment %s: not among the applied objects", t.name)
	}
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(res.Applied[i].Object.Object, &d); err != nil {
		return "", fmt.Errorf("read deployment %s: %w", t.name, err)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return "", fmt.Errorf("deployment %s: selector: %w", t.name, err)
	}
	return sel.String(), nil
}

// waitEnd is the error of a wait whose context ended: what was still awaited when the deadline
// passed, as a *fault.Timeout, or the cancellation.
func waitEnd(ctx context.Context, targets []*target) error {
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) && !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		return ctx.Err()
	}
	a := &Awaiting{}
	for _, t := range targets {
		if !t.last.Done {
			s := t.last
			if !t.reported {
				s = Status{Namespace: t.namespace, Name: t.name, Pruned: t.pruned, Message: "not seen yet"}
			}
			a.Deployments = append(a.Deployments, s)
		}
	}
	slices.SortFunc(a.Deployments, func(x, y Status) int { return strings.Compare(x.Name, y.Name) })
	return fault.TimedOut(a)
}
