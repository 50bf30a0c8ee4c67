package rollout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	batchinformers "k8s.io/client-go/informers/batch/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"

	"k8s.io/client-go/tools/cache"

	kube "github.com/toa-deploy/toa-deploy/internal/cluster"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/rollout/status"
)

// The kinds of workloads whose informers the wait starts (status.Workload says which kinds are
// workloads; these are Kubernetes' names of them).
var (
	deploymentKind  = appsv1.SchemeGroupVersion.WithKind("Deployment").GroupKind()
	statefulSetKind = appsv1.SchemeGroupVersion.WithKind("StatefulSet").GroupKind()
	daemonSetKind   = appsv1.SchemeGroupVersion.WithKind("DaemonSet").GroupKind()
	jobKind         = batchv1.SchemeGroupVersion.WithKind("Job").GroupKind()
)

// Status is where one awaited object of the set (a Deployment, StatefulSet, DaemonSet, Job or
// custom resource) stands while Wait waits.
type Status struct {
	Group     string          `json:"group,omitempty"`
	Kind      string          `json:"kind"`
	Namespace string          `json:"namespace"`
	Name      string          `json:"name"`
	Done      bool            `json:"done"`
	Message   string          `json:"message"`
	Pruned    bool            `json:"pruned,omitempty"` // awaited until it is gone
	Failure   *status.Failure `json:"-"`
	// Pods explain a workload still awaited when the time ran out: those not ready.
	Pods []status.PodReport `json:"pods,omitempty"`
}

// Object names the object as kubectl does, by kind and name: deployment/composition-a, or for
// a custom resource widget.example.com/w. A Status without a kind is a Deployment's.
func (s Status) Object() string {
	kind := strings.ToLower(cmp.Or(s.Kind, deploymentKind.Kind))
	if status.Custom(schema.GroupKind{Group: s.Group, Kind: s.Kind}) {
		kind += "." + s.Group
	}
	return kind + "/" + s.Name
}

// words names the object in a sentence: "deployment composition-a".
func (s Status) words() string {
	return strings.ToLower(cmp.Or(s.Kind, deploymentKind.Kind)) + " " + s.Name
}

// WaitOptions tune Wait.
type WaitOptions struct {
	// UnschedulableGrace is how long a pod may stay unschedulable before the rollout fails:
	// the scheduler retries, and a node may come. Default 30s.
	UnschedulableGrace time.Duration
	// OnStatus hears each change of an awaited object's status, and each one's first.
	OnStatus func(Status)
}

// defaultUnschedulableGrace is WaitOptions.UnschedulableGrace's default.
const defaultUnschedulableGrace = 30 * time.Second

// target is an object Wait waits for.
type target struct {
	ref      Ref
	pruned   bool // wait until it is gone
	seen     bool
	objects  cache.Store     // the informer of its kind in its namespace
	selector labels.Selector // a workload's pods (and a Deployment's ReplicaSets); nil for others
	inNS     *inNamespace    // the pods and ReplicaSets of its namespace
	last     Status
	reported bool
	recheck  time.Time // when to check again although nothing changes
	order    int       // its place among the wait's targets, the order statuses are told in
}

// inNamespace are the stores of a namespace's pods and ReplicaSets, each watched once.
type inNamespace struct {
	pods, rss cache.Indexer
}

// pods are the pods its selector matches, for a workload.
func (t *target) pods() []*corev1.Pod {
	if t.inNS == nil {
		return nil
	}
	return selected[*corev1.Pod](t.inNS.pods, t.selector)
}

// replicaSets are the ReplicaSets its selector matches, for a Deployment.
func (t *target) replicaSets() []*appsv1.ReplicaSet {
	if t.inNS == nil {
		return nil
	}
	return selected[*appsv1.ReplicaSet](t.inNS.rss, t.selector)
}

func (t *target) status() Status {
	return Status{Group: t.ref.Group, Kind: t.ref.Kind, Namespace: t.ref.Namespace, Name: t.ref.Name, Pruned: t.pruned}
}

// Awaiting is what a wait was still waiting for when its time ran out. Wait returns it inside a
// *fault.Timeout, so that the message says what was awaited and callers can read the list.
type Awaiting struct {
	Objects []Status
}

func (a *Awaiting) Error() string {
	parts := make([]string, 0, len(a.Objects))
	for _, s := range a.Objects {
		parts = append(parts, fmt.Sprintf("%s: %s", s.words(), s.Message))
	}
	return "timed out waiting for " + strings.Join(parts, "; ")
}

// Wait waits until every object Apply applied that has a rollout has finished it, and every
// workload it pruned is gone with its pods. A Deployment, StatefulSet or DaemonSet is done when
// its controller has rolled it out and no pod it replaced is left terminating; a Job when it is
// Complete; a custom resource when its Ready condition is True (one without conditions is not
// awaited). One watch loop, no polling: informers on the set's objects of each awaited kind and,
// for each workload, on the pods (and a Deployment's ReplicaSets) its selector matches, feed the
// verdicts at each change. A failure is returned as soon as it is certain, as a *Failure; the end
// of ctx's deadline is a *fault.Timeout around an *Awaiting.
// k is the run's one client (cluster.New), the same that applied.
func Wait(ctx context.Context, k *kube.Client, res *Result, opts WaitOptions) error {
	if len(targetsOf(res)) == 0 {
		return nil
	}
	return waitFor(ctx, clientOf(k), res, opts)
}

// Awaits is how many objects Wait would await after this result: those with a rollout, and the
// workloads it pruned.
func (res *Result) Awaits() int { return len(targetsOf(res)) }

// targetsOf are the objects a result applied whose kind has a rollout, and the workloads it
// pruned; none for a dry run.
func targetsOf(res *Result) []*target {
	if res == nil || res.DryRun {
		return nil
	}
	var targets []*target
	for _, a := range res.Applied {
		if status.Awaited(a.GroupKind()) {
			targets = append(targets, &target{ref: a.Ref, order: len(targets)})
		}
	}
	for _, r := range res.Pruned {
		if status.Workload(r.GroupKind()) {
			targets = append(targets, &target{ref: r, pruned: true, order: len(targets)})
		}
	}
	return targets
}

func waitFor(ctx context.Context, c *client, res *Result, opts WaitOptions) error {
	if opts.UnschedulableGrace == 0 {
		opts.UnschedulableGrace = defaultUnschedulableGrace
	}
	targets := targetsOf(res)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := watchTargets(ctx, c, res, targets)
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

// explain adds to a failure the report of the failing pod, or of the workload's unready pods,
// and to a timeout the reports of each awaited workload's unready pods.
func explain(ctx context.Context, cs kubernetes.Interface, targets []*target, err error) {
	find := func(kind, namespace, name string) *target {
		i := slices.IndexFunc(targets, func(t *target) bool {
			return t.ref.Kind == kind && t.ref.Namespace == namespace && t.ref.Name == name
		})
		if i < 0 || targets[i].selector == nil {
			return nil
		}
		return targets[i]
	}
	var f *status.Failure
	var a *Awaiting
	switch {
	case errors.As(err, &f):
		t := find(f.Kind, f.Namespace, f.Name)
		if t == nil {
			return
		}
		pods := t.pods()
		if f.Pod != "" {
			pods = slices.DeleteFunc(pods, func(p *corev1.Pod) bool { return p.Name != f.Pod })
		} else {
			pods = status.Unready(pods)
		}
		f.Pods = reportPods(ctx, cs, pods)
	case errors.As(err, &a):
		for i, s := range a.Objects {
			if t := find(s.Kind, s.Namespace, s.Name); t != nil {
				a.Objects[i].Pods = reportPods(ctx, cs, status.Unready(t.pods()))
			}
		}
	}
}

// watches are the informers of a wait: their stores, and which targets their events since the
// last check may have changed. The loop checks those alone: at a thousand Deployments, checking
// every target at each of the rollout's tens of thousands of events kept a processor busy that
// the API server and the controllers needed.
type watches struct {
	objects map[string]cache.Store // by group, kind and namespace
	kick    chan struct{}
	synced  []cache.InformerSynced

	mu        sync.Mutex
	dirty     map[*target]bool
	byName    map[string][]*target // group/kind/namespace/name: the target that object is
	byPair    map[string][]*target // namespace and label pair: the workloads whose selector requires it
	unindexed map[string][]*target // namespace: the workloads whose selector has no such pair
}

// marked is what a change of obj may have changed: the target it is, by the key of its
// informer (group/kind/namespace), or the workloads whose selector matches it (a pod, a
// ReplicaSet) where key is empty.
func (w *watches) marked(key string, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if key != "" {
		for _, t := range w.byName[key+"/"+m.GetName()] {
			w.dirty[t] = true
		}
		return
	}
	set := labels.Set(m.GetLabels())
	mark := func(t *target) {
		if t.selector.Matches(set) {
			w.dirty[t] = true
		}
	}
	for k, v := range set {
		for _, t := range w.byPair[m.GetNamespace()+"/"+k+"="+v] {
			mark(t)
		}
	}
	for _, t := range w.unindexed[m.GetNamespace()] {
		mark(t)
	}
}

// takeDirty is the set of targets marked since it was last taken.
func (w *watches) takeDirty() map[*target]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	dirty := w.dirty
	w.dirty = map[*target]bool{}
	return dirty
}

// watchTargets starts the informers of a wait, which run until ctx ends: the set's objects of
// each awaited kind, one informer per kind and namespace, and where workloads are awaited the
// namespace's pods (and, for Deployments, its ReplicaSets), one informer each per namespace,
// in which each workload finds its own by its selector.
func watchTargets(ctx context.Context, c *client, res *Result, targets []*target) (*watches, error) {
	w := &watches{objects: map[string]cache.Store{}, kick: make(chan struct{}, 1),
		dirty: map[*target]bool{}, byName: map[string][]*target{}, byPair: map[string][]*target{}, unindexed: map[string][]*target{}}
	partOf := LabelPartOf + "=" + res.Set.ID
	for _, t := range targets {
		key := t.ref.Group + "/" + t.ref.Kind + "/" + t.ref.Namespace
		w.byKey(key, t)
		if w.objects[key] == nil {
			inf, err := objectInformer(c, t.ref, partOf)
			if err != nil {
				return nil, err
			}
			if w.objects[key], err = w.start(ctx, inf, key); err != nil {
				return nil, err
			}
		}
		t.objects = w.objects[key]
	}
	applied := make(map[string]*unstructured.Unstructured, len(res.Applied))
	for _, a := range res.Applied {
		if a.Object != nil {
			applied[a.key()] = a.Object
		}
	}
	namespaces := map[string]*inNamespace{}
	for _, t := range targets {
		if t.pruned || !status.Workload(t.ref.GroupKind()) {
			continue
		}
		var err error
		if t.selector, err = selectorOf(applied, t); err != nil {
			return nil, err
		}
		w.bySelector(t)
		ns := namespaces[t.ref.Namespace]
		if ns == nil {
			ns = &inNamespace{}
			namespaces[t.ref.Namespace] = ns
			inf := coreinformers.NewFilteredPodInformer(c.cs, t.ref.Namespace, 0, labelIndexers, nil)
			if ns.pods, err = w.startIndexed(ctx, inf); err != nil {
				return nil, err
			}
		}
		if t.ref.GroupKind() == deploymentKind && ns.rss == nil {
			inf := appsinformers.NewFilteredReplicaSetInformer(c.cs, t.ref.Namespace, 0, labelIndexers, nil)
			if ns.rss, err = w.startIndexed(ctx, inf); err != nil {
				return nil, err
			}
		}
		t.inNS = ns
	}
	return w, nil
}

// byKey files a target under its informer's key and its name, so that its object's change finds
// it. The informers started before it already deliver events: the maps are the lock's.
func (w *watches) byKey(key string, t *target) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.byName[key+"/"+t.ref.Name] = append(w.byName[key+"/"+t.ref.Name], t)
}

// bySelector files a workload under the label pair its selector requires, so that a pod's or
// ReplicaSet's change finds it.
func (w *watches) bySelector(t *target) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ns := t.ref.Namespace
	if pair, ok := indexedPair(t.selector); ok {
		w.byPair[ns+"/"+pair] = append(w.byPair[ns+"/"+pair], t)
		return
	}
	w.unindexed[ns] = append(w.unindexed[ns], t)
}

// objectInformer is the informer of the set's objects of ref's kind in its namespace: typed for
// the workloads, dynamic for custom resources.
func objectInformer(c *client, ref Ref, labelSelector string) (cache.SharedIndexInformer, error) {
	tweak := func(o *metav1.ListOptions) { o.LabelSelector = labelSelector }
	ns := ref.Namespace
	switch ref.GroupKind() {
	case deploymentKind:
		return appsinformers.NewFilteredDeploymentInformer(c.cs, ns, 0, cache.Indexers{}, tweak), nil
	case statefulSetKind:
		return appsinformers.NewFilteredStatefulSetInformer(c.cs, ns, 0, cache.Indexers{}, tweak), nil
	case daemonSetKind:
		return appsinformers.NewFilteredDaemonSetInformer(c.cs, ns, 0, cache.Indexers{}, tweak), nil
	case jobKind:
		return batchinformers.NewFilteredJobInformer(c.cs, ns, 0, cache.Indexers{}, tweak), nil
	}
	m, err := c.mapping(ref.GroupKind().WithVersion(ref.Version))
	if err != nil {
		return nil, err
	}
	lw := listWatch(c.dyn, c.resource(m, ns), "", labelSelector)
	return cache.NewSharedIndexInformer(lw, &unstructured.Unstructured{}, 0, cache.Indexers{}), nil
}

// startIndexed is start, for a store read through its indexes.
func (w *watches) startIndexed(ctx context.Context, inf cache.SharedIndexInformer) (cache.Indexer, error) {
	if _, err := w.start(ctx, inf, ""); err != nil {
		return nil, err
	}
	return inf.GetIndexer(), nil
}

// start runs an informer whose every event marks what it may have changed (marked: by key, the
// informer's group/kind/namespace, for the set's objects; by selector for pods and ReplicaSets,
// whose key is empty) and kicks the loop, and returns its store; what no verdict reads is
// dropped from each object first (slim).
func (w *watches) start(ctx context.Context, inf cache.SharedIndexInformer, key string) (cache.Store, error) {
	if err := inf.SetTransform(slim); err != nil {
		return nil, err
	}
	notify := func(obj any) {
		w.marked(key, obj)
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { notify(obj) },
		UpdateFunc: func(old, obj any) { w.marked(key, old); notify(obj) }, // labels may have changed
		DeleteFunc: func(obj any) { notify(obj) },
	})
	if err != nil {
		return nil, err
	}
	w.synced = append(w.synced, reg.HasSynced)
	go inf.RunWithContext(ctx)
	return inf.GetStore(), nil
}

// loop checks every target once, then those the informers' changes concern, and each whose
// unschedulable pod's grace ends, until all are done, one fails, or ctx ends. Each round looks
// at what is due alone, not at every target: at a thousand workloads, a walk over all of them
// for each batch of pod events was a tenth of toa-apply's processor.
func (w *watches) loop(ctx context.Context, targets []*target, opts WaitOptions) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	p := &progress{undone: len(targets), rechecking: map[*target]bool{}}
	due := targets
	for {
		if err := p.check(due, time.Now(), opts); err != nil || p.undone == 0 {
			return err
		}
		if at := p.earliest(); !at.IsZero() {
			timer.Reset(time.Until(at))
		}
		select {
		case <-ctx.Done():
			return waitEnd(ctx, targets)
		case <-w.kick:
		case <-timer.C:
		}
		due = w.due(time.Now(), p)
	}
}

// progress is where a wait's targets stand: how many are not done, and which to check again at
// a time although nothing changes (an unschedulable pod's grace).
type progress struct {
	undone     int
	rechecking map[*target]bool
}

// check checks the targets due, in order, reporting each change of status; the first failure
// ends it.
func (p *progress) check(due []*target, now time.Time, opts WaitOptions) error {
	for _, t := range due {
		wasDone := t.reported && t.last.Done
		s, at, err := t.check(now, opts.UnschedulableGrace)
		if err != nil {
			return err
		}
		t.recheck = at
		if at.IsZero() {
			delete(p.rechecking, t)
		} else {
			p.rechecking[t] = true
		}
		if !t.reported || s.Done != t.last.Done || s.Message != t.last.Message {
			t.last, t.reported = s, true
			if opts.OnStatus != nil {
				opts.OnStatus(s)
			}
		}
		switch {
		case t.last.Done && !wasDone:
			p.undone--
		case !t.last.Done && wasDone:
			p.undone++
		}
		if s.Failure != nil {
			return s.Failure
		}
	}
	return nil
}

// earliest is the first time a target is to be checked again although nothing changes; zero
// for none.
func (p *progress) earliest() time.Time {
	var at time.Time
	for t := range p.rechecking {
		if at.IsZero() || t.recheck.Before(at) {
			at = t.recheck
		}
	}
	return at
}

// due are the targets the informers' changes marked and those whose recheck has come, in the
// order the targets were given.
func (w *watches) due(now time.Time, p *progress) []*target {
	marked := w.takeDirty()
	for t := range p.rechecking {
		if !now.Before(t.recheck) {
			marked[t] = true
		}
	}
	due := make([]*target, 0, len(marked))
	for t := range marked {
		due = append(due, t)
	}
	slices.SortFunc(due, func(a, b *target) int { return cmp.Compare(a.order, b.order) })
	return due
}

// check is where a target stands in the informers' stores.
func (t *target) check(now time.Time, grace time.Duration) (Status, time.Time, error) {
	s := t.status()
	obj, exists, err := t.objects.GetByKey(cache.ObjectName{Namespace: t.ref.Namespace, Name: t.ref.Name}.String())
	if err != nil {
		return s, time.Time{}, err
	}
	if !exists {
		switch {
		case t.pruned:
			s.Done, s.Message = true, "pruned, gone with its pods"
		case t.seen:
			return s, time.Time{}, fmt.Errorf("%s was deleted while its rollout was awaited", s.words())
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
	st := t.verdict(obj, now, grace)
	s.Done, s.Message, s.Failure = st.Done, st.Message, st.Failure
	if st.Failure != nil {
		s.Message = strings.TrimPrefix(st.Failure.Error(), s.words()+": ")
	}
	return s, st.Recheck, nil
}

// verdict is the verdict of the object's kind on it, with the pods it owns.
func (t *target) verdict(obj any, now time.Time, grace time.Duration) status.State {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return status.CheckDeployment(o, t.replicaSets(), t.pods(), now, grace)
	case *appsv1.StatefulSet:
		return status.CheckStatefulSet(o, t.pods(), now, grace)
	case *appsv1.DaemonSet:
		return status.CheckDaemonSet(o, t.pods(), now, grace)
	case *batchv1.Job:
		return status.CheckJob(o, t.pods(), now, grace)
	case *unstructured.Unstructured:
		return status.CheckConditions(o)
	}
	return status.State{Done: true, Message: fmt.Sprintf("not awaited: an object of type %T", obj)}
}

// selectorOf is the pod selector of an applied workload, from the object the apply returned
// (for a Job, the selector the API server gave it).
func selectorOf(applied map[string]*unstructured.Unstructured, t *target) (labels.Selector, error) {
	obj := applied[t.ref.key()]
	what := t.status().words()
	if obj == nil {
		return nil, fmt.Errorf("%s: not among the applied objects", what)
	}
	m, found, err := unstructured.NestedMap(obj.Object, "spec", "selector")
	if err != nil || !found {
		return nil, fmt.Errorf("%s: the applied object has no spec.selector", what)
	}
	var ls metav1.LabelSelector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &ls); err != nil {
		return nil, fmt.Errorf("read the selector of %s: %w", what, err)
	}
	sel, err := metav1.LabelSelectorAsSelector(&ls)
	if err != nil {
		return nil, fmt.Errorf("%s: selector: %w", what, err)
	}
	return sel, nil
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
				s = t.status()
				s.Message = "not seen yet"
			}
			a.Objects = append(a.Objects, s)
		}
	}
	slices.SortFunc(a.Objects, func(x, y Status) int { return strings.Compare(x.Object(), y.Object()) })
	return fault.TimedOut(a)
}
