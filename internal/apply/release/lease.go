package release

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toa-deploy/toa-deploy/internal/cluster"
	"github.com/toa-deploy/toa-deploy/rollout"
)

// LeaseDuration is how long a lease's holder may go without renewing it before another run
// takes it over: the holder died (killed, its runner gone). A live holder renews it every
// LeaseDuration/3.
const LeaseDuration = 30 * time.Second

// HeldError is an application another run is applying, rolling back or deleting.
type HeldError struct {
	Set     rollout.Set
	Holder  string
	Since   time.Time // when it took the lease
	Renewed time.Time
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("another toa-apply is at work on %s in namespace %s: %s holds the lease %s since %s (renewed %s ago); "+
		"wait until it ends and run again (a holder that died is taken over %s after it last renewed the lease)",
		e.Set.Name, e.Set.Namespace, e.Holder, e.Set.Name, e.Since.UTC().Format("2006-01-02 15:04:05 UTC"),
		time.Since(e.Renewed).Round(time.Second), LeaseDuration)
}

// LeaseForbiddenError is a lease the credentials may not take.
type LeaseForbiddenError struct {
	Set rollout.Set
	Err error
}

func (e *LeaseForbiddenError) Error() string {
	return fmt.Sprintf("toa-apply takes the Lease %s in namespace %s so that one apply of an application runs at a time, and the API server refused it (%v): "+
		"add to the Role of the namespace the rule {apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get, create, update, delete]}",
		e.Set.Name, e.Set.Namespace, e.Err)
}

// Unwrap is the API server's refusal, so that the run's error says whose credentials were refused.
func (e *LeaseForbiddenError) Unwrap() error { return e.Err }

// lease is a Lease held by this run, renewed until released.
type lease struct {
	k      *cluster.Client
	set    rollout.Set
	warnf  func(string, ...any)
	mu     sync.Mutex
	held   *coordinationv1.Lease
	stop   chan struct{}
	done   chan struct{}
	holder string
}

// holderName says who this run is: the machine and the process.
func holderName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("toa-apply on %s, pid %d", host, os.Getpid())
}

// acquire takes the set's Lease, or says who holds it; a lease not renewed for LeaseDuration is
// taken over. The lease is renewed until release.
func acquire(ctx context.Context, k *cluster.Client, set rollout.Set, holder string, warnf func(string, ...any)) (*lease, error) {
	leases := k.Typed.CoordinationV1().Leases(set.Namespace)
	for attempt := 0; ; attempt++ {
		now := metav1.NowMicro()
		seconds := int32(LeaseDuration / time.Second)
		live, err := leases.Get(ctx, set.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: set.Name, Namespace: set.Namespace,
				Labels: map[string]string{rollout.LabelContext: set.Context()}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, AcquireTime: &now, RenewTime: &now}}
			live, err = leases.Create(ctx, l, metav1.CreateOptions{FieldManager: rollout.FieldManager})
			if apierrors.IsAlreadyExists(err) && attempt < 3 {
				continue // another run made it first: read who
			}
		case err != nil:
		case heldByOther(live, holder, time.Now()):
			return nil, heldError(set, live)
		default: // free, or its holder died: take it over
			transitions := int32(1)
			if live.Spec.LeaseTransitions != nil {
				transitions = *live.Spec.LeaseTransitions + 1
			}
			l := live.DeepCopy()
			l.Spec = coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, AcquireTime: &now, RenewTime: &now, LeaseTransitions: &transitions}
			if owner := live.Spec.HolderIdentity; owner != nil && *owner != "" && *owner != holder && warnf != nil {
				warnf("the lease %s was held by %s, who has not renewed it for %s or more: taken over", set.Name, *owner, LeaseDuration)
			}
			live, err = leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: rollout.FieldManager})
			if apierrors.IsConflict(err) && attempt < 3 {
				continue // another run took it meanwhile: read who
			}
		}
		if apierrors.IsForbidden(err) {
			return nil, &LeaseForbiddenError{Set: set, Err: err}
		}
		if err != nil {
			return nil, fmt.Errorf("take the lease %s in namespace %s: %w", set.Name, set.Namespace, err)
		}
		l := &lease{k: k, set: set, warnf: warnf, held: live, holder: holder, stop: make(chan struct{}), done: make(chan struct{})}
		go l.renew()
		return l, nil
	}
}

func heldByOther(l *coordinationv1.Lease, holder string, now time.Time) bool {
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || *l.Spec.HolderIdentity == holder {
		return false
	}
	renewed := l.CreationTimestamp.Time
	if l.Spec.RenewTime != nil {
		renewed = l.Spec.RenewTime.Time
	}
	// never longer than LeaseDuration, whatever the lease declares: a holder that died is taken
	// over within the bound
	d := LeaseDuration
	if l.Spec.LeaseDurationSeconds != nil {
		d = min(d, time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second)
	}
	return now.Before(renewed.Add(d))
}

func heldError(set rollout.Set, l *coordinationv1.Lease) *HeldError {
	e := &HeldError{Set: set, Holder: *l.Spec.HolderIdentity}
	if l.Spec.AcquireTime != nil {
		e.Since = l.Spec.AcquireTime.Time
	}
	if l.Spec.RenewTime != nil {
		e.Renewed = l.Spec.RenewTime.Time
	}
	return e
}

// renew renews the lease every third of its duration until release.
func (l *lease) renew() {
	defer close(l.done)
	t := time.NewTicker(LeaseDuration / 3)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		l.mu.Lock()
		next := l.held.DeepCopy()
		now := metav1.NowMicro()
		next.Spec.RenewTime = &now
		ctx, cancel := context.WithTimeout(context.Background(), LeaseDuration/3)
		out, err := l.k.Typed.CoordinationV1().Leases(l.set.Namespace).Update(ctx, next, metav1.UpdateOptions{FieldManager: rollout.FieldManager})
		cancel()
		if err == nil {
			l.held = out
		} else if l.warnf != nil {
			l.warnf("renew the lease %s: %v", l.set.Name, err)
		}
		l.mu.Unlock()
	}
}

// release stops renewing and deletes the lease, if it is still the one this run holds.
func (l *lease) release() {
	close(l.stop)
	<-l.done
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	rv := l.held.ResourceVersion
	err := l.k.Typed.CoordinationV1().Leases(l.set.Namespace).Delete(ctx, l.set.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && l.warnf != nil {
		l.warnf("release the lease %s: %v", l.set.Name, err)
	}
}
