// Package cluster is toa-apply's one connection to a Kubernetes cluster for a run: the client
// configuration loaded as kubectl loads it, and a Client built once from it (the dynamic client,
// the typed clientset and a REST mapper over a discovery cache kept for the run) that the apply,
// the wait, the revisions and the lock all share. Before it, each entry point of rollout built a
// client and a discovery cache of its own. Every request is bounded (WithRequestTimeout).
package cluster

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// Client is what a run talks to the cluster with. Unit tests make one of client-go's fakes
// (clustertest.New).
type Client struct {
	Dynamic dynamic.Interface
	Typed   kubernetes.Interface
	// Metadata lists objects' metadata alone (PartialObjectMetadata): which exist, whose they
	// are, without their data (a namespace's Secrets, a Helm release's among them).
	Metadata metadata.Interface
	// Mapper maps kinds to resources from discovery, cached for the run; Reset after CRDs are
	// added.
	Mapper meta.ResettableRESTMapper
	// Host is the API server's address, for messages.
	Host string
}

// MaxInFlight is how many requests a run has in flight at most (watches aside): enough to keep an
// API server's handlers busy, few enough that one run never takes a large share of a server's
// concurrency (API Priority and Fairness gives a priority level tens to hundreds of seats).
const MaxInFlight = 16

// New builds the clients of cfg, once for a run, over one HTTP client: one connection pool, and
// at most MaxInFlight requests in flight.
//
// There is no client-side rate limit: the API server's Priority and Fairness decides how fast a
// run goes, as it does for the controllers. A server that sheds load answers 429 with
// Retry-After, and client-go waits that long and sends the request again (up to 10 times, any
// verb), which it does whether or not a client-side limiter is set. client-go's default of 5
// requests a second, and the 50 this package set before, made a run of hundreds of objects wait
// on itself: ten seconds of a no-change apply of 300 objects were spent in the limiter.
func New(cfg *rest.Config) (*Client, error) {
	return newWith(cfg, MaxInFlight)
}

func newWith(cfg *rest.Config, maxInFlight int) (*Client, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 && cfg.RateLimiter == nil {
		cfg.QPS = -1 // no limiter (0 would be client-go's default of 5)
	}
	cfg.WrapTransport = withMaxInFlight(cfg.WrapTransport, maxInFlight)
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", cfg.Host, err)
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", cfg.Host, err)
	}
	disco, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("discovery client for %s: %w", cfg.Host, err)
	}
	cs, err := kubernetes.NewForConfigAndClient(protobuf(cfg), httpClient)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", cfg.Host, err)
	}
	md, err := metadata.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", cfg.Host, err)
	}
	return &Client{Dynamic: dyn, Typed: cs, Metadata: md, Host: cfg.Host,
		Mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))}, nil
}

// protobuf is cfg for the typed clients, which speak Kubernetes' protobuf as the controllers
// do: the wait's watches of a thousand workloads' pods decode several times faster, and the API
// server, which already encodes each event in protobuf for the controllers, need not encode it in
// JSON too. A server that cannot answer in it answers in JSON.
func protobuf(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	if cfg.ContentType == "" {
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
		cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	}
	return cfg
}

// Kubeconfig says where the client configuration comes from, as kubectl's flags do.
type Kubeconfig struct {
	Path      string // --kubeconfig; else KUBECONFIG, ~/.kube/config, in-cluster
	Context   string // --context
	Namespace string // -n
}

// Target is a loaded client configuration: where to connect, the namespace to apply to, and
// whose credentials these are (for a server that refuses them).
type Target struct {
	Config      *rest.Config
	Namespace   string
	Credentials string
}

// Load reads the client configuration as kubectl does: the path, else KUBECONFIG, else
// ~/.kube/config, else the pod's in-cluster configuration; the context picks the context; the
// namespace is k.Namespace, else the context's, else default (in a pod, the pod's). A
// configuration that cannot be read is a *fault.Input.
func Load(k Kubeconfig) (Target, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.Path
	overrides := &clientcmd.ConfigOverrides{CurrentContext: k.Context}
	overrides.Context.Namespace = k.Namespace
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		hint := ""
		if clientcmd.IsEmptyConfig(err) {
			hint = ": give --kubeconfig, set KUBECONFIG, or run in a pod"
		}
		return Target{}, fault.BadInput(fmt.Errorf("kubeconfig: %w%s", err, hint))
	}
	namespace, _, err := cc.Namespace()
	if err != nil {
		return Target{}, fault.BadInput(fmt.Errorf("kubeconfig: namespace: %w", err))
	}
	if namespace == "" {
		namespace = "default"
	}
	return Target{Config: cfg, Namespace: namespace, Credentials: credentialsOf(cc, rules, cfg)}, nil
}

// credentialsOf names where the client's credentials come from, for a server that refuses them:
// the user of the context in the kubeconfig file, or the pod's service account.
func credentialsOf(cc clientcmd.ClientConfig, rules *clientcmd.ClientConfigLoadingRules, cfg *rest.Config) string {
	raw, err := cc.RawConfig()
	if err != nil || len(raw.Contexts) == 0 {
		return "the pod's service account token (in-cluster configuration)"
	}
	name := raw.CurrentContext
	if ctx := raw.Contexts[name]; ctx != nil {
		file := rules.GetDefaultFilename()
		if ctx.LocationOfOrigin != "" {
			file = ctx.LocationOfOrigin
		}
		return fmt.Sprintf("user %q of context %q in %s", ctx.AuthInfo, name, file)
	}
	return "the credentials for " + cfg.Host
}
