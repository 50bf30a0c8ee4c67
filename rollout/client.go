package rollout

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	kube "github.com/toa-deploy/toa-deploy/internal/cluster"
	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// client is the run's cluster.Client as apply, prune, delete and wait use it: the dynamic
// client, the typed one for the kinds the wait reads, the metadata one for what exists, and the
// REST mapper, reset when CRDs are added.
type client struct {
	dyn    dynamic.Interface
	cs     kubernetes.Interface
	md     metadata.Interface
	mapper meta.ResettableRESTMapper
}

// clientOf is the run's client as this package's own.
func clientOf(k *kube.Client) *client {
	return &client{dyn: k.Dynamic, cs: k.Typed, md: k.Metadata, mapper: k.Mapper}
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
