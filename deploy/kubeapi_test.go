//go:build kube

package deploy_test

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/warmpath/warmpath/e2e/kubeapi"
)

// TestManifestsOnARealAPIServer creates every object of this directory
// (in kustomization.yaml's order, in namespace llm) and the InferencePools
// of envoy/kubernetes/inferencepool.yaml on a real API server, with strict
// field validation and the InferencePool CRD's schema: what decodes into
// client-go's types may still be refused there. Run by
// `go tool task e2e:kube`.
func TestManifestsOnARealAPIServer(t *testing.T) {
	t.Parallel()
	s := kubeapi.Start(t, "..").StartAPIServer(kubeapi.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := s.Apply(ctx, kubeapi.InferencePoolCRD(t)); err != nil {
		t.Fatal(err)
	}
	for _, f := range manifestFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(ctx, b); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	b, err := os.ReadFile("../envoy/kubernetes/inferencepool.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Only the pools: the HTTPRoute needs the Gateway API's CRDs and a
	// gateway, which are not installed here.
	var pools [][]byte
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		if bytes.Contains(doc, []byte("\nkind: InferencePool\n")) {
			pools = append(pools, doc)
		}
	}
	if len(pools) == 0 {
		t.Fatal("no InferencePool in envoy/kubernetes/inferencepool.yaml")
	}
	if err := s.Apply(ctx, bytes.Join(pools, []byte("\n---\n"))); err != nil {
		t.Errorf("envoy/kubernetes/inferencepool.yaml: %v", err)
	}
	// What was created is what the files say, as the server stored it.
	cs, _ := s.Admin()
	dep, err := cs.AppsV1().Deployments("llm").Get(ctx, "warmpath", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dep.Spec.Template.Spec.ServiceAccountName != "warmpath" {
		t.Errorf("stored Deployment runs as %q", dep.Spec.Template.Spec.ServiceAccountName)
	}
}
