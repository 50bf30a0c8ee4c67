package rollout

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/toa-deploy/toa-deploy/fault"
)

// client is what apply, prune, delete, wait and the revisions talk to the cluster with: the
// dynamic client, the typed one for the kinds the wait reads, and a REST mapper from discovery,
// kept in memory for the run and reset when CRDs are added. Unit tests make one of client-go's
// fakes.
type client struct {
	dyn    dynamic.Interface
	cs     kubernetes.Interface
	mapper meta.ResettableRESTMapper
}

func newClient(cfg *rest.Config) (*client, error) {
	cfg = rest.CopyConfig(cfg)
	// client-go's default of 5 requests a second would make a run of a few dozen objects wait on
	// the client rather than on the cluster.
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 50, 100
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", cfg.Host, err)
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client for %s: %w", cfg.Host, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", cfg.Host, err)
	}
	return &client{dyn: dyn, cs: cs, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))}, nil
}

// mapping finds the resource of a kind; a kind the cluster does not serve is the input's fault.
func (c *client) mapping(gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		return nil, fault.BadInput(fmt.Errorf("the cluster has no kind %s in %s: is its CustomResourceDefinition installed, or the apiVersion misspelt?", gvk.Kind, gvk.GroupVersion()))
	}
	if err != nil {
		return nil, fmt.Errorf("find the resource of %s: %w", gvk, err)
	}
	return m, nil
}

// resource is the dynamic client of a mapping in a namespace (ignored for cluster-scoped kinds).
func (c *client) resource(m *meta.RESTMapping, namespace string) dynamic.ResourceInterface {
	if m.Scope.Name() == meta.RESTScopeNameRoot {
		return c.dyn.Resource(m.Resource)
	}
	return c.dyn.Resource(m.Resource).Namespace(namespace)
}
