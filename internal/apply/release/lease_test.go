package release

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/toa-deploy/toa-deploy/internal/cluster/clustertest"
	"github.com/toa-deploy/toa-deploy/rollout"
)

func TestLease(t *testing.T) {
	ctx := context.Background()
	k := clustertest.New()
	set := rollout.NewSet("shop", "ns")
	leases := k.Typed.CoordinationV1().Leases("ns")

	first, err := acquire(ctx, k, set, "run 1", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = acquire(ctx, k, set, "run 2", nil)
	var held *HeldError
	if !errors.As(err, &held) || held.Holder != "run 1" || !strings.Contains(err.Error(), "run 1 holds the lease toa-shop since") {
		t.Errorf("a second run: %v, want run 1 named", err)
	}
	first.release()
	if _, err := leases.Get(ctx, "toa-shop", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the lease after release: %v, want it gone", err)
	}

	// a holder that died: not renewed for longer than its duration
	dead := metav1.NewMicroTime(time.Now().Add(-LeaseDuration - time.Second))
	holder, seconds := "run 3", int32(LeaseDuration/time.Second)
	if _, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "toa-shop", Namespace: "ns"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, AcquireTime: &dead, RenewTime: &dead}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var warned []string
	second, err := acquire(ctx, k, set, "run 4", func(f string, args ...any) { warned = append(warned, f) })
	if err != nil {
		t.Fatalf("a dead holder's lease: %v, want it taken over", err)
	}
	if l, _ := leases.Get(ctx, "toa-shop", metav1.GetOptions{}); l == nil || *l.Spec.HolderIdentity != "run 4" || *l.Spec.LeaseTransitions != 1 || len(warned) != 1 {
		t.Errorf("the lease taken over: %+v, warnings %v", l, warned)
	}
	second.release()

	// credentials that may not take leases: the rule to add
	k.Typed.(*fake.Clientset).PrependReactor("get", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "toa-shop", errors.New("RBAC"))
	})
	_, err = acquire(ctx, k, set, "run 5", nil)
	if err == nil || !strings.Contains(err.Error(), "{apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get, create, update, delete]}") {
		t.Errorf("a lease the credentials may not take: %v", err)
	}
}
