package revision

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/rollout"
)

// composition is a Deployment, a Service and a ConfigMap as toa-push writes them, the image
// pinned by a digest of its own (digests do not compress: they are most of a revision).
func composition(i, gen int) []*unstructured.Unstructured {
	name := fmt.Sprintf("c%04d", i)
	digest := fmt.Sprintf("%x", sha256.Sum256([]byte(fmt.Sprintf("%s-%d", name, gen))))
	out := make([]*unstructured.Unstructured, 0, len(compositionJSON))
	for _, doc := range compositionJSON {
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON([]byte(strings.NewReplacer("zzname", name, "zzdigest", digest).Replace(doc))); err != nil {
			panic(err)
		}
		out = append(out, obj)
	}
	return out
}

// compositionJSON are the objects of a composition zzname with the image digest zzdigest, as JSON:
// YAML is read once, the thousands of compositions are replaced in it.
var compositionJSON = func() []string {
	var out []string
	for _, d := range compositionYAML("zzname", "zzdigest") {
		data, err := yaml.YAMLToJSON([]byte(d))
		if err != nil {
			panic(err)
		}
		out = append(out, string(data))
	}
	return out
}()

func compositionYAML(name, digest string) []string {
	return []string{fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {labels: {toa/context: large}, name: composition-%[1]s}
spec:
  progressDeadlineSeconds: 900
  replicas: 2
  selector: {matchLabels: {toa/composition: %[1]s}}
  strategy: {rollingUpdate: {maxSurge: 100%%, maxUnavailable: 0}, type: RollingUpdate}
  template:
    metadata:
      labels: {toa/component-large-%[1]s: "1", toa/composition: %[1]s}
    spec:
      containers:
      - env:
        - {name: TOA_CONTEXT, value: large}
        - {name: TOA_ENV, value: default}
        - {name: TOA_AMQP_CONTEXT, value: '{".":["amqp://rabbitmq"]}'}
        - name: TOA_AMQP_CONTEXT__USERNAME
          valueFrom: {secretKeyRef: {key: username, name: toa-amqp-context.default}}
        - {name: TOA_TELEMETRY_READY, value: '{"enabled":true,"path":"/.ready","port":8001}'}
        - {name: NODE_OPTIONS, value: --max-old-space-size=192}
        envFrom: [{configMapRef: {name: config-%[1]s}}]
        image: 127.0.0.1:5000/large/composition-%[1]s@sha256:%[2]s
        lifecycle: {preStop: {exec: {command: [sleep, "5"]}}}
        name: %[1]s
        ports: [{containerPort: 8001}]
        readinessProbe: {failureThreshold: 5, httpGet: {path: /.ready, port: 8001}, periodSeconds: 2, timeoutSeconds: 3}
        resources: {limits: {cpu: 500m, memory: 256Mi}, requests: {cpu: 100m, memory: 128Mi}}
      terminationGracePeriodSeconds: 10
`, name, digest),
		fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {labels: {toa/context: large}, name: large-%[1]s}
spec:
  ports: [{name: http-binding, port: 3000, protocol: TCP, targetPort: 3000}]
  selector: {toa/component-large-%[1]s: "1"}
`, name),
		fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {labels: {toa/context: large}, name: config-%[1]s}
data: {TOA_COMPONENT: large.%[1]s, LOG_LEVEL: info}
`, name)}
}

func compositions(n, gen int) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for i := range n {
		out = append(out, composition(i, gen)...)
	}
	return out
}

// The revisions of an application of 1,000 compositions (3,000 objects, 1,000 images pinned by
// digest) fit a Secret each, on the real API server: recorded, listed and read back within
// seconds. The images no longer go into an annotation, whose 256 KiB such an application
// came near and 2,400 compositions passed.
func TestLargeRevisions(t *testing.T) {
	t.Parallel()
	cp := harness.OnControlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	set := rollout.NewSet("large", cp.Namespace)
	// the parent, from an apply of one object
	seed := compositions(1, 0)[2]
	if _, err := rollout.Apply(ctx, cp.Client, []*unstructured.Unstructured{seed}, rollout.Options{Namespace: cp.Namespace, Prune: true}); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	for gen := range 2 {
		objects := compositions(n, gen)
		start := time.Now()
		rev, err := Record(ctx, cp.Client, set, objects, RecordOptions{Description: "apply", Version: "v0.0.0-test"})
		if err != nil {
			t.Fatalf("record %d objects: %v", len(objects), err)
		}
		t.Logf("revision %d of %d objects recorded in %s", rev.Number, len(objects), time.Since(start).Round(time.Millisecond))
	}
	secret, err := cp.Client.Typed.CoreV1().Secrets(cp.Namespace).Get(ctx, set.Name+".v2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored, annotations := 0, 0
	for _, v := range secret.Data {
		stored += len(v)
	}
	for k, v := range secret.Annotations {
		annotations += len(k) + len(v)
	}
	t.Logf("secret/%s: %d KiB of data, %d B of annotations", secret.Name, stored>>10, annotations)
	if stored > 512<<10 || annotations > 4<<10 {
		t.Errorf("secret/%s holds %d KiB of data and %d B of annotations: 1,000 compositions should take a fraction of a Secret", secret.Name, stored>>10, annotations)
	}

	start := time.Now()
	h, err := Read(ctx, cp.Client, set)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("history read in %s", time.Since(start).Round(time.Millisecond))
	if len(h.Revisions) != 2 || len(h.Skipped) != 0 {
		t.Fatalf("history: %d revisions, skipped %v; want 2", len(h.Revisions), h.Skipped)
	}
	if r := h.Revisions[1]; len(r.Images) != n || r.Objects != 3*n || !strings.HasPrefix(r.Images[0], "127.0.0.1:5000/large/composition-c0000@sha256:") {
		t.Errorf("revision 2: %d images (%.60q...), %d objects; want %d and %d", len(r.Images), r.Images, r.Objects, n, 3*n)
	}
	start = time.Now()
	rev, objects, err := Load(ctx, cp.Client, set, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("revision %d decoded in %s", rev.Number, time.Since(start).Round(time.Millisecond))
	if len(objects) != 3*n || objects[0].GetName() != "composition-c0000" {
		t.Errorf("revision 1 decoded to %d objects, want %d", len(objects), 3*n)
	}
}

// An application a revision cannot hold is refused before anything is applied (release calls
// Check first), as bad input that says what to do.
func TestCheck(t *testing.T) {
	if err := Check(compositions(1000, 0)); err != nil {
		t.Errorf("1,000 compositions: %v", err)
	}
	tooMany := compositions(3334, 0) // 10,002 objects
	if err := Check(tooMany); err == nil || fault.ClassOf(err) != fault.ClassInput || !strings.Contains(err.Error(), "split it into two Toa contexts") {
		t.Errorf("10,002 objects: %v, want bad input saying what to do", err)
	}
}
