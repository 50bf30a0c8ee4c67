package release

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/toa-deploy/toa-deploy/internal/apply/revision"
	"github.com/toa-deploy/toa-deploy/internal/cluster"
	"github.com/toa-deploy/toa-deploy/rollout"
)

// OnCluster are the Steps on a cluster, all through the run's one client.
type OnCluster struct {
	Client *cluster.Client
	// WaitOptions tune the wait: how its progress is shown.
	WaitOptions rollout.WaitOptions
	// Holder names this run in the lease; the machine and process when "".
	Holder string
	// Warnf hears what the lease has to say (a holder taken over, a renewal that failed).
	Warnf func(format string, args ...any)
}

var _ Steps = (*OnCluster)(nil)

// CheckNamespaces refuses namespaces being deleted.
func (s *OnCluster) CheckNamespaces(ctx context.Context, namespaces ...string) error {
	return rollout.CheckNamespaces(ctx, s.Client, namespaces...)
}

// Lock takes the application's lease.
func (s *OnCluster) Lock(ctx context.Context, set rollout.Set) (func(), error) {
	holder := s.Holder
	if holder == "" {
		holder = holderName()
	}
	l, err := acquire(ctx, s.Client, set, holder, s.Warnf)
	if err != nil {
		return nil, err
	}
	return l.release, nil
}

// Apply is rollout.Apply.
func (s *OnCluster) Apply(ctx context.Context, objects []*unstructured.Unstructured, opts rollout.Options) (*rollout.Result, error) {
	return rollout.Apply(ctx, s.Client, objects, opts)
}

// Wait is rollout.Wait on the run's client.
func (s *OnCluster) Wait(ctx context.Context, res *rollout.Result) error {
	return rollout.Wait(ctx, s.Client, res, s.WaitOptions)
}

// Delete is rollout.Delete.
func (s *OnCluster) Delete(ctx context.Context, objects []*unstructured.Unstructured, opts rollout.Options) (*rollout.Result, error) {
	return rollout.Delete(ctx, s.Client, objects, opts)
}

// DeleteRevisions is revision.DeleteAll.
func (s *OnCluster) DeleteRevisions(ctx context.Context, set rollout.Set) error {
	return revision.DeleteAll(ctx, s.Client, set)
}

// History is revision.Read.
func (s *OnCluster) History(ctx context.Context, set rollout.Set) (revision.History, error) {
	return revision.Read(ctx, s.Client, set)
}

// Applications is rollout.Applications.
func (s *OnCluster) Applications(ctx context.Context, namespace string) ([]string, error) {
	return rollout.Applications(ctx, s.Client, namespace)
}

// Objects decodes a revision.
func (s *OnCluster) Objects(rev revision.Revision) ([]*unstructured.Unstructured, error) {
	return rev.Decode()
}

// Record is revision.Record.
func (s *OnCluster) Record(ctx context.Context, set rollout.Set, objects []*unstructured.Unstructured, opts revision.RecordOptions) (revision.Revision, error) {
	return revision.Record(ctx, s.Client, set, objects, opts)
}
