//go:build tools

// Package tools pins the Kubernetes API server and etcd that package
// kubeapi runs: `go tool task e2e:kube` builds them from this module into
// bin/kube. The Kubernetes module's staging modules are replaced by their
// published versions, as a module that depends on k8s.io/kubernetes must.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
