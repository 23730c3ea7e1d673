// Package kubernetes holds Ballet's Kubernetes manifests (a kustomize base
// and a production overlay) and the tests that render them with kustomize
// and decode every object strictly into its Kubernetes or KEDA API type.
// It is a module of its own, so that those dependencies stay out of the
// product's go.mod.
package kubernetes
