package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// The overlay places every Deployment on the real node and adds the variables to its first
// container, after those it has.
func TestRealNodeOverlay(t *testing.T) {
	base := filepath.Join(t.TempDir(), "deployment")
	writeFiles(t, base, map[string]string{
		"kustomization.yaml": "resources: [front.yaml, service.yaml]\n",
		"front.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: composition-front}
spec:
  selector: {matchLabels: {app: front}}
  template:
    metadata: {labels: {app: front}}
    spec:
      containers:
      - name: front
        image: example/front
        env: [{name: TOA_ENV, value: dev}]
`,
		"service.yaml": "apiVersion: v1\nkind: Service\nmetadata: {name: front}\nspec: {ports: [{port: 80}]}\n",
	})
	dir := RealNodeOverlay(t, base, map[string]string{"TOA_STANDIN_STOP_DELAY": "3", "A_FIRST": "1"})
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatal(err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"nodeSelector:\n        toa-test/node: real",
		"tolerations:\n      - effect: NoSchedule\n        key: toa-test/real-node\n        operator: Equal\n        value: \"true\"",
		"- name: TOA_ENV\n          value: dev\n        - name: A_FIRST\n          value: \"1\"\n        - name: TOA_STANDIN_STOP_DELAY\n          value: \"3\"",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the overlay rendered no\n%s\nin\n%s", want, out)
		}
	}
	if strings.Count(string(out), "nodeSelector") != 1 {
		t.Errorf("the Service got a nodeSelector too:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "kustomization.yaml")); err != nil {
		t.Error(err)
	}
}
