// Package chartest checks the Helm chart in deploy/helm/warmpath with
// Helm's own Go SDK: it loads and lints the chart, renders it with the
// values files in testdata/, decodes every manifest strictly into the
// Kubernetes types, checks that the objects agree with each other and
// loads the rendered warmpath.yaml with warmpath's own strict loader.
// It is a module of its own (go.mod) so that Helm's dependencies stay out
// of the product's; run it with go -C deploy/helm/chartest test ./...
package chartest
