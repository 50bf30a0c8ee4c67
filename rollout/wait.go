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
)

// Status is where one Deployment of the set stands while Wait waits.
type Status struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Done      bool     `json:"done"`
	Message   string   `json:"message"`
	Pruned    bool     `json:"pruned,omitempty"` // awaited until it is gone
	Failure   *Failure `json:"-"`
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

// Wait waits until every Deployment Apply applied has rolled out and every pod it replaced is
// gone, and every Deployment it pruned is gone with its pods. One watch loop, no polling:
// informers on the set's Deployments and, for each, on the ReplicaSets and pods its selector
// matches, feed Check at each change. A failure is returned as soon as it is certain, as a
// *Failure; the end of ctx's deadline is a *TimeoutError naming what was still awaited.
func Wait(ctx context.Context, cfg *rest.Config, res *Result, opts WaitOptions) error {
	if res == nil || res.DryRun {
		return nil
	}
	if opts.UnschedulableGrace == 0 {
		opts.UnschedulableGrace = DefaultUnschedulableGrace
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client for %s: %w", cfg.Host, err)
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
	if len(targets) == 0 {
		return nil
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kick := make(chan struct{}, 1)
	notify := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}
	var synced []cache.InformerSynced
	start := func(inf cache.SharedIndexInformer) (cache.Store, error) {
		reg, err := inf.AddEventHandler(handler)
		if err != nil {
			return nil, err
		}
		synced = append(synced, reg.HasSynced)
		go inf.RunWithContext(ctx)
		return inf.GetStore(), nil
	}

	// the set's Deployments, one informer per namespace
	deployments := map[string]cache.Store{}
	for _, t := range targets {
		if deployments[t.namespace] != nil {
			continue
		}
		inf := appsinformers.NewFilteredDeploymentInformer(cs, t.namespace, 0, cache.Indexers{},
			func(o *metav1.ListOptions) { o.LabelSelector = LabelPartOf + "=" + res.Set.ID })
		if deployments[t.namespace], err = start(inf); err != nil {
			return err
		}
	}
	// each applied Deployment's ReplicaSets and pods, by its selector
	for _, t := range targets {
		if t.pruned {
			continue
		}
		selector, err := selectorOf(res, t)
		if err != nil {
			return err
		}
		tweak := func(o *metav1.ListOptions) { o.LabelSelector = selector }
		if t.rss, err = start(appsinformers.NewFilteredReplicaSetInformer(cs, t.namespace, 0, cache.Indexers{}, tweak)); err != nil {
			return err
		}
		if t.pods, err = start(coreinformers.NewFilteredPodInformer(cs, t.namespace, 0, cache.Indexers{}, tweak)); err != nil {
			return err
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return waitEnd(ctx, targets)
	}

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		done, recheck := true, time.Time{}
		for _, t := range targets {
			s, at, err := t.check(deployments[t.namespace], now, opts.UnschedulableGrace)
			if err != nil {
				return err
			}
			if !t.reported || s.Done != t.last.Done || s.Message != t.last.Message {
				t.last, t.reported = s, true
				if opts.OnStatus != nil {
					opts.OnStatus(s)
				}
			}
			if s.Failure != nil {
				return s.Failure
			}
			done = done && s.Done
			if !at.IsZero() && (recheck.IsZero() || at.Before(recheck)) {
				recheck = at
			}
		}
		if done {
			return nil
		}
		if !recheck.IsZero() {
			timer.Reset(time.Until(recheck))
		}
		select {
		case <-ctx.Done():
			return waitEnd(ctx, targets)
		case <-kick:
		case <-timer.C:
		}
	}
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
	for _, a := range res.Applied {
		if a.Kind != "Deployment" || a.Namespace != t.namespace || a.Name != t.name || a.Object == nil {
			continue
		}
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(a.Object.Object, &d); err != nil {
			return "", fmt.Errorf("read deployment %s: %w", t.name, err)
		}
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil {
			return "", fmt.Errorf("deployment %s: selector: %w", t.name, err)
		}
		return sel.String(), nil
	}
	return "", fmt.Errorf("deployment %s: not among the applied objects", t.name)
}

// waitEnd is the error of a wait whose context ended: what was still awaited when the deadline
// passed, or the cancellation.
func waitEnd(ctx context.Context, targets []*target) error {
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) && !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		return ctx.Err()
	}
	e := &TimeoutError{}
	for _, t := range targets {
		if !t.last.Done {
			s := t.last
			if !t.reported {
				s = Status{Namespace: t.namespace, Name: t.name, Pruned: t.pruned, Message: "not seen yet"}
			}
			e.Awaiting = append(e.Awaiting, s)
		}
	}
	slices.SortFunc(e.Awaiting, func(a, b Status) int { return strings.Compare(a.Name, b.Name) })
	return e
}
